package anthropic

import (
	"context"
	"net/http"
	"net/url"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const (
	// Provider is the provider name this adapter serves (ModelDeployment spec.provider).
	Provider = "anthropic"
	// DefaultEndpoint is the base URL used when the deployment sets none.
	DefaultEndpoint = "https://api.anthropic.com"
	// APIVersion is the anthropic-version header value the wire mapping is written for.
	APIVersion = "2023-06-01"
	// DefaultMaxTokens is sent as max_tokens, which the API requires, when neither the
	// request (generation.max_output_tokens or anthropic.max_tokens) nor the deployment
	// (its output cap, spec.limits.maxOutputTokens) sets a limit.
	DefaultMaxTokens = 4096
)

// messagesPath is appended to the endpoint.
const messagesPath = "v1/messages"

// Option configures an adapter built by New.
type Option func(*options)

type options struct {
	client *http.Client
	log    logr.Logger
}

// WithHTTPClient makes the adapter send its requests with c instead of the shared
// provider client (providerhttp.Client). The adapter never follows redirects, whatever
// c's CheckRedirect says: a redirect would carry the x-api-key header to another
// location.
// The endpoint fence is the client's dialer's: the binary passes providerhttp.NewClient
// (loopback per --allow-loopback-endpoints); the shared client refuses loopback; a client
// built otherwise (a test's) dials as its transport does.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.client = c }
}

// WithLogger makes the adapter log to l when the attempt's context carries no logger
// (the engine's attempts carry their own). The zero Logger discards.
func WithLogger(l logr.Logger) Option {
	return func(o *options) { o.log = l }
}

// adapter runs attempts against one deployment. It holds only constructor inputs and is
// safe for concurrent use.
type adapter struct {
	url   string
	model string
	cred  routing.Credential
	// d is the deployment the adapter was built for: its capabilities and output cap
	// decide what a request may send.
	d      *routing.Deployment
	client *http.Client
	log    logr.Logger
}

var _ engine.Adapter = (*adapter)(nil)

// Factory builds the adapter for a deployment with the default HTTP client; Register
// installs it.
func Factory(d *routing.Deployment) (engine.Adapter, error) { return New(d) }

var _ engine.Factory = Factory

// Counting is how the Messages API counts the tokens the adapter reports (README.md,
// "Usage"): input_tokens excludes the cached tokens, which cache_read_input_tokens and
// cache_creation_input_tokens report apart; output_tokens includes the extended
// thinking tokens, which the API does not report apart (so none are taken out).
var Counting = pricing.Counting{InputIncludesCache: false, OutputIncludesReasoning: true}

// Register adds the adapter for Provider, built with opts, to m
// (engine.Config.Providers), with CanEncode as its routing-time check and Counting.
func Register(m map[string]engine.Provider, opts ...Option) {
	providerhttp.Register(m, engine.Provider{New: providerhttp.Factory(New, opts...), CanEncode: CanEncode, Operation: "chat",
		Counting: Counting}, Provider)
}

// New returns the adapter for d. It fails with provider_rejected when d cannot be served:
// another provider, no model, no credential, or an endpoint that is not an absolute
// http(s) URL.
func New(d *routing.Deployment, opts ...Option) (engine.Adapter, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if d == nil || d.Provider != Provider {
		return nil, rejected("the deployment is not an anthropic deployment")
	}
	if d.Model == "" {
		return nil, rejected("the deployment has no model")
	}
	if !d.Credential.IsSet() {
		return nil, rejected("the deployment has no credential")
	}
	endpoint := d.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, rejected("the deployment's endpoint is not an absolute http(s) URL")
	}
	target := u.JoinPath(messagesPath).String()

	return &adapter{url: target, model: d.Model, cred: d.Credential, d: d,
		client: providerhttp.Client(o.client), log: o.log}, nil
}

// rejected is a configuration error: the engine records it as provider_rejected.
func rejected(msg string) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderRejected, msg)
	e.ProviderError = &protocol.ProviderError{Provider: Provider}
	return e
}

// Execute implements engine.Adapter: one Messages API call, streamed when the deployment
// declares streaming. A request it refuses (CanEncode's refusals) is returned as an
// engine.NotSent error before anything is sent.
func (a *adapter) Execute(ctx context.Context, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	log := a.logger(ctx)
	if at.Request == nil {
		return engine.Outcome{}, engine.NotSent(invalid(msgMissing))
	}
	stream := a.d.Capabilities.Has(routing.CapsOf(protocol.CapStreaming))
	body, perr := buildRequest(at.Request, a.d, stream)
	if perr != nil {
		return engine.Outcome{}, engine.NotSent(perr)
	}
	payload, err := providerhttp.Marshal(body)
	if err != nil {
		return engine.Outcome{}, err
	}
	header := http.Header{}
	header.Set("x-api-key", a.cred.Reveal())
	header.Set("anthropic-version", APIVersion)
	if stream {
		header.Set("accept", "text/event-stream")
	} else {
		header.Set("accept", "application/json")
	}
	r := &reader{Events: providerhttp.NewEvents(emit), log: log, secret: a.cred.Reveal()}
	return providerhttp.Do(ctx, providerhttp.Call{
		Provider: Provider, Client: a.client, Log: log,
		URL: a.url, Body: payload, Header: header, Failure: r.httpFailure,
	}, func(resp *http.Response) (engine.Outcome, error) {
		r.requestID = r.clean(resp.Header.Get("request-id"))
		if stream {
			return r.readStream(ctx, resp.Body)
		}
		return r.readMessage(ctx, resp.Body)
	})
}

// logger is the attempt's logger, else the one WithLogger gave.
func (a *adapter) logger(ctx context.Context) logr.Logger {
	return providerhttp.Logger(ctx, a.log)
}
