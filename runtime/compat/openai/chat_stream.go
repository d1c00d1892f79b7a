package openai

import (
	"encoding/json"
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The chat.completion.chunk encoder of streamed Chat Completions (spec/compat.md): frames
// are appended to one reused buffer, which the stream writes once per batch of events.
// Consecutive text deltas of a batch share one chunk, as do consecutive argument
// fragments of one tool call, up to flushBytes: the frames of a reader that catches up
// stay few, and a reader that keeps up gets one chunk per delta.

// flushBytes bounds the growth of one chunk and the frames buffered before a write, so
// that a stream's memory does not grow with a batch of large deltas.
const flushBytes = 64 << 10

// chunks encodes the frames of one stream.
type chunks struct {
	// prefix opens every chunk: data: {"id":…,"object":…,"created":…,"model":…,"choices":[
	prefix []byte
	buf    []byte
	// open is the chunk left open for more of the same: openText, or openArgs for the
	// tool call at index call; it starts at start in buf.
	open  byte
	call  int
	start int
}

const (
	openNone byte = iota
	openText
	openArgs
)

// Fixed pieces of chunks.
const (
	choiceTail = `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
	textOpen   = `{"index":0,"delta":{"content":"`
	textClose  = `"}` + choiceTail
	argsClose  = `"}}]}` + choiceTail
)

// newChunks returns the encoder of the stream of execution id, created at created (Unix
// seconds), served by model.
func newChunks(id string, created int64, model string) *chunks {
	p := make([]byte, 0, 128+len(id)+len(model))
	p = append(p, `data: {"id":`...)
	p = protocol.AppendJSONString(p, id)
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = protocol.AppendJSONString(p, model)
	p = append(p, `,"choices":[`...)
	return &chunks{prefix: p, buf: make([]byte, 0, 1024)}
}

// close ends the open chunk, if any.
func (c *chunks) close() {
	switch c.open {
	case openText:
		c.buf = append(c.buf, textClose...)
	case openArgs:
		c.buf = append(c.buf, argsClose...)
	}
	c.open = openNone
}

// role appends the first chunk, which says who speaks.
func (c *chunks) role() {
	c.close()
	c.buf = append(c.buf, c.prefix...)
	c.buf = append(c.buf, `{"index":0,"delta":{"role":"assistant","content":""}`...)
	c.buf = append(c.buf, choiceTail...)
}

// text appends a text delta.
func (c *chunks) text(s string) {
	if c.open != openText || len(c.buf)-c.start >= flushBytes {
		c.close()
		c.start = len(c.buf)
		c.buf = append(c.buf, c.prefix...)
		c.buf = append(c.buf, textOpen...)
		c.open = openText
	}
	c.buf = protocol.AppendJSONStringContent(c.buf, s)
}

// toolStart appends the chunk that opens tool call index: its id, type and name.
func (c *chunks) toolStart(index int, id, name string) {
	c.close()
	c.buf = append(c.buf, c.prefix...)
	c.buf = append(c.buf, `{"index":0,"delta":{"tool_calls":[{"index":`...)
	c.buf = strconv.AppendInt(c.buf, int64(index), 10)
	c.buf = append(c.buf, `,"id":`...)
	c.buf = protocol.AppendJSONString(c.buf, id)
	c.buf = append(c.buf, `,"type":"function","function":{"name":`...)
	c.buf = protocol.AppendJSONString(c.buf, name)
	c.buf = append(c.buf, `,"arguments":""}}]}`...)
	c.buf = append(c.buf, choiceTail...)
}

// toolArgs appends an arguments fragment of tool call index.
func (c *chunks) toolArgs(index int, fragment string) {
	if c.open != openArgs || c.call != index || len(c.buf)-c.start >= flushBytes {
		c.close()
		c.start = len(c.buf)
		c.buf = append(c.buf, c.prefix...)
		c.buf = append(c.buf, `{"index":0,"delta":{"tool_calls":[{"index":`...)
		c.buf = strconv.AppendInt(c.buf, int64(index), 10)
		c.buf = append(c.buf, `,"function":{"arguments":"`...)
		c.open, c.call = openArgs, index
	}
	c.buf = protocol.AppendJSONStringContent(c.buf, fragment)
}

// finish appends the chunk with the finish reason.
func (c *chunks) finish(reason string) {
	c.close()
	c.buf = append(c.buf, c.prefix...)
	c.buf = append(c.buf, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	c.buf = protocol.AppendJSONString(c.buf, reason)
	c.buf = append(c.buf, "}]}\n\n"...)
}

// usage appends the usage chunk of include_usage: no choices, the usage (null when the
// provider reported none).
func (c *chunks) usage(u *usageBody) {
	c.close()
	c.buf = append(c.buf, c.prefix...)
	c.buf = append(c.buf, `],"usage":`...)
	if u == nil {
		c.buf = append(c.buf, "null"...)
	} else {
		b, _ := json.Marshal(u) // integers only
		c.buf = append(c.buf, b...)
	}
	c.buf = append(c.buf, "}\n\n"...)
}

// done appends the end of a stream that completed.
func (c *chunks) done() {
	c.close()
	c.buf = append(c.buf, "data: [DONE]\n\n"...)
}

// failure appends the frame of an execution that failed after the stream started: one
// error object in OpenAI's shape, which the SDKs raise, and no [DONE] after it.
func (c *chunks) failure(e *protocol.Error) {
	c.close()
	b, _ := json.Marshal(newErrorBody(statusOf(e), e, nil)) // fixed shape
	c.buf = append(c.buf, "data: "...)
	c.buf = append(c.buf, b...)
	c.buf = append(c.buf, "\n\n"...)
}

// full reports whether the frames buffered should be written before more are added.
func (c *chunks) full() bool { return len(c.buf) >= flushBytes }

// take returns the frames appended since the last take; they stay valid until the next
// append.
func (c *chunks) take() []byte {
	c.close()
	b := c.buf
	c.buf = c.buf[:0]
	return b
}
