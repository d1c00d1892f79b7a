package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// checkingEmitter records event types and checks that every payload folds into a
// snapshot, as the engine's emitter requires.
type checkingEmitter struct {
	t     *testing.T
	types []protocol.EventType
	snap  protocol.Snapshot
}

// RemoteJob fails the test: this adapter has no remote job to record.
func (e *checkingEmitter) RemoteJob(json.RawMessage) error {
	e.t.Fatal("the gemini adapter recorded a remote job")
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

// fuzzSecret stands for the credential in the fuzz targets.
const fuzzSecret = "AIzaSyFuzzSecret0123456789"

// seeds adds every testdata file matching pattern to f.
func seeds(f *testing.F, pattern string) {
	names, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(names) == 0 {
		f.Fatalf("no seeds for %s: %v", pattern, err)
	}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkResult holds the invariants of any read: a failure is a known portable error,
// never retryable after output; success needs a finish reason in the body; usage is
// reported at most once, last; no event, error or outcome holds the secret.
func checkResult(t *testing.T, r *reader, em *checkingEmitter, body []byte, out engine.Outcome, err error) {
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) || !pe.Code.Known() {
			t.Fatalf("error %T %v is not a portable error", err, err)
		}
		if r.emitted && pe.Retryable {
			t.Fatalf("retryable %s after output", pe.Code)
		}
		if b, _ := json.Marshal(pe); bytes.Contains(b, []byte(fuzzSecret)) {
			t.Fatal("the error holds the secret")
		}
	} else if !bytes.Contains(bytes.ToLower(body), []byte("finishreason")) && !bytes.Contains(body, []byte(`\u`)) {
		// encoding/json matches member names case-insensitively and unescapes them.
		t.Fatal("succeeded without a finish reason")
	}
	if bytes.Contains([]byte(out.FinishReason+out.ResponseModel), []byte(fuzzSecret)) {
		t.Fatal("the outcome holds the secret")
	}
	usage := 0
	for i, typ := range em.types {
		if typ == protocol.EventUsageReported {
			usage++
			if i != len(em.types)-1 {
				t.Fatal("usage.reported is not the last event")
			}
		}
	}
	if usage > 1 {
		t.Fatalf("usage reported %d times", usage)
	}
}

// FuzzReadStream feeds arbitrary bodies to the stream reader. Seeds are the checked-in
// replay streams (testdata/*.sse).
func FuzzReadStream(f *testing.F) {
	seeds(f, "*.sse")
	f.Fuzz(func(t *testing.T, body []byte) {
		em := &checkingEmitter{t: t, snap: protocol.NewSnapshot("")}
		r := &reader{provider: ProviderGemini, emit: em, log: logr.Discard(), secrets: []string{fuzzSecret}}
		out, err := r.readStream(context.Background(), bytes.NewReader(body), nil)
		checkResult(t, r, em, body, out, err)
	})
}

// FuzzReadWhole feeds arbitrary bodies to the non-streaming reader. Seeds are the
// checked-in answers and error bodies (testdata/*.json, testdata/errors/*.json).
func FuzzReadWhole(f *testing.F) {
	seeds(f, "*.json")
	seeds(f, filepath.Join("errors", "*.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		em := &checkingEmitter{t: t, snap: protocol.NewSnapshot("")}
		r := &reader{provider: ProviderVertex, emit: em, log: logr.Discard(), secrets: []string{fuzzSecret}}
		out, err := r.readWhole(context.Background(), bytes.NewReader(body))
		checkResult(t, r, em, body, out, err)
	})
}
