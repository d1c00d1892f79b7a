package bedrock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// checkingEmitter records event types and checks that every payload folds into a
// snapshot, as the engine's emitter requires.
type checkingEmitter struct {
	t     *testing.T
	types []protocol.EventType
	snap  protocol.Snapshot
}

// RemoteJob fails the test: a streaming adapter has no remote job to record.
func (e *checkingEmitter) RemoteJob(json.RawMessage) error {
	e.t.Fatal("a streaming adapter recorded a remote job")
	return nil
}

func (e *checkingEmitter) Emit(typ protocol.EventType, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		e.t.Fatalf("encode %s: %v", typ, err)
	}
	e.types = append(e.types, typ)
	ev := protocol.Event{Sequence: uint64(len(e.types)), Type: typ, Data: b}
	if err := e.snap.Apply(ev); err != nil {
		e.t.Fatalf("event %s does not fold: %v", typ, err)
	}
	return nil
}

// FuzzReadStream feeds arbitrary bodies to the event-stream reader. Seeds are the
// checked-in stream scripts (testdata/streams/*.json) encoded with the SDK's Encoder,
// plus a frame with a flipped CRC byte and a prelude declaring a huge frame. Invariants:
// the reader never panics; it fails with a known portable error or succeeds only after a
// messageStop event; usage is reported at most once, last; a failure after output is
// never retryable; no secret reaches an event.
func FuzzReadStream(f *testing.F) {
	scripts, err := filepath.Glob(filepath.Join("testdata", "streams", "*.json"))
	if err != nil || len(scripts) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, name := range scripts {
		b, err := StreamScript(filepath.Base(name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	good, err := EncodeFrames(Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"x"}}`),
		Event("messageStop", `{"stopReason":"end_turn"}`))
	if err != nil {
		f.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[20] ^= 0x80
	f.Add(flipped)
	f.Add([]byte{0x00, 0xa0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd9, 0x12, 0x1f, 0x4c})
	f.Add([]byte{})

	const secret = "sk-fuzz-secret"
	f.Fuzz(func(t *testing.T, body []byte) {
		em := &checkingEmitter{t: t, snap: protocol.NewSnapshot("")}
		r := &reader{emit: em, log: logr.Discard(), secrets: []string{secret}}
		_, err := r.readStream(context.Background(), bytes.NewReader(body), nil)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !pe.Code.Known() {
				t.Fatalf("error %T %v is not a portable error", err, err)
			}
			if r.emitted && pe.Retryable {
				t.Fatalf("retryable %s after output", pe.Code)
			}
		} else if !bytes.Contains(body, []byte(evStop)) {
			t.Fatal("succeeded without messageStop")
		}
		for i, typ := range em.types {
			if typ == protocol.EventUsageReported && i != len(em.types)-1 {
				t.Fatal("usage.reported is not the last event")
			}
		}
		for _, c := range em.snap.ToolCalls {
			if bytes.Contains([]byte(c.CallID+c.Name), []byte(secret)) {
				t.Fatal("a secret reached a tool call")
			}
		}
	})
}
