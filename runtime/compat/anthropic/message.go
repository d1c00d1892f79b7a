package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The projection of an execution's events into an Anthropic message (spec/compat.md,
// "Anthropic Messages", "Response"). One fold serves both answers: a streamed call
// writes the frames it produces as the events come, a non-streamed one renders the
// message it ends with, so the message an SDK accumulates from the stream is the one
// the non-streamed call answers.
//
// Content blocks come in the order the execution's output first appeared: each text
// output part (output.delta index) is a text block, each tool call (call_id) a tool_use
// block, and each output.result a text block holding its result as JSON. Claude streams
// one block at a time — start, deltas, stop — and so does the projection: when output
// for another block comes, the open block is stopped first. Two cases keep a block
// from being stopped early, since an SDK finalises a block at its stop (the Go SDK
// empties a tool input that is not JSON by then): text for an output part whose block
// was stopped opens a new text block, and a tool call whose arguments are not a whole
// JSON value yet stays unstopped until they are or the message ends, so that a provider
// interleaving parallel tool calls still streams each call's arguments into an open
// block.

// Stop reasons (the contract's set).
const (
	stopEndTurn      = "end_turn"
	stopMaxTokens    = "max_tokens"
	stopSequence     = "stop_sequence"
	stopToolUse      = "tool_use"
	stopRefusal      = "refusal"
	blockText        = "text"
	blockToolUse     = "tool_use"
	eventFramePrefix = "event: "
)

// contentBlock is one block of the message being folded.
type contentBlock struct {
	kind    string // blockText or blockToolUse
	text    strings.Builder
	callID  string
	name    string
	args    strings.Builder
	stopped bool
}

// usageTotals are the usage figures of the attempt that answered.
type usageTotals struct {
	input, output, cacheRead, cacheWrite float64
	// fromProvider: per unit, whether a provider-sourced entry was seen, which then
	// wins over runtime-derived ones.
	fromProvider [4]bool
}

// projection folds one execution's events.
type projection struct {
	id, model string
	// provider is the answering deployment's provider, which says what its input
	// token count holds.
	provider string
	// stream: produce SSE frames.
	stream bool
	blocks []*contentBlock
	open   int // the open block, or -1
	// byOutput maps an output.delta index, and byCall a call id, to its block.
	byOutput map[int]int
	byCall   map[string]int
	// pending holds argument fragments of calls not started yet.
	pending map[string][]string
	usage   usageTotals
	// started: message_start was produced (the stream's head is due).
	started bool
	// finish is the completed execution's finish reason; failure its error.
	finish   string
	failure  *protocol.Error
	terminal bool
}

// newProjection returns the fold of execution id; model is the model the message names
// until a route says which one serves it.
func newProjection(id, model string, stream bool) *projection {
	return &projection{id: id, model: model, stream: stream, open: -1, byOutput: map[int]int{}, byCall: map[string]int{}}
}

