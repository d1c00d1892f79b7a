package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// maxResponseBody bounds a non-streaming answer, so a misbehaving endpoint cannot make
// the adapter buffer without limit; a real answer is text plus metadata. A streamed
// chunk is bounded by the SSE decoder's frame bound (sse.DefaultMaxFrameSize).
const maxResponseBody = 16 << 20

// finishGrace bounds how long a stream is read after candidate 0's finish reason (or a
// blocked prompt). Google's SSE has no end marker and the answer is complete then; only
// a trailing usageMetadata may follow. A proxy that keeps the connection open would
// otherwise hold a complete answer until the attempt's context ends, turning it into a
// timeout; after the grace the body is closed and the answer completes with what it had.
const finishGrace = 2 * time.Second

// Finish and block reasons with a meaning of their own. Any other finish reason
// completes the attempt with it as the provider named it.
const (
	finishUnspecified = "FINISH_REASON_UNSPECIFIED"
	blockUnspecified  = "BLOCK_REASON_UNSPECIFIED"
)

// filtered are the finish reasons that mean the provider's filters stopped the answer:
// safety, recitation, unsupported language, blocklist terms, prohibited content,
// sensitive personal data, unsafe or recited images, and Vertex AI's Model Armor. They
// end the attempt as content_filtered (spec/http-api.md, "Provider failures").
var filtered = map[string]bool{
	"SAFETY": true, "RECITATION": true, "LANGUAGE": true, "BLOCKLIST": true,
	"PROHIBITED_CONTENT": true, "SPII": true, "IMAGE_SAFETY": true,
	"IMAGE_PROHIBITED_CONTENT": true, "IMAGE_RECITATION": true, "MODEL_ARMOR": true,
}

// generateResponse is a GenerateContentResponse — the whole answer, or one streamed
// chunk of it — or, inside a stream, an error object (google.rpc.Status).
type generateResponse struct {
	Candidates     []candidate     `json:"candidates"`
	PromptFeedback *promptFeedback `json:"promptFeedback"`
	UsageMetadata  *usageMetadata  `json:"usageMetadata"`
	ModelVersion   string          `json:"modelVersion"`
	ResponseID     string          `json:"responseId"`
	Error          *rpcStatus      `json:"error"`
}

type candidate struct {
	Index   int `json:"index"`
	Content *struct {
		Parts []responsePart `json:"parts"`
	} `json:"content"`
	FinishReason string `json:"finishReason"`
}

// responsePart is a Part of the answer. Parts of other kinds (executable code, inline
// data, thought signatures alone) carry nothing this protocol maps and are skipped.
type responsePart struct {
	Text         *string `json:"text"`
	Thought      bool    `json:"thought"`
	FunctionCall *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
}

type promptFeedback struct {
	BlockReason string `json:"blockReason"`
}

// usageMetadata is the answer's token usage; pointers tell absent from zero. In a stream
// every chunk may carry it, cumulative, so the last one is the answer's.
type usageMetadata struct {
	PromptTokenCount        *float64 `json:"promptTokenCount"`
	CachedContentTokenCount *float64 `json:"cachedContentTokenCount"`
	CandidatesTokenCount    *float64 `json:"candidatesTokenCount"`
	ToolUsePromptTokenCount *float64 `json:"toolUsePromptTokenCount"`
	ThoughtsTokenCount      *float64 `json:"thoughtsTokenCount"`
}

// tokens is u in the protocol's units. Google's counts are disjoint, so they are added
// up to the totals the OpenAI adapter reports: input_tokens is the prompt plus tool-use
// prompt tokens (cached ones included, also reported as cache_read_tokens);
// output_tokens is the candidates' plus the thinking tokens (also reported as
// reasoning_tokens), as both are billed as output.
func (u *usageMetadata) tokens() providerhttp.Tokens {
	return providerhttp.Tokens{
		Input:     sum(u.PromptTokenCount, u.ToolUsePromptTokenCount),
		Output:    sum(u.CandidatesTokenCount, u.ThoughtsTokenCount),
		CacheRead: u.CachedContentTokenCount,
		Reasoning: u.ThoughtsTokenCount,
	}
}

// sum adds the counts present; nil when neither is.
func sum(a, b *float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	s := *a + *b
	return &s
}

// reader turns one response into event data and the attempt's result. It holds the
// state the streaming and the non-streaming paths share.
type reader struct {
	providerhttp.Events
	provider string
	log      logr.Logger
	// secrets are the credential's values a provider identifier must not contain (the
	// API key; the access token and the key's id).
	secrets    []string
	responseID string // the answer's responseId, reported as provider_error.request_id
	model      string // modelVersion (gen_ai.response.model)

	finish  string          // candidate 0's finishReason, once sent
	blocked string          // promptFeedback.blockReason, once sent
	usage   *usageMetadata  // the latest usageMetadata
	calls   int             // tool calls started, for tool.call.started's index
	callIDs map[string]bool // call ids used in the answer, so that each is unique
	// graceOver is set when the stream was stopped finishGrace after its finish reason.
	graceOver atomic.Bool
}

