package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
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

// FuzzReadStream feeds arbitrary bodies to the stream reader. Seeds are the checked-in
// replay streams (testdata/*.sse). Invariants: the reader never panics; it fails with a
// known portable error or succeeds only after message_stop; usage is reported at most
// once, last; a failure after output is never retryable.
func FuzzReadStream(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.sse"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	for _, name := range seeds {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		em := &checkingEmitter{t: t, snap: protocol.NewSnapshot("")}
		r := &reader{emit: em, log: logr.Discard(), secret: "sk-secret"}
		_, err := r.readStream(context.Background(), bytes.NewReader(body))
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !pe.Code.Known() {
				t.Fatalf("error %T %v is not a portable error", err, err)
			}
			if r.emitted && pe.Retryable && pe.Code != protocol.CodeContentFiltered {
				t.Fatalf("retryable %s after output", pe.Code)
			}
		} else if !bytes.Contains(body, []byte("message_stop")) {
			t.Fatal("succeeded without message_stop")
		}
		for i, typ := range em.types {
			if typ == protocol.EventUsageReported && i != len(em.types)-1 {
				t.Fatal("usage.reported is not the last event")
			}
		}
	})
}
