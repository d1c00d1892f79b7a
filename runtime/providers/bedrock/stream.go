package bedrock

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// Bounds of the event-stream framing. A frame is a 12-byte prelude (total length,
// headers length, prelude CRC-32), headers, payload and a message CRC-32. The SDK's
// decoder reads whatever length a prelude declares into memory, so the adapter reads the
// prelude itself, checks it, and hands the decoder only a complete frame it has bounded.
const (
	preludeLen = 12
	minFrame   = preludeLen + 4
	// MaxFrameBytes bounds one frame. ConverseStream frames are single deltas of a few
	// hundred bytes; a prelude that declares more is an unreadable answer, refused before
	// its body is read.
	MaxFrameBytes = 1 << 20
)

// metadataGrace bounds the wait, after messageStop, for the metadata event (usage) and
// the end of the stream: the answer is complete by then, so a stream that stalls there
// ends the attempt successfully rather than with a timeout. A variable for tests.
var metadataGrace = 5 * time.Second

// Frame errors: the stream is not the documented framing.
var (
	errFrameTooLarge = errors.New("event-stream frame larger than the bound")
	errFrameInvalid  = errors.New("event-stream frame with an invalid prelude, checksum or headers")
)

// frameReader reads event-stream messages from a response body, one frame at a time and
// none larger than MaxFrameBytes.
type frameReader struct {
	r       io.Reader
	dec     *eventstream.Decoder
	frame   []byte
	payload []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, dec: eventstream.NewDecoder()}
}

// next returns the next message. It returns io.EOF when the body ends between frames,
// io.ErrUnexpectedEOF when it ends inside one, errFrameTooLarge or errFrameInvalid for a
// frame that is not the documented format (the decoder checks both CRCs), and the read
// error otherwise. A message's payload is valid until the next call.
func (fr *frameReader) next() (eventstream.Message, error) {
	var prelude [preludeLen]byte
	if n, err := io.ReadFull(fr.r, prelude[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return eventstream.Message{}, io.EOF
		}
		return eventstream.Message{}, err // ErrUnexpectedEOF, or the transport's error
	}
	total := binary.BigEndian.Uint32(prelude[0:4])
	headers := binary.BigEndian.Uint32(prelude[4:8])
	switch {
	case crc32.ChecksumIEEE(prelude[:8]) != binary.BigEndian.Uint32(prelude[8:12]):
		return eventstream.Message{}, errFrameInvalid
	case total > MaxFrameBytes:
		return eventstream.Message{}, errFrameTooLarge
	case total < minFrame || headers > total-minFrame:
		return eventstream.Message{}, errFrameInvalid
	}
	if cap(fr.frame) < int(total) {
		fr.frame = make([]byte, total)
	}
	frame := fr.frame[:total]
	copy(frame, prelude[:])
	if _, err := io.ReadFull(fr.r, frame[preludeLen:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return eventstream.Message{}, err
	}
	msg, err := fr.dec.Decode(bytes.NewReader(frame), fr.payload[:0])
	if err != nil {
		return eventstream.Message{}, errFrameInvalid
	}
	fr.payload = msg.Payload
	return msg, nil
}

// headerString is a message header's value, "" when absent.
func headerString(m *eventstream.Message, name string) string {
	if v := m.Headers.Get(name); v != nil {
		return v.String()
	}
	return ""
}

// streamEvent is the payload of one ConverseStream event. One struct covers every event
// type; each fills the fields it has. Bedrock pads payloads with a "p" member, which is
// ignored like every other undocumented member.
type streamEvent struct {
	ContentBlockIndex int `json:"contentBlockIndex"`
	Start             *struct {
		ToolUse *struct {
			ToolUseID string `json:"toolUseId"`
			Name      string `json:"name"`
		} `json:"toolUse"`
	} `json:"start"`
	Delta *struct {
		Text    *string `json:"text"`
		ToolUse *struct {
			Input string `json:"input"`
		} `json:"toolUse"`
	} `json:"delta"`
	StopReason string `json:"stopReason"`
	Usage      *usage `json:"usage"`
}

// toolBlock is the state of one toolUse content block.
type toolBlock struct {
	callID string
	args   bool // an input fragment was recorded
}

// streamState is what a stream accumulates between events.
type streamState struct {
	tools      map[int]*toolBlock // by contentBlockIndex
	order      []*toolBlock       // in start order
	usage      providerhttp.Tokens
	stopReason string
	stopped    bool // messageStop arrived
}

// Event types the adapter acts on; others (messageStart, and any Bedrock adds) are
// skipped.
const (
	evBlockStart = "contentBlockStart"
	evBlockDelta = "contentBlockDelta"
	evBlockStop  = "contentBlockStop"
	evStop       = "messageStop"
	evMetadata   = "metadata"
)

// readStream handles a ConverseStream answer. Events map as follows: a text delta ⇒
// output.delta (output part 0); a toolUse contentBlockStart ⇒ tool.call.started; a toolUse
// input fragment ⇒ tool.call.arguments.delta; metadata usage is reported once, at the
// end; reasoningContent, citation and other deltas are not output of this protocol and
// are skipped. messageStop is the terminal marker: a stream that ends before it is
// truncated. After it, the adapter reads on (at most metadataGrace) for the metadata
// event, which Bedrock sends last; an answer that ends or breaks off there is complete.
// An exception frame is the failure it names (exceptionFailure). stop, when non-nil,
// closes the body, to end a read that waits past the grace.
func (r *reader) readStream(ctx context.Context, body io.Reader, stop func()) (engine.Outcome, error) {
	st := &streamState{tools: map[int]*toolBlock{}}
	fr := newFrameReader(body)
	for {
		msg, err := fr.next()
		if err != nil {
			if st.stopped {
				if !errors.Is(err, io.EOF) {
					r.log.Info("Provider stream broke off after messageStop", "requestID", r.requestID)
				}
				break
			}
			return engine.Outcome{}, r.streamEnded(ctx, err)
		}
		if err := r.handle(st, &msg); err != nil {
			if st.stopped {
				r.log.Info("Provider stream failed after messageStop", "requestID", r.requestID)
				break
			}
			return engine.Outcome{}, err
		}
		if st.stopped && stop != nil {
			t := time.AfterFunc(metadataGrace, stop)
			defer t.Stop()
			stop = nil // armed once
		}
	}
	if err := r.Usage(st.usage); err != nil {
		return engine.Outcome{}, err
	}
	return r.finish(st.stopReason)
}

// streamEnded maps the end of the body before messageStop.
func (r *reader) streamEnded(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		// Cancelled, or past the deadline while the provider stalled: the engine decides
		// which from its own context; the error only needs to say "no answer in time".
		return providerhttp.TransportError(ctx, Provider, err)
	case errors.Is(err, errFrameTooLarge):
		return r.malformed("event-stream frame too large")
	case errors.Is(err, errFrameInvalid):
		return r.malformed("event-stream frame")
	case errors.Is(err, io.EOF):
		r.log.Info("Provider stream ended without messageStop", "requestID", r.requestID, "output", r.Output())
	default:
		// A connection cut mid-stream (or mid-frame) is a truncated stream too.
		r.log.Info("Provider stream broke off", "error", err, "requestID", r.requestID, "output", r.Output())
	}
	return providerhttp.Truncated(Provider, r.Output())
}