// apply folds ev, appending the frames it produces (for a stream) to out. An event
// whose data cannot be read is an error: the log holds only checked events, so it
// means the store returned something else.
func (p *projection) apply(ev *protocol.Event, out []byte) ([]byte, error) {
	switch ev.Type {
	case protocol.EventRouteSelected:
		var d protocol.RouteSelectedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		if d.Model != "" {
			p.model = d.Model
		}
		p.provider = d.Provider
		p.usage = usageTotals{} // an attempt's usage is its own; the answering one's counts
	case protocol.EventOutputDelta:
		d, err := protocol.DecodeDelta(ev.Data)
		if err != nil {
			return out, err
		}
		if len(d.Text) == 0 {
			return out, nil
		}
		i, ok := p.byOutput[d.Index]
		if !ok || p.blocks[i].stopped {
			out, i = p.newBlock(out, &contentBlock{kind: blockText})
			p.byOutput[d.Index] = i
		}
		out = p.switchTo(out, i)
		if p.stream {
			// A stream's text is the client's to accumulate: it is written, not kept.
			out = p.deltaFrame(out, i, "text_delta", "text", d.Text)
		} else {
			p.blocks[i].text.Write(d.Text)
		}
	case protocol.EventToolCallStarted:
		var d protocol.ToolCallStartedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		if _, dup := p.byCall[d.CallID]; dup {
			return out, nil
		}
		var i int
		out, i = p.newBlock(out, &contentBlock{kind: blockToolUse, callID: d.CallID, name: d.Name})
		p.byCall[d.CallID] = i
		for _, frag := range p.pending[d.CallID] {
			out = p.args(out, i, frag)
		}
		delete(p.pending, d.CallID)
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		if d.Delta == "" {
			return out, nil
		}
		i, ok := p.byCall[d.CallID]
		if !ok {
			// Fragments before their call's start wait for it (spec/events.md allows
			// the order); a call that never starts has no block to carry them.
			if p.pending == nil {
				p.pending = map[string][]string{}
			}
			p.pending[d.CallID] = append(p.pending[d.CallID], d.Delta)
			return out, nil
		}
		out = p.switchTo(out, i)
		out = p.args(out, i, d.Delta)
	case protocol.EventOutputResult:
		var d protocol.OutputResultData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		if len(d.Result) == 0 || string(d.Result) == "null" {
			return out, nil
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, d.Result); err != nil {
			return out, err
		}
		var i int
		out, i = p.newBlock(out, &contentBlock{kind: blockText})
		p.blocks[i].text.Write(buf.Bytes())
		if p.stream {
			out = p.deltaFrame(out, i, "text_delta", "text", buf.Bytes())
		}
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		for _, u := range d.Usage {
			p.usage.add(u)
		}
	case protocol.EventCompleted:
		var d protocol.CompletedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		p.terminal, p.finish = true, d.FinishReason
		return p.end(out), nil
	case protocol.EventFailed:
		var d protocol.FailedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return out, err
		}
		p.terminal = true
		if d.Error == nil {
			d.Error = protocol.NewError(protocol.CodeInternal, "internal error")
		}
		if d.Error.Code == protocol.CodeContentFiltered {
			// A refusal is an answer in Anthropic's API, not an error: the message
			// ends with stop_reason refusal and keeps what was said before it.
			p.finish = stopRefusal
			return p.end(out), nil
		}
		p.failure = d.Error
		if p.stream && p.started {
			out = appendErrorFrame(out, failureStatus(d.Error), d.Error)
		}
	}
	return out, nil
}

// newBlock starts block b as the open one, after message_start for the first and after
// stopping the block open before, and returns its index.
func (p *projection) newBlock(out []byte, b *contentBlock) ([]byte, int) {
	out = p.begin(out)
	out = p.switchTo(out, -1)
	p.blocks = append(p.blocks, b)
	i := len(p.blocks) - 1
	p.open = i
	return p.startFrame(out, i), i
}

// begin produces message_start before the first block.
func (p *projection) begin(out []byte) []byte {
	if p.started {
		return out
	}
	p.started = true
	if !p.stream {
		return out
	}
	return appendFrame(out, "message_start", func(b []byte) []byte {
		b = append(b, `{"type":"message_start","message":`...)
		b = p.appendHead(b)
		b = append(b, `"content":[],"stop_reason":null,"stop_sequence":null,"stop_details":null,"usage":`...)
		b = usageTotals{}.appendJSON(b, "")
		return append(b, "}}"...)
	})
}

// switchTo makes block i the open one (-1: none), stopping the one open before unless
// it is a tool call whose arguments are not whole yet.
func (p *projection) switchTo(out []byte, i int) []byte {
	if p.open == i {
		return out
	}
	if j := p.open; j >= 0 && !p.blocks[j].stopped && p.blocks[j].complete() {
		out = p.stopFrame(out, j)
	}
	p.open = i
	return out
}

// complete reports whether a block may be stopped: a text block always, a tool call
// once its arguments are one JSON value.
func (b *contentBlock) complete() bool {
	return b.kind == blockText || json.Valid([]byte(b.args.String()))
}

// args adds an argument fragment to tool_use block i.
func (p *projection) args(out []byte, i int, frag string) []byte {
	p.blocks[i].args.WriteString(frag)
	if !p.stream {
		return out
	}
	return p.deltaFrame(out, i, "input_json_delta", "partial_json", []byte(frag))
}

