package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// maxCompletionBody bounds a whole non-streaming completion, text plus metadata:
// anything larger is not a Chat Completions answer.
const maxCompletionBody = 16 << 20

// Finish reasons with a meaning of their own here.
const (
	finishContentFilter = "content_filter"
	// quotaCode is the error type and code OpenAI documents for an exhausted quota or
	// billing limit; on a 429 it tells quota_exhausted from rate_limited.
	quotaCode = "insufficient_quota"
	// contentFilterCode is the error code Azure OpenAI (an openai-compatible endpoint)
	// documents for a prompt its content filter rejected.
	contentFilterCode = "content_filter"
)

// apiError is the "error" member of an error body or in-stream error chunk:
// {"message","type","param","code"}. The message is never read, so provider text (which
// may quote the prompt, or an API key) cannot travel further. code is a string in
// OpenAI's API and a number on some compatible servers.
type apiError struct {
	Type string          `json:"type"`
	Code json.RawMessage `json:"code"`
}

func (e *apiError) code() string {
	var s string
	if json.Unmarshal(e.Code, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(e.Code, &n) == nil {
		return n.String()
	}
	return ""
}

// usage is the documented usage object; pointers tell absent from zero.
type usage struct {
	PromptTokens        *float64 `json:"prompt_tokens"`
	CompletionTokens    *float64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *float64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *float64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// tokens is u in the protocol's units. The provider's own totals are kept as they
// are: input_tokens (prompt_tokens) includes the cache_read_tokens, output_tokens
// (completion_tokens) the reasoning_tokens.
func (u *usage) tokens() providerhttp.Tokens {
	t := providerhttp.Tokens{Input: u.PromptTokens, Output: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		t.CacheRead = d.CachedTokens
	}
	if d := u.CompletionTokensDetails; d != nil {
		t.Reasoning = d.ReasoningTokens
	}
	return t
}

// reader turns one response into events and an outcome.
type reader struct {
	providerhttp.Events
	a         *adapter
	ctx       context.Context
	requestID string
	model     string // the model the response names (gen_ai.response.model)
}

// answeredBy keeps the first model name the response gives.
func (r *reader) answeredBy(model string) {
	if r.model == "" && model != "" {
		r.model = r.a.safeID(model)
	}
}

// answered takes the request id from a response's header. Azure's API management layer
// names it apim-request-id.
func (r *reader) answered(h http.Header) {
	id := h.Get("x-request-id")
	if id == "" {
		id = h.Get("apim-request-id")
	}
	r.requestID = r.a.safeID(id)
}

// httpFailure maps a non-2xx response: status, the body's error type and code, and the
// retry and request-id headers. It is logged by its identifiers.
func (r *reader) httpFailure(resp *http.Response, raw []byte) *protocol.Error {
	r.answered(resp.Header)
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	var ae apiError
	if json.Unmarshal(raw, &body) == nil {
		// An object per OpenAI's format; anything else (some servers send a string)
		// leaves type and code empty and the status decides.
		_ = json.Unmarshal(body.Error, &ae)
	}
	return r.a.fail(r.failure(resp.StatusCode, &ae, resp.Header).Error())
}

// failure builds the providerhttp.Failure for a status (0 after a 200) and error object.
func (r *reader) failure(status int, ae *apiError, h http.Header) providerhttp.Failure {
	typ, code := r.a.safeID(ae.Type), r.a.safeID(ae.code())
	return providerhttp.Failure{
		Provider:        r.a.provider,
		Status:          status,
		Type:            typ,
		Code:            code,
		RequestID:       r.requestID,
		Header:          h,
		QuotaExhausted:  typ == quotaCode || code == quotaCode,
		ContentFiltered: code == contentFilterCode,
	}
}

// inStreamFailure maps an error object received after a 200. Its retryability follows
// providerhttp.Truncated: once output was emitted the attempt cannot be replaced.
func (r *reader) inStreamFailure(ae *apiError) *protocol.Error {
	f := r.failure(0, ae, nil)
	f.InStream, f.AfterOutput = true, r.Output()
	return f.Error()
}

// truncated is the error for a stream that ended before data: [DONE].
func (r *reader) truncated() *protocol.Error {
	e := providerhttp.Truncated(r.a.provider, r.Output())
	e.ProviderError.RequestID = r.requestID
	return e
}

// malformed is the error for a response that is not the documented format.
func (r *reader) malformed() *protocol.Error {
	return providerhttp.Unreadable(r.a.provider, r.requestID, r.Output())
}

// contentFiltered is the error for a completion the provider's safety system stopped
// (finish_reason content_filter) or the model refused (a refusal instead of content).
func (r *reader) contentFiltered() *protocol.Error {
	return providerhttp.Failure{Provider: r.a.provider, RequestID: r.requestID, ContentFiltered: true}.Error()
}

// readErr maps a failure to read the response body: the attempt's end (cancel, deadline,
// timeout) or a connection cut, which for a stream means it ended early.
func (r *reader) readErr(err error) *protocol.Error {
	if r.ctx.Err() != nil {
		return providerhttp.TransportError(r.ctx, r.a.provider, err)
	}
	if errors.Is(err, sse.ErrFrameTooLarge) {
		return r.malformed()
	}
	return r.truncated()
}

// finish ends a successful call: a content filter stop or a refusal is content_filtered
// (after whatever output was already emitted, which stays recorded), anything else
// completes with the provider's finish reason.
func (r *reader) finish(reason string, refused bool) (engine.Outcome, error) {
	if reason == finishContentFilter || refused {
		return engine.Outcome{}, r.a.fail(r.contentFiltered())
	}
	return engine.Outcome{FinishReason: reason, ResponseModel: r.model}, nil
}

// completion is the non-streaming response body.
type completion struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content   *string `json:"content"`
			Refusal   *string `json:"refusal"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Model string          `json:"model"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// readCompletion reads a whole completion: its text becomes one output.delta, each tool
// call a tool.call.started and one arguments delta, then usage.
func (r *reader) readCompletion(body io.Reader) (engine.Outcome, error) {
	raw, err := providerhttp.ReadBody(body, maxCompletionBody)
	switch {
	case errors.Is(err, providerhttp.ErrBodyTooLarge):
		return engine.Outcome{}, r.a.fail(r.malformed())
	case err != nil:
		// Nothing is emitted yet: a cut body is a transport failure like any other.
		e := providerhttp.TransportError(r.ctx, r.a.provider, err)
		e.ProviderError.RequestID = r.requestID
		return engine.Outcome{}, r.a.fail(e)
	}
	var c completion
	if err := json.Unmarshal(raw, &c); err != nil {
		return engine.Outcome{}, r.a.fail(r.malformed())
	}
	if ae, ok := errorObject(c.Error); ok {
		return engine.Outcome{}, r.a.fail(r.inStreamFailure(ae))
	}
	r.answeredBy(c.Model)
	// The adapter never asks for n > 1, so the answer is choice 0.
	idx := -1
	for i := range c.Choices {
		if c.Choices[i].Index == 0 {
			idx = i
			break
		}
	}
	if idx < 0 {
		return engine.Outcome{}, r.a.fail(r.malformed())
	}
	ch := &c.Choices[idx]
	if t := ch.Message.Content; t != nil && *t != "" {
		if err := r.Text(*t); err != nil {
			return engine.Outcome{}, err
		}
	}
	for i, tc := range ch.Message.ToolCalls {
		id, name, ok := r.a.toolCall(tc.ID, tc.Function.Name)
		if !ok {
			return engine.Outcome{}, r.a.fail(r.malformed())
		}
		if err := r.ToolStarted(i, id, name); err != nil {
			return engine.Outcome{}, err
		}
		if tc.Function.Arguments != "" {
			if err := r.ToolArgs(id, tc.Function.Arguments); err != nil {
				return engine.Outcome{}, err
			}
		}
	}
	if c.Usage != nil {
		if err := r.Usage(c.Usage.tokens()); err != nil {
			return engine.Outcome{}, err
		}
	}
	refused := ch.Message.Refusal != nil && *ch.Message.Refusal != ""
	return r.finish(r.a.safeID(ch.FinishReason), refused)
}

// errorObject decodes a non-null "error" member.
func errorObject(raw json.RawMessage) (*apiError, bool) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, false
	}
	ae := &apiError{}
	_ = json.Unmarshal(raw, ae) // not an object: still an error, just without identifiers
	return ae, true
}