// handle applies one message. After messageStop only metadata is taken.
func (r *reader) handle(st *streamState, m *eventstream.Message) error {
	switch headerString(m, eventstreamapi.MessageTypeHeader) {
	case eventstreamapi.EventMessageType:
	case eventstreamapi.ExceptionMessageType:
		return r.exceptionFailure(errorType(headerString(m, eventstreamapi.ExceptionTypeHeader)))
	case eventstreamapi.ErrorMessageType:
		return r.exceptionFailure(errorType(headerString(m, eventstreamapi.ErrorCodeHeader)))
	default:
		return r.malformed("event-stream message type")
	}
	typ := headerString(m, eventstreamapi.EventTypeHeader)
	switch typ {
	case evBlockStart, evBlockDelta, evBlockStop, evStop, evMetadata:
	default:
		return nil
	}
	var e streamEvent
	if err := providerhttp.DecodeChunk(m.Payload, &e); err != nil {
		return r.malformed(typ + " event")
	}
	if st.stopped && typ != evMetadata {
		return nil
	}
	switch typ {
	case evBlockStart:
		return r.blockStart(st, &e)
	case evBlockDelta:
		return r.blockDelta(st, &e)
	case evBlockStop:
		return r.closeTool(st.tools[e.ContentBlockIndex])
	case evStop:
		for _, b := range st.order {
			if err := r.closeTool(b); err != nil {
				return err
			}
		}
		st.stopReason, st.stopped = e.StopReason, true
	case evMetadata:
		st.usage.Merge(e.Usage.tokens())
	}
	return nil
}

func (r *reader) blockStart(st *streamState, e *streamEvent) error {
	if e.Start == nil || e.Start.ToolUse == nil {
		return nil // a text block opens with its first delta; other blocks are not output
	}
	tu := e.Start.ToolUse
	b := &toolBlock{callID: tu.ToolUseID}
	if err := r.toolStarted(len(st.order), tu.ToolUseID, tu.Name); err != nil {
		return err
	}
	st.tools[e.ContentBlockIndex] = b
	st.order = append(st.order, b)
	return nil
}

func (r *reader) blockDelta(st *streamState, e *streamEvent) error {
	d := e.Delta
	if d == nil {
		return nil
	}
	b := st.tools[e.ContentBlockIndex]
	switch {
	case d.Text != nil:
		if b != nil {
			return nil // text is never part of a tool call
		}
		return r.Text(*d.Text)
	case d.ToolUse != nil:
		// Fragments of a block that did not start as a toolUse are not a call; empty
		// fragments carry nothing.
		if b == nil || d.ToolUse.Input == "" {
			return nil
		}
		b.args = true
		return r.ToolArgs(b.callID, d.ToolUse.Input)
	}
	return nil // reasoningContent, citation, image, toolResult: not output of this protocol
}

// closeTool ends a tool block: a call that received no input fragments has the empty
// object as its arguments, as the non-streaming mapping says of an absent input.
func (r *reader) closeTool(b *toolBlock) error {
	if b == nil || b.args {
		return nil
	}
	b.args = true
	return r.ToolArgs(b.callID, "{}")
}
