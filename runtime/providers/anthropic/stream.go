package anthropic

import (
	"context"
	"errors"
	"io"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// streamEvent is the data of one stream event. One struct covers every event type; each
// type fills the fields it has.
type streamEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message *struct {
		Model string `json:"model"`
		Usage *usage `json:"usage"`
	} `json:"message"`
	ContentBlock *responseBlock `json:"content_block"`
	Delta        *streamDelta   `json:"delta"`
	Usage        *usage         `json:"usage"`
	Error        *apiError      `json:"error"`
}

// streamDelta is the delta of content_block_delta (type, text, partial_json) or of
// message_delta (stop_reason).
type streamDelta struct {
	Type        string  `json:"type"`
	Text        string  `json:"text"`
	PartialJSON string  `json:"partial_json"`
	StopReason  *string `json:"stop_reason"`
}

// blockKind is what an open content block carries.
type blockKind int

const (
	blockOther blockKind = iota // thinking, server tools, …: not output of this protocol
	blockText
	blockTool
)

// block is the state of one content block, by the stream's block index.
type block struct {
	kind   blockKind
	callID string
	args   bool // a non-empty input fragment was recorded
}

// streamState is what a stream accumulates between events.
type streamState struct {
	blocks     map[int]*block
	calls      int // tool calls started, for tool.call.started's index
	usage      providerhttp.Tokens
	stopReason string
}

// readStream handles a streamed answer. Events map as follows: text_delta ⇒ output.delta
// (output part 0); a tool_use content_block_start ⇒ tool.call.started; input_json_delta
// ⇒ tool.call.arguments.delta; message_start and message_delta usage are merged (the
// latter is cumulative) and reported once at message_stop, the stream's terminal marker;
// ping and unknown events are ignored, as the API's versioning policy asks. A stream that
// ends without message_stop is truncated.
func (r *reader) readStream(ctx context.Context, body io.Reader) (engine.Outcome, error) {
	st := &streamState{blocks: map[int]*block{}}
	dec := sse.NewDecoder(body)
	defer dec.Release()
	for {
		ev, data, err := dec.NextData()
		if err != nil {
			return engine.Outcome{}, r.streamEnded(ctx, err)
		}
		done, err := r.handle(st, ev.Type, data)
		if err != nil {
			return engine.Outcome{}, err
		}
		if done {
			break
		}
	}
	if err := r.Usage(st.usage); err != nil {
		return engine.Outcome{}, err
	}
	return r.finish(st.stopReason)
}

// streamEnded maps the end of the body before message_stop.
func (r *reader) streamEnded(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		// Cancelled, or past the deadline while the provider stalled: the engine decides
		// which from its own context; the error only needs to say "no answer in time".
		return providerhttp.TransportError(ctx, Provider, err)
	case errors.Is(err, sse.ErrFrameTooLarge):
		return r.malformed("stream frame too large")
	case errors.Is(err, io.EOF):
		r.log.Info("Provider stream ended without message_stop", "requestID", r.requestID, "output", r.Output())
	default:
		// A connection cut mid-stream is a truncated stream too.
		r.log.Info("Provider stream broke off", "error", err, "requestID", r.requestID, "output", r.Output())
	}
	return providerhttp.Truncated(Provider, r.Output())
}

// handled lists the event types the adapter acts on; others are skipped, as the API's
// versioning policy asks of clients.
var handled = map[string]bool{
	"message_start": true, "content_block_start": true, "content_block_delta": true,
	"content_block_stop": true, "message_delta": true, "message_stop": true, "error": true,
}

// handle applies one event. done is true at message_stop.
func (r *reader) handle(st *streamState, event string, data []byte) (done bool, err error) {
	var e streamEvent
	if err := providerhttp.DecodeChunk(data, &e); err != nil {
		if !handled[event] {
			return false, nil // an event this adapter does not act on need not parse
		}
		return false, r.malformed("stream event")
	}
	typ := e.Type
	if typ == "" {
		typ = event // the data's type is documented to match the event name
	}
	switch typ {
	case "message_start":
		if e.Message != nil {
			r.answeredBy(e.Message.Model)
			st.usage.Merge(e.Message.Usage.tokens())
		}
	case "content_block_start":
		return false, r.blockStart(st, e.Index, e.ContentBlock)
	case "content_block_delta":
		return false, r.blockDelta(st, e.Index, e.Delta)
	case "content_block_stop":
		return false, r.blockStop(st, e.Index)
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != nil {
			st.stopReason = *e.Delta.StopReason
		}
		st.usage.Merge(e.Usage.tokens()) // cumulative: the latest value of each field wins
	case "message_stop":
		return true, nil
	case "error":
		var ae apiError
		if e.Error != nil {
			ae = *e.Error
		}
		f := r.failure(0, &ae, nil)
		// As for a truncated stream: after output the attempt cannot be retried
		// without repeating it, and the flag tells callers the truth.
		f.InStream, f.AfterOutput = true, r.Output()
		r.log.Info("Provider stream reported an error", "type", f.Type, "requestID", f.RequestID, "output", r.Output())
		return false, f.Error()
	}
	return false, nil
}

func (r *reader) blockStart(st *streamState, index int, cb *responseBlock) error {
	if cb == nil {
		return r.malformed("content_block_start")
	}
	switch cb.Type {
	case "text":
		st.blocks[index] = &block{kind: blockText}
		// The API opens text blocks empty; text here would still be output.
		return r.Text(cb.Text)
	case "tool_use":
		id, name, ok := r.toolCall(cb.ID, cb.Name)
		if !ok {
			return r.malformed("tool_use block")
		}
		st.blocks[index] = &block{kind: blockTool, callID: id}
		idx := st.calls
		st.calls++
		return r.ToolStarted(idx, id, name)
	}
	st.blocks[index] = &block{kind: blockOther}
	return nil
}

func (r *reader) blockDelta(st *streamState, index int, d *streamDelta) error {
	if d == nil {
		return nil
	}
	b := st.blocks[index]
	switch d.Type {
	case "text_delta":
		if b != nil && b.kind != blockText {
			return nil
		}
		return r.Text(d.Text)
	case "input_json_delta":
		// Only client tool_use blocks are tool calls; server tools stream their input the
		// same way and are skipped. Empty fragments carry nothing.
		if b == nil || b.kind != blockTool || d.PartialJSON == "" {
			return nil
		}
		b.args = true
		return r.ToolArgs(b.callID, d.PartialJSON)
	}
	return nil // thinking, signature, citations: not output of this protocol
}

func (r *reader) blockStop(st *streamState, index int) error {
	b := st.blocks[index]
	if b != nil && b.kind == blockTool && !b.args {
		// A call without input fragments has the empty object as input (the block opened
		// with "input":{}); say so, as the non-streaming mapping does.
		b.args = true
		return r.ToolArgs(b.callID, "{}")
	}
	return nil
}
