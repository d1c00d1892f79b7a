package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
)

// Test helpers shared by the package's internal tests (the fuzz target) and its external
// ones: ConverseStream answers are built with the SDK's event-stream Encoder, which
// writes the documented framing (prelude, headers, payload, both CRC-32s), from stream
// scripts in testdata/streams — one JSON object per frame, readable where binary
// fixtures would not be.

// Frame is one frame of a stream script: an event (:event-type), an exception
// (:exception-type) or an error (:error-code), with its JSON payload.
type Frame struct {
	Event     string          `json:"event,omitempty"`
	Exception string          `json:"exception,omitempty"`
	Error     string          `json:"error,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
}

// Message is f as an event-stream message with the headers Bedrock sends.
func (f Frame) Message() eventstream.Message {
	var m eventstream.Message
	switch {
	case f.Exception != "":
		m.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.ExceptionMessageType))
		m.Headers.Set(eventstreamapi.ExceptionTypeHeader, eventstream.StringValue(f.Exception))
	case f.Error != "":
		m.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.ErrorMessageType))
		m.Headers.Set(eventstreamapi.ErrorCodeHeader, eventstream.StringValue(f.Error))
		m.Headers.Set(eventstreamapi.ErrorMessageHeader, eventstream.StringValue("an error"))
	default:
		m.Headers.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.EventMessageType))
		m.Headers.Set(eventstreamapi.EventTypeHeader, eventstream.StringValue(f.Event))
	}
	m.Headers.Set(eventstreamapi.ContentTypeHeader, eventstream.StringValue("application/json"))
	m.Payload = f.Payload
	return m
}

// Event is an event frame with payload.
func Event(typ, payload string) Frame { return Frame{Event: typ, Payload: json.RawMessage(payload)} }

// Exception is an exception frame of type typ.
func Exception(typ, payload string) Frame {
	return Frame{Exception: typ, Payload: json.RawMessage(payload)}
}

// EncodeFrames encodes frames back to back, as a response body carries them.
func EncodeFrames(frames ...Frame) ([]byte, error) {
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, f := range frames {
		if err := enc.Encode(&buf, f.Message()); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// StreamScript reads testdata/streams/name and encodes it.
func StreamScript(name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join("testdata", "streams", name))
	if err != nil {
		return nil, err
	}
	var frames []Frame
	if err := json.Unmarshal(b, &frames); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return EncodeFrames(frames...)
}