// end closes the message: every block not stopped yet stops, in order, and
// message_delta and message_stop follow (message_start first, for an answer without
// output).
func (p *projection) end(out []byte) []byte {
	out = p.begin(out)
	for i, b := range p.blocks {
		if !b.stopped {
			out = p.stopFrame(out, i)
		}
	}
	p.open = -1
	if !p.stream {
		return out
	}
	out = appendFrame(out, "message_delta", func(b []byte) []byte {
		b = append(b, `{"type":"message_delta","delta":{"stop_reason":`...)
		b = protocol.AppendJSONString(b, p.stopReason())
		b = append(b, `,"stop_sequence":null,"stop_details":null},"usage":`...)
		b = p.usage.appendJSON(b, p.provider)
		return append(b, '}')
	})
	return appendFrame(out, "message_stop", func(b []byte) []byte {
		return append(b, `{"type":"message_stop"}`...)
	})
}

// startFrame produces content_block_start for block i.
func (p *projection) startFrame(out []byte, i int) []byte {
	if !p.stream {
		return out
	}
	b := p.blocks[i]
	return appendFrame(out, "content_block_start", func(o []byte) []byte {
		o = append(o, `{"type":"content_block_start","index":`...)
		o = strconv.AppendInt(o, int64(i), 10)
		if b.kind == blockText {
			return append(o, `,"content_block":{"type":"text","text":""}}`...)
		}
		o = append(o, `,"content_block":{"type":"tool_use","id":`...)
		o = protocol.AppendJSONString(o, b.callID)
		o = append(o, `,"name":`...)
		o = protocol.AppendJSONString(o, b.name)
		return append(o, `,"input":{}}}`...)
	})
}

// deltaFrame produces content_block_delta for block i.
func (p *projection) deltaFrame(out []byte, i int, typ, field string, text []byte) []byte {
	return appendFrame(out, "content_block_delta", func(o []byte) []byte {
		o = append(o, `{"type":"content_block_delta","index":`...)
		o = strconv.AppendInt(o, int64(i), 10)
		o = append(o, `,"delta":{"type":"`...)
		o = append(o, typ...)
		o = append(o, `","`...)
		o = append(o, field...)
		o = append(o, `":"`...)
		o = protocol.AppendJSONStringContent(o, string(text))
		return append(o, `"}}`...)
	})
}

// stopFrame stops block i.
func (p *projection) stopFrame(out []byte, i int) []byte {
	p.blocks[i].stopped = true
	if !p.stream {
		return out
	}
	return appendFrame(out, "content_block_stop", func(o []byte) []byte {
		o = append(o, `{"type":"content_block_stop","index":`...)
		o = strconv.AppendInt(o, int64(i), 10)
		return append(o, '}')
	})
}

// appendHead appends the message's leading members, through "model", with a comma.
func (p *projection) appendHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = protocol.AppendJSONString(b, p.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = protocol.AppendJSONString(b, p.model)
	return append(b, ',')
}

// appendMessage appends the whole message, for a non-streamed answer; its members and
// their order are message_start's, with the message_delta values.
func (p *projection) appendMessage(b []byte) []byte {
	b = p.appendHead(b)
	b = append(b, `"content":[`...)
	for i, blk := range p.blocks {
		if i > 0 {
			b = append(b, ',')
		}
		if blk.kind == blockText {
			b = append(b, `{"type":"text","text":`...)
			b = protocol.AppendJSONString(b, blk.text.String())
			b = append(b, '}')
			continue
		}
		b = append(b, `{"type":"tool_use","id":`...)
		b = protocol.AppendJSONString(b, blk.callID)
		b = append(b, `,"name":`...)
		b = protocol.AppendJSONString(b, blk.name)
		b = append(b, `,"input":`...)
		b = append(b, toolInput(blk.args.String())...)
		b = append(b, '}')
	}
	b = append(b, `],"stop_reason":`...)
	b = protocol.AppendJSONString(b, p.stopReason())
	b = append(b, `,"stop_sequence":null,"stop_details":null,"usage":`...)
	b = p.usage.appendJSON(b, p.provider)
	return append(b, '}')
}

