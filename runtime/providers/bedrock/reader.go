package bedrock

import (
	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// Stop reasons of a safety intervention; they end the attempt as content_filtered
// instead of becoming a finish reason.
const (
	stopGuardrail       = "guardrail_intervened"
	stopContentFiltered = "content_filtered"
)

// reader turns one provider response into event data and the attempt's result. It holds
// the state both the streaming and the non-streaming paths share.
type reader struct {
	providerhttp.Events
	log       logr.Logger
	secrets   []string // the credential's parts, only to drop identifiers that echo them
	requestID string   // the x-amzn-RequestId response header
}

// clean returns a provider-supplied identifier (request id, error type, stop reason, tool
// call id) when it looks like one and contains no part of the credential, else "".
func (r *reader) clean(s string) string { return providerhttp.Identifier(s, r.secrets...) }

// toolStarted records a tool call's start, after checking the provider's id and name:
// the id must fit the documented toolUseId pattern and the name the tool name pattern
// (a call the client could not answer is not a call), and neither may echo a part of the
// credential (providerhttp.Identifier, providerhttp.ToolName).
func (r *reader) toolStarted(index int, id, name string) error {
	if !toolUseIDRE.MatchString(id) || r.clean(id) != id || providerhttp.ToolName(name, r.secrets...) == "" {
		return r.malformed("toolUse block")
	}
	return r.ToolStarted(index, id, name)
}

// finish turns the stop reason into the attempt's result. A guardrail intervention or a
// content filter stop is content_filtered (the output before it, if any, stays recorded).
// Any other reason is the finish reason as Bedrock names it — end_turn, tool_use,
// max_tokens, stop_sequence, model_context_window_exceeded, … — like every adapter, the
// provider's own (spec/events.md, "execution.completed"), when it is an identifier
// without a secret; anything else is dropped and the execution completes without one.
func (r *reader) finish(stopReason string) (engine.Outcome, error) {
	if stopReason == stopGuardrail || stopReason == stopContentFiltered {
		r.log.Info("Provider filtered the content", "stopReason", stopReason, "requestID", r.requestID)
		f := providerhttp.Failure{Provider: Provider, Code: stopReason, RequestID: r.requestID, ContentFiltered: true}
		return engine.Outcome{}, f.Error()
	}
	return engine.Outcome{FinishReason: r.clean(stopReason)}, nil
}

// usage is the provider's TokenUsage, field for field the shape of providerhttp.Tokens
// (totalTokens, the sum, is not reported). Fields are pointers so that a field the
// provider did not report is left out rather than reported as zero.
type usage struct {
	Input      *float64 `json:"inputTokens"`
	Output     *float64 `json:"outputTokens"`
	CacheRead  *float64 `json:"cacheReadInputTokens"`
	CacheWrite *float64 `json:"cacheWriteInputTokens"`
	Reasoning  *float64 `json:"-"` // not reported apart by the provider
}

// tokens is u in the protocol's units; nil reports nothing.
func (u *usage) tokens() providerhttp.Tokens {
	if u == nil {
		return providerhttp.Tokens{}
	}
	return providerhttp.Tokens(*u)
}