// clean keeps a provider-supplied identifier only when it looks like one and contains
// no secret (providerhttp.Identifier).
func (r *reader) clean(s string) string {
	return providerhttp.Identifier(s, r.secrets...)
}

// readStream reads a streamGenerateContent answer with alt=sse: one GenerateContentResponse
// per data frame, and no terminal marker — the answer is complete when candidate 0 has a
// finish reason (or the prompt was blocked) and the stream then ends. A stream that ends
// before is truncated (providerhttp.Truncated). Once the answer is complete, the stream
// is read for finishGrace more, for a trailing usage report; then stop, when non-nil,
// closes the body, which ends the read and completes the answer.
func (r *reader) readStream(ctx context.Context, body io.Reader, stop func()) (engine.Outcome, error) {
	dec := sse.NewDecoder(body)
	defer dec.Release()
	var chunk generateResponse
	for {
		ev, data, err := dec.NextData()
		if err != nil {
			return r.streamEnded(ctx, err)
		}
		if (ev.Type != "" && ev.Type != "message") || len(bytes.TrimSpace(data)) == 0 {
			continue // Google sends only data frames; anything else carries nothing
		}
		chunk = generateResponse{}
		if err := providerhttp.DecodeChunk(data, &chunk); err != nil {
			return engine.Outcome{}, r.malformed("stream chunk")
		}
		if err := r.apply(&chunk); err != nil {
			return engine.Outcome{}, err
		}
		if (r.finish != "" || r.blocked != "") && stop != nil {
			closeBody := stop
			t := time.AfterFunc(finishGrace, func() {
				r.graceOver.Store(true)
				closeBody()
			})
			defer t.Stop()
			stop = nil // armed once
		}
	}
}

// streamEnded maps the end of the body: the attempt's result when the answer was
// complete, else the failure.
func (r *reader) streamEnded(ctx context.Context, err error) (engine.Outcome, error) {
	switch {
	case ctx.Err() != nil:
		// Cancelled, or past the deadline while the provider stalled: the engine decides
		// which from its own context; the error only needs to say "no answer in time".
		return engine.Outcome{}, providerhttp.TransportError(ctx, r.provider, err)
	case errors.Is(err, sse.ErrFrameTooLarge):
		return engine.Outcome{}, r.malformed("stream frame too large")
	case r.finish != "" || r.blocked != "":
		switch {
		case r.graceOver.Load():
			r.log.V(1).Info("Provider stream still open after its finish reason; stopped reading", "grace", finishGrace, "responseID", r.responseID)
		case !errors.Is(err, io.EOF):
			// The answer was whole; only what could follow it (a last usage report) is lost.
			r.log.V(1).Info("Provider stream broke off after its finish reason", "responseID", r.responseID)
		}
		return r.end()
	case errors.Is(err, io.EOF):
		r.log.Info("Provider stream ended without a finish reason", "responseID", r.responseID, "output", r.Output())
	default:
		// A connection cut mid-stream is a truncated stream too.
		r.log.Info("Provider stream broke off", "error", err, "responseID", r.responseID, "output", r.Output())
	}
	e := providerhttp.Truncated(r.provider, r.Output())
	e.ProviderError.RequestID = r.responseID
	return engine.Outcome{}, e
}

// readWhole reads a generateContent answer: one GenerateContentResponse. A JSON array of
// them (streamGenerateContent without alt=sse, as a proxy might answer) is read too.
func (r *reader) readWhole(ctx context.Context, body io.Reader) (engine.Outcome, error) {
	raw, err := providerhttp.ReadAnswer(ctx, r.provider, r.log, body, maxResponseBody)
	switch {
	case errors.Is(err, providerhttp.ErrBodyTooLarge):
		return engine.Outcome{}, r.malformed("response too large")
	case err != nil:
		return engine.Outcome{}, err
	}
	var chunks []generateResponse
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(trimmed, &chunks)
	} else {
		chunks = make([]generateResponse, 1)
		err = json.Unmarshal(raw, &chunks[0])
	}
	if err != nil {
		return engine.Outcome{}, r.malformed("response")
	}
	for i := range chunks {
		if err := r.apply(&chunks[i]); err != nil {
			return engine.Outcome{}, err
		}
	}
	if r.finish == "" && r.blocked == "" {
		return engine.Outcome{}, r.malformed("response without a finish reason")
	}
	return r.end()
}

