package replicate

import (
	"encoding/json"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// jobHandle is the remote-job handle (engine.Emitter.RemoteJob) of a prediction: what
// another replica needs to follow it besides the deployment — its id and the URLs
// Replicate named for it. The credential is never in it: the replica that resumes the
// prediction uses the deployment's, and only on the deployment's origin.
//
//	{"id":"ID","urls":{"get":"https://api.replicate.com/v1/predictions/ID",
//	 "cancel":"https://api.replicate.com/v1/predictions/ID/cancel"}}
type jobHandle struct {
	ID   string         `json:"id"`
	URLs predictionURLs `json:"urls"`
}

// handle returns the remote-job handle of p, or false when no replica could resume p
// from one: its id is not an identifier, its urls.get is outside the endpoint's origin
// (following it fails at once anyway), or a field holds the credential, which must not
// reach the event store.
func (a *adapter) handle(p *prediction) (json.RawMessage, bool) {
	if a.safeID(p.ID) == "" {
		return nil, false
	}
	if _, ok := a.sameOrigin(p.URLs.Get); !ok {
		return nil, false
	}
	b, err := json.Marshal(jobHandle{ID: p.ID, URLs: p.URLs})
	if err != nil || a.holdsToken(b) {
		return nil, false
	}
	return b, true
}

// parseHandle rebuilds the prediction a handle names, with an unknown status. It
// accepts what handle records — an identifier id and a urls.get — and leaves the
// origin checks to their use, as for a prediction Replicate returned.
func (a *adapter) parseHandle(raw json.RawMessage) (*prediction, bool) {
	var h jobHandle
	if err := json.Unmarshal(raw, &h); err != nil || a.safeID(h.ID) == "" || h.URLs.Get == "" {
		return nil, false
	}
	return &prediction{ID: h.ID, URLs: h.URLs}, true
}

// badHandle is the error for a handle this adapter did not record: the runtime's own
// record is broken, so it is internal, and nothing was sent.
func badHandle() *protocol.Error {
	e := protocol.NewError(protocol.CodeInternal, "the recorded provider job cannot be resumed")
	e.ProviderError = &protocol.ProviderError{Provider: Provider}
	return e
}