// toolInput is a tool call's arguments as the object tool_use.input must be: compact,
// {} when empty, and {} as well for arguments that are no JSON object — a provider's
// broken output, which a non-streamed answer cannot carry as input (the stream
// delivered the fragments as they were, and /v1/executions/{id}/result keeps them).
func toolInput(args string) []byte {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" || trimmed[0] != '{' {
		return []byte("{}")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(trimmed)); err != nil {
		return []byte("{}")
	}
	return buf.Bytes()
}

// stopReason maps the execution's finish reason, which is its provider's, onto
// Anthropic's: each provider's name for a natural end, a length limit, a stop sequence,
// a tool call or a refusal. A message with tool_use blocks that ended naturally ends
// for its tool calls, which is what a client loops on; anything unknown is end_turn.
func (p *projection) stopReason() string {
	reason := stopEndTurn
	switch strings.ToLower(p.finish) {
	case "max_tokens", "length", "model_context_window_exceeded":
		reason = stopMaxTokens
	case "stop_sequence":
		reason = stopSequence
	case "tool_use", "tool_calls", "function_call":
		reason = stopToolUse
	case "refusal", "content_filter", "content_filtered", "guardrail_intervened", "safety":
		reason = stopRefusal
	}
	if reason == stopEndTurn {
		for _, b := range p.blocks {
			if b.kind == blockToolUse {
				return stopToolUse
			}
		}
	}
	return reason
}

// failureStatus is the HTTP status a failed execution's error is answered with: its
// code's (500 for the codes that only occur asynchronously, such as cancelled).
func failureStatus(e *protocol.Error) int { return e.Code.HTTPStatus() }

// add counts one usage entry: the token units map onto Anthropic's usage fields. A
// provider's figure wins over the runtime's for the same unit.
func (u *usageTotals) add(e protocol.Usage) {
	var slot int
	var dst *float64
	switch e.Unit {
	case protocol.UnitInputTokens:
		slot, dst = 0, &u.input
	case protocol.UnitOutputTokens:
		slot, dst = 1, &u.output
	case protocol.UnitCacheReadTokens:
		slot, dst = 2, &u.cacheRead
	case protocol.UnitCacheWriteTokens:
		slot, dst = 3, &u.cacheWrite
	default:
		return
	}
	provider := e.Source == protocol.SourceProvider
	switch {
	case provider && !u.fromProvider[slot]:
		u.fromProvider[slot], *dst = true, e.Quantity
	case provider == u.fromProvider[slot]:
		*dst += e.Quantity
	}
}

// cachedApart are the providers whose input_tokens leave out the cached input they
// report as cache_read_tokens and cache_write_tokens, as Anthropic's input_tokens do
// (spec/events.md, "usage.reported"); the others' count it, and the door takes it out.
var cachedApart = map[string]bool{"anthropic": true, "bedrock": true}

// appendJSON appends Anthropic's usage object for an answer of provider.
func (u usageTotals) appendJSON(b []byte, provider string) []byte {
	input := u.input
	if !cachedApart[provider] {
		input = max(0, input-u.cacheRead-u.cacheWrite)
	}
	b = append(b, `{"input_tokens":`...)
	b = appendCount(b, input)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = appendCount(b, u.cacheWrite)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = appendCount(b, u.cacheRead)
	b = append(b, `,"output_tokens":`...)
	b = appendCount(b, u.output)
	return append(b, '}')
}

// appendCount appends a token count: usage quantities are finite and ≥ 0 (the engine
// drops others), and Anthropic's are integers.
func appendCount(b []byte, q float64) []byte {
	if q > math.MaxInt64/2 {
		q = math.MaxInt64 / 2
	}
	return strconv.AppendInt(b, int64(math.Round(q)), 10)
}

// appendFrame appends one named SSE event whose data body appends.
func appendFrame(out []byte, name string, body func([]byte) []byte) []byte {
	out = append(out, eventFramePrefix...)
	out = append(out, name...)
	out = append(out, "\ndata: "...)
	out = body(out)
	return append(out, "\n\n"...)
}

// pingFrame is Anthropic's keep-alive event.
var pingFrame = []byte("event: ping\ndata: {\"type\":\"ping\"}\n\n")
