package providerhttp

import (
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Register adds p to m (engine.Config.Providers) under each of names, the provider
// names of ModelDeployment spec.provider that one adapter serves: what every adapter
// package's Register does.
func Register(m map[string]engine.Provider, p engine.Provider, names ...string) {
	for _, name := range names {
		m[name] = p
	}
}

// Factory returns the engine.Factory that builds an adapter with newAdapter (an adapter
// package's New) and opts, the options its Register was given.
func Factory[O any](newAdapter func(*routing.Deployment, ...O) (engine.Adapter, error), opts ...O) engine.Factory {
	return func(d *routing.Deployment) (engine.Adapter, error) { return newAdapter(d, opts...) }
}

// CheckEncode is the start of every adapter's engine.EncodeCheck: a missing request or
// deployment is invalid_request, and check, the adapter's own refusals, decides the
// rest.
func CheckEncode(req *protocol.Request, d *routing.Deployment, check func(*protocol.Request, *routing.Deployment) *protocol.Error) *protocol.Error {
	if req == nil || d == nil {
		return protocol.NewError(protocol.CodeInvalidRequest, "request is missing")
	}
	return check(req, d)
}
