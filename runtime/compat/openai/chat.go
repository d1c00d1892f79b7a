package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// POST /v1/chat/completions (spec/compat.md, "Chat Completions"): each call is an
// execution, submitted through the Kit and projected back from its events.
//
// The response's head waits for the execution's first output or its end, so that a
// failure before any output — no deployment can serve it, every attempt failed — is an
// HTTP error with its status, which the SDKs raise as their typed errors, streamed or
// not. Once a stream has started, a failure is one error frame and no [DONE]. A stream
// that has waited for output a whole keep-alive interval writes its head and keeps the
// connection alive with comments.
//
// A call whose connection ends before the execution does cancels it, unless it carried an
// Idempotency-Key: then the execution keeps running, and the same request with the same
// key re-attaches to it, replaying its answer from the start.

var (
	// errUnknownModel answers a model name that names nothing the caller may use;
	// fixed, so that it never echoes the name.
	errUnknownModel = protocol.NewError(protocol.CodeNotFound, "the model does not exist or the caller may not use it")
	// errEncode answers a translated request that cannot be encoded; it cannot happen
	// short of a bug.
	errEncode = protocol.NewError(protocol.CodeInternal, "internal error")
)

// interrupted is the error a call ends with when its connection is ended (the runtime's
// drain) or its stream fails before the execution did: a keyed call can be retried with
// its key, which re-attaches to the execution.
func interrupted(keyed bool) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderUnavailable, "the call ended before its execution; retry with the same Idempotency-Key, or read the execution by its id")
	e.Retryable = keyed
	return e
}

// keepAliveFrame keeps an idle stream's connection open.
var keepAliveFrame = []byte(": keep-alive\n\n")

// chatRoutes are the door's Chat Completions endpoints.
func chatRoutes(k compat.Kit) []compat.Route {
	h := &chatHandler{kit: k}
	return []compat.Route{
		{Pattern: "POST /v1/chat/completions", Handle: withParam(h.chatCompletions), WriteError: writeError},
	}
}

// chatHandler serves Chat Completions through kit.
type chatHandler struct{ kit compat.Kit }

// chatCompletions serves POST /v1/chat/completions.
func (d *chatHandler) chatCompletions(w http.ResponseWriter, r *http.Request) error {
	body, err := d.kit.ReadBody(w, r)
	if err != nil {
		return err
	}
	req, err := decodeChat(body)
	if err != nil {
		return err
	}
	m, ok, err := d.kit.Model(r.Context(), req.model)
	if err != nil {
		return err
	}
	if !ok {
		return errUnknownModel
	}
	req.native.Ability = m.Ability
	if m.Deployment != "" {
		req.native.Routing = &protocol.Routing{Only: []string{m.Deployment}}
	}
	native, err := json.Marshal(&req.native)
	if err != nil {
		return errEncode
	}
	sub, err := d.kit.Submit(w, r, native, body)
	if err != nil {
		return err
	}
	w.Header().Set(compat.ExecutionHeader, sub.ID)
	c := &chatCall{kit: d.kit, w: w, r: r, sub: sub, req: req, out: d.kit.NewStream(w), model: req.model}
	if m.ProviderModel != "" {
		c.model = m.ProviderModel
	}
	c.run()
	return nil
}

// chatCall is one call being answered.
type chatCall struct {
	kit compat.Kit
	w   http.ResponseWriter
	r   *http.Request
	sub compat.Submission
	req *chatRequest
	out *compat.Stream
	// model is the answer's model until a route is selected: the pinned deployment's
	// spec.model, else the name the caller sent.
	model string

	served served
	answer answer // not streamed

	// Streamed: head is true once the response head is written, enc encodes the
	// chunks (made at the first chunk), calls are the tool calls so far.
	head  bool
	enc   *chunks
	calls []toolCall
}

// run answers the call from the execution's events.
func (c *chatCall) run() {
	log := c.kit.Logger()
	if err := c.out.Open(); err != nil {
		log.V(1).Info("Cannot lift the read deadline of a front-door call", "execution", c.sub.ID)
	}
	var idle func() error
	if c.req.stream {
		idle = c.idle
	}
	err := c.kit.Follow(c.r.Context(), c.sub.ID, 0, c.batch, idle)
	if err == nil {
		if !c.head {
			c.answerWhole()
		}
		return
	}
	if c.served.terminal {
		return // the end was seen; only writing it failed: the client left
	}
	if !c.sub.Keyed {
		// A dropped call stops spending (spec/compat.md, "Client disconnects").
		if _, cerr := c.kit.Cancel(c.r.Context(), c.sub.ID); cerr != nil {
			log.V(1).Info("Cannot cancel the execution of a dropped front-door call", "execution", c.sub.ID, "reason", cerr.Error())
		}
	}
	// Tell a client that is still there (this replica ends the call, or the store
	// failed); for one that left, the write fails harmlessly.
	pe := interrupted(c.sub.Keyed)
	if c.r.Context().Err() == nil && !isWriteError(err) {
		_, pe = c.kit.Classify(c.r, err)
	}
	if c.head {
		c.encoder().failure(pe)
		_ = c.out.Write(c.enc.take())
		return
	}
	c.writeError(statusOf(pe), pe)
}

// isWriteError reports whether err is the failure of a write to the client.
func isWriteError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, http.ErrHandlerTimeout)
}