// apply turns one response (or chunk) into events: candidate 0's text parts, except
// thoughts, become output.delta (one per run of text); each functionCall part — whole in
// one chunk, never fragmented — becomes tool.call.started and one
// tool.call.arguments.delta with its compact args. Usage, model version, finish and
// block reasons are kept for the end.
func (r *reader) apply(c *generateResponse) error {
	if c.Error != nil {
		return r.inStreamFailure(c.Error)
	}
	if r.model == "" {
		r.model = r.clean(c.ModelVersion)
	}
	if r.responseID == "" {
		r.responseID = r.clean(c.ResponseID)
	}
	if c.UsageMetadata != nil {
		r.usage = c.UsageMetadata
	}
	if pf := c.PromptFeedback; pf != nil && pf.BlockReason != "" && pf.BlockReason != blockUnspecified {
		r.blocked = pf.BlockReason
	}
	for i := range c.Candidates {
		cand := &c.Candidates[i]
		if cand.Index != 0 {
			continue // the adapter never asks for more than one candidate
		}
		if cand.Content != nil {
			if err := r.parts(cand.Content.Parts); err != nil {
				return err
			}
		}
		if cand.FinishReason != "" && cand.FinishReason != finishUnspecified {
			r.finish = cand.FinishReason
		}
	}
	return nil
}

// parts records one candidate content's parts in order.
func (r *reader) parts(parts []responsePart) error {
	var text strings.Builder
	flush := func() error {
		s := text.String()
		text.Reset()
		return r.Text(s)
	}
	for i := range parts {
		p := &parts[i]
		switch {
		case p.Thought:
			// A thought summary is not output of this protocol.
		case p.FunctionCall != nil:
			if err := flush(); err != nil {
				return err
			}
			if err := r.call(p.FunctionCall.ID, p.FunctionCall.Name, p.FunctionCall.Args); err != nil {
				return err
			}
		case p.Text != nil:
			text.WriteString(*p.Text)
		}
	}
	return flush()
}

// call records one function call. Its name must be a tool name holding no part of the
// credential (providerhttp.ToolName) and its args, when present, a JSON object
// (functionCall.args is a Struct): anything else is not the documented format, so the
// answer is unreadable. Its id is the provider's when it sent one that is an identifier
// not yet used in the answer, else callID mints one.
func (r *reader) call(id, name string, args json.RawMessage) error {
	if providerhttp.ToolName(name, r.secrets...) == "" {
		return r.malformed("functionCall name")
	}
	compacted, ok := argsObject(args)
	if !ok {
		return r.malformed("functionCall args")
	}
	callID := r.callID(id)
	idx := r.calls
	r.calls++
	if err := r.ToolStarted(idx, callID, name); err != nil {
		return err
	}
	return r.ToolArgs(callID, compacted)
}

// callID returns the id of the answer's next call: the provider's id when it is an
// identifier not used yet, else call_<n>, n the call's index or, when the provider
// already used that id, the next n whose id is free. Either way it is unique within the
// answer, as tool results name the call they answer by it.
func (r *reader) callID(id string) string {
	if r.callIDs == nil {
		r.callIDs = map[string]bool{}
	}
	callID := r.clean(id)
	for n := r.calls; callID == "" || r.callIDs[callID]; n++ {
		callID = "call_" + strconv.Itoa(n)
	}
	r.callIDs[callID] = true
	return callID
}

// argsObject returns a functionCall's args as compact JSON text: absent args are the
// empty object, what a call without arguments amounts to; ok is false for any other
// value than an object (null, an array, a string, a number), which no function's
// arguments can be.
func argsObject(raw json.RawMessage) (string, bool) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return "{}", true
	}
	if trimmed[0] != '{' {
		return "", false
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return "", false
	}
	return buf.String(), true
}

// end finishes a complete answer: the usage is recorded (once, last), then a blocked
// prompt or a filter's finish reason is content_filtered (the output before it, if any,
// stays recorded), and any other finish reason completes the attempt with the reason as
// the provider named it (STOP, MAX_TOKENS, MALFORMED_FUNCTION_CALL, …) when it is an
// identifier, as spec/events.md ("execution.completed") asks.
func (r *reader) end() (engine.Outcome, error) {
	if r.usage != nil {
		if err := r.Usage(r.usage.tokens()); err != nil {
			return engine.Outcome{}, err
		}
	}
	reason := r.finish
	if r.blocked != "" {
		reason = r.blocked
	}
	if r.blocked != "" || filtered[r.finish] {
		r.log.Info("Provider filtered the content", "reason", r.clean(reason), "prompt", r.blocked != "", "responseID", r.responseID)
		f := providerhttp.Failure{Provider: r.provider, Code: r.clean(reason), RequestID: r.responseID, ContentFiltered: true}
		return engine.Outcome{}, f.Error()
	}
	return engine.Outcome{FinishReason: r.clean(reason), ResponseModel: r.model}, nil
}

// malformed is the error for an answer that cannot be read as the documented format
// (providerhttp.Unreadable).
func (r *reader) malformed(what string) error {
	r.log.Info("Provider sent an unreadable response", "part", what, "responseID", r.responseID)
	return providerhttp.Unreadable(r.provider, r.responseID, r.Output())
}
