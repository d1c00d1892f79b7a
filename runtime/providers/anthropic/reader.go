package anthropic

import (
	"encoding/json"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// stopRefusal is the stop reason of a safety refusal; it ends the attempt as
// content_filtered instead of becoming a finish reason.
const stopRefusal = "refusal"

// reader turns one provider response into event data and the attempt's result. It holds
// the state both the streaming and the non-streaming paths share.
type reader struct {
	providerhttp.Events
	log       logr.Logger
	secret    string // the credential, only to drop provider identifiers that echo it
	requestID string // the request-id response header
	model     string // the model the response names (gen_ai.response.model)
}

// answeredBy keeps the model name the response gives, when it is an identifier.
func (r *reader) answeredBy(model string) {
	if r.model == "" {
		r.model = r.clean(model)
	}
}

// clean keeps a provider-supplied identifier only when it looks like one and does not
// contain the credential (providerhttp.Identifier).
func (r *reader) clean(s string) string {
	return providerhttp.Identifier(s, r.secret)
}

// toolCall screens a tool_use block's id and name alike (providerhttp.Identifier,
// providerhttp.ToolName): ok is false when either is not one or holds the credential,
// and the answer is then unreadable — a call reported under another id could not be
// answered.
func (r *reader) toolCall(id, name string) (string, string, bool) {
	id, name = r.clean(id), providerhttp.ToolName(name, r.secret)
	return id, name, id != "" && name != ""
}

// finish turns the stop reason into the attempt's result: a refusal is content_filtered
// (the output before it, if any, stays recorded), any other reason is the finish reason
// as the provider named it (end_turn, max_tokens, stop_sequence, tool_use, pause_turn, …)
// when it is an identifier: at most 128 bytes of identifier characters, without the
// credential. Anything else — free text, a huge or hostile value, an echoed key — is
// dropped, so the execution completes without a finish reason.
func (r *reader) finish(stopReason string) (engine.Outcome, error) {
	if stopReason == stopRefusal {
		r.log.Info("Provider refused the request", "requestID", r.requestID)
		f := providerhttp.Failure{Provider: Provider, Code: stopRefusal, RequestID: r.requestID, ContentFiltered: true}
		return engine.Outcome{}, f.Error()
	}
	return engine.Outcome{FinishReason: r.clean(stopReason), ResponseModel: r.model}, nil
}

// responseBlock is a content block of the provider's answer (in a message, or in a
// stream's content_block_start).
type responseBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// usage is the provider's token usage, field for field the shape of providerhttp.Tokens.
// Fields are pointers so that a stream's later, cumulative report overrides exactly the
// fields it carries.
type usage struct {
	Input      *float64 `json:"input_tokens"`
	Output     *float64 `json:"output_tokens"`
	CacheRead  *float64 `json:"cache_read_input_tokens"`
	CacheWrite *float64 `json:"cache_creation_input_tokens"`
	Reasoning  *float64 `json:"-"` // not reported apart by the provider
}

// tokens is u in the protocol's units; nil reports nothing.
func (u *usage) tokens() providerhttp.Tokens {
	if u == nil {
		return providerhttp.Tokens{}
	}
	return providerhttp.Tokens(*u)
}