// batch folds a batch of events and, when streaming, writes what they add in one write.
func (c *chatCall) batch(events []protocol.Event) error {
	for i := range events {
		ev := &events[i]
		if err := c.served.apply(ev); err != nil {
			return err
		}
		if !c.req.stream {
			if err := c.answer.apply(ev); err != nil {
				return err
			}
			continue
		}
		if ev.Type.IsOutput() {
			if err := c.chunk(ev); err != nil {
				return err
			}
			if c.enc.full() {
				c.writeHead()
				if err := c.out.Write(c.enc.take()); err != nil {
					return err
				}
			}
		}
	}
	if !c.req.stream {
		return nil
	}
	if c.served.terminal {
		if !c.head && c.enc == nil && c.served.failed() {
			return nil // nothing was output: answered as an HTTP error once Follow returns
		}
		c.end()
	}
	if c.enc == nil {
		return nil // no output yet: the head waits
	}
	frames := c.enc.take()
	if len(frames) == 0 {
		return nil
	}
	c.writeHead()
	return c.out.Write(frames)
}

// chunk encodes an output event of a stream.
func (c *chatCall) chunk(ev *protocol.Event) error {
	enc := c.encoder()
	switch ev.Type {
	case protocol.EventOutputDelta:
		d, err := protocol.DecodeDelta(ev.Data)
		if err != nil {
			return err
		}
		enc.text(string(d.Text))
	case protocol.EventToolCallStarted:
		var d protocol.ToolCallStartedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		i := c.callIndex(d.CallID)
		c.calls[i].name = d.Name
		enc.toolStart(i, d.CallID, d.Name)
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		i := len(c.calls)
		if j := c.callIndex(d.CallID); j < i {
			i = j
		} else {
			// Fragments before their call's start: open the call under its id.
			enc.toolStart(i, d.CallID, "")
		}
		enc.toolArgs(i, d.Delta)
	}
	return nil
}

// callIndex is the index of tool call id in the stream, adding it if it is new.
func (c *chatCall) callIndex(id string) int {
	for i := range c.calls {
		if c.calls[i].id == id {
			return i
		}
	}
	c.calls = append(c.calls, toolCall{id: id})
	return len(c.calls) - 1
}

// encoder returns the stream's chunk encoder, making it, and the first chunk, on first
// use: by then the served model is known.
func (c *chatCall) encoder() *chunks {
	if c.enc == nil {
		model := c.served.model
		if model == "" {
			model = c.model
		}
		c.enc = newChunks(c.sub.ID, c.sub.CreatedAt.Unix(), model)
		c.enc.role()
	}
	return c.enc
}

// end encodes the end of a stream: the finish reason, the usage when asked for, then
// [DONE]; or the failure.
func (c *chatCall) end() {
	enc := c.encoder()
	if c.served.failed() {
		enc.failure(c.served.err)
		return
	}
	enc.finish(c.served.finishReason(len(c.calls) > 0))
	if c.req.includeUsage {
		enc.usage(c.served.usageBody())
	}
	enc.done()
}

// writeHead writes a stream's response head, once; net/http sends it with the first
// frame.
func (c *chatCall) writeHead() {
	if c.head {
		return
	}
	c.head = true
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies (nginx) from buffering chunks
	c.w.WriteHeader(http.StatusOK)
}

// idle keeps a stream that waits for output alive, writing its head if need be.
func (c *chatCall) idle() error {
	c.writeHead()
	return c.out.Write(keepAliveFrame)
}

// answerWhole answers a call whose execution ended before any of it was written: a
// chat.completion (not streamed), or the failure as an HTTP error.
func (c *chatCall) answerWhole() {
	if c.served.failed() {
		c.writeError(statusOf(c.served.err), c.served.err)
		return
	}
	body, err := c.completion()
	if err != nil {
		c.writeError(http.StatusInternalServerError, errEncode)
		return
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	c.w.WriteHeader(http.StatusOK)
	_ = c.out.Write(body) // a failed write means the client left, after the end
}

// writeError answers e with status, under a fresh write deadline (the call may have
// waited longer than the server's).
func (c *chatCall) writeError(status int, e *protocol.Error) {
	_ = c.out.Write(errorResponse(c.w, status, e, nil))
}

// completion is the chat.completion of the execution.
func (c *chatCall) completion() ([]byte, error) {
	model := c.served.model
	if model == "" {
		model = c.model
	}
	msg := completionMessage{Role: "assistant"}
	if text, ok := c.answer.text(); ok || len(c.answer.calls) == 0 {
		msg.Content = &text
	}
	for _, tc := range c.answer.calls {
		msg.ToolCalls = append(msg.ToolCalls, completionToolCall{
			ID: tc.id, Type: "function", Function: completionFunction{Name: tc.name, Arguments: string(tc.args)},
		})
	}
	body := completionBody{
		ID: c.sub.ID, Object: "chat.completion", Created: c.sub.CreatedAt.Unix(), Model: model,
		Choices: []completionChoice{{Message: msg, FinishReason: c.served.finishReason(len(c.answer.calls) > 0)}},
		Usage:   c.served.usageBody(),
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the answer is never HTML, and this keeps it as the model wrote it
	if err := enc.Encode(body); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// chat.completion, as OpenAI documents it.
type completionBody struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usageBody         `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int               `json:"index"`
	Message      completionMessage `json:"message"`
	Logprobs     *struct{}         `json:"logprobs"`
	FinishReason string            `json:"finish_reason"`
}

type completionMessage struct {
	Role      string               `json:"role"`
	Content   *string              `json:"content"`
	Refusal   *string              `json:"refusal"`
	ToolCalls []completionToolCall `json:"tool_calls,omitempty"`
}

type completionToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function completionFunction `json:"function"`
}

type completionFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}