// chunk is one streamed chat.completion.chunk, or an in-stream error object. A null
// string member decodes as "", which the stream treats as absent: no pointer (and no
// allocation) per token.
type chunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   string          `json:"content"`
			Refusal   string          `json:"refusal"`
			ToolCalls []toolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Model string          `json:"model"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// toolCallDelta is one fragment of a streamed tool call. The first fragment of a call
// carries id, type and function.name; later ones only its index and argument text.
type toolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// streamCall is a tool call being assembled from fragments.
type streamCall struct {
	id, name string
	started  bool
	pending  []string // argument fragments that arrived before id and name
}

// stream is the state of one streamed response.
type stream struct {
	*reader
	calls   []*streamCall // in order of first appearance; the position is the event index
	byIndex map[int]int   // fragment index → position in calls
	reason  string
	refused bool
	usage   *usage // usage seen on a chunk that also had choices, not yet emitted
	usageOK bool   // usage was emitted
}

// readStream reads the event stream until data: [DONE].
func (r *reader) readStream(body io.Reader) (engine.Outcome, error) {
	s := &stream{reader: r, byIndex: map[int]int{}}
	dec := sse.NewDecoder(body)
	defer dec.Release()
	// One chunk value is decoded into again and again, its choices' array reused:
	// a stream has a chunk per token. Reset it fully first, since encoding/json leaves
	// fields a chunk lacks as they were. The data is decoded in the decoder's buffer.
	var c chunk
	for {
		_, data, err := dec.NextData()
		if err != nil {
			return engine.Outcome{}, r.a.fail(r.readErr(err))
		}
		if string(data) == "[DONE]" {
			return s.done()
		}
		choices := c.Choices[:cap(c.Choices)]
		clear(choices)
		c = chunk{Choices: choices[:0]}
		if err := providerhttp.DecodeChunk(data, &c); err != nil {
			return engine.Outcome{}, r.a.fail(r.malformed())
		}
		if ae, ok := errorObject(c.Error); ok {
			return engine.Outcome{}, r.a.fail(r.inStreamFailure(ae))
		}
		if err := s.apply(&c); err != nil {
			return engine.Outcome{}, err
		}
	}
}

// apply turns one chunk into events. It returns an emit error; a chunk's calls that stay
// without id or name are found malformed at [DONE].
func (s *stream) apply(c *chunk) error {
	s.answeredBy(c.Model)
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // the adapter never asks for n > 1
		}
		if t := ch.Delta.Content; t != "" {
			if err := s.Text(t); err != nil {
				return err
			}
		}
		if ch.Delta.Refusal != "" {
			s.refused = true
		}
		for j := range ch.Delta.ToolCalls {
			if err := s.toolFragment(&ch.Delta.ToolCalls[j], j); err != nil {
				return err
			}
		}
		if ch.FinishReason != "" {
			s.reason = s.a.safeID(ch.FinishReason)
		}
	}
	if c.Usage != nil {
		// The documented usage chunk (stream_options.include_usage) has no choices and
		// comes last; some compatible servers put cumulative usage on content chunks
		// instead, so that is kept and emitted once, at the end.
		if len(c.Choices) > 0 {
			s.usage = c.Usage
			return nil
		}
		if !s.usageOK {
			s.usageOK, s.usage = true, nil
			if err := s.Usage(c.Usage.tokens()); err != nil {
				return err
			}
		}
	}
	return nil
}

// toolFragment applies one tool call fragment. The call is announced once its id and
// name are known (the first fragment, per OpenAI); fragments that precede that are held
// back so the arguments stay in order.
func (s *stream) toolFragment(f *toolCallDelta, pos int) error {
	index := pos // servers that omit index send whole calls, one per array position
	if f.Index != nil {
		index = *f.Index
	}
	slot, seen := s.byIndex[index]
	if seen && f.ID != "" && s.calls[slot].id != "" && f.ID != s.calls[slot].id {
		// A new id at a used index: a server that numbers every call 0. It is a new call.
		seen = false
	}
	if !seen {
		slot = len(s.calls)
		s.calls = append(s.calls, &streamCall{})
		s.byIndex[index] = slot
	}
	c := s.calls[slot]
	if c.id == "" {
		c.id = f.ID
	}
	if c.name == "" {
		c.name = f.Function.Name
	}
	if f.Function.Arguments != "" {
		c.pending = append(c.pending, f.Function.Arguments)
	}
	if !c.started && (c.id == "" || c.name == "") {
		return nil
	}
	if !c.started {
		if _, _, ok := s.a.toolCall(c.id, c.name); !ok {
			return s.a.fail(s.malformed())
		}
		c.started = true
		if err := s.ToolStarted(slot, c.id, c.name); err != nil {
			return err
		}
	}
	for _, d := range c.pending {
		if err := s.ToolArgs(c.id, d); err != nil {
			return err
		}
	}
	c.pending = c.pending[:0]
	return nil
}

// done ends a stream that reached [DONE].
func (s *stream) done() (engine.Outcome, error) {
	for _, c := range s.calls {
		if !c.started {
			// A call whose id or name never came cannot be reported or answered.
			return engine.Outcome{}, s.a.fail(s.malformed())
		}
	}
	if s.usage != nil && !s.usageOK {
		if err := s.Usage(s.usage.tokens()); err != nil {
			return engine.Outcome{}, err
		}
	}
	return s.finish(s.reason, s.refused)
}
