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
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
)

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
// reported at most once, last, and every event folds; no error or outcome holds the
// secret.
func checkResult(t *testing.T, r *reader, rec *enginetest.Recorder, body []byte, out engine.Outcome, err error) {
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) || !pe.Code.Known() {
			t.Fatalf("error %T %v is not a portable error", err, err)
		}
		if r.Output() && pe.Retryable {
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
	providertest.CheckAnswer(t, rec)
}

// FuzzReadStream feeds arbitrary bodies to the stream reader. Seeds are the checked-in
// replay streams (testdata/*.sse).
func FuzzReadStream(f *testing.F) {
	seeds(f, "*.sse")
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := &enginetest.Recorder{}
		r := &reader{Events: providerhttp.NewEvents(rec), provider: ProviderGemini, log: logr.Discard(), secrets: []string{fuzzSecret}}
		out, err := r.readStream(context.Background(), bytes.NewReader(body), nil)
		checkResult(t, r, rec, body, out, err)
	})
}

// FuzzReadWhole feeds arbitrary bodies to the non-streaming reader. Seeds are the
// checked-in answers and error bodies (testdata/*.json, testdata/errors/*.json).
func FuzzReadWhole(f *testing.F) {
	seeds(f, "*.json")
	seeds(f, filepath.Join("errors", "*.json"))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := &enginetest.Recorder{}
		r := &reader{Events: providerhttp.NewEvents(rec), provider: ProviderVertex, log: logr.Discard(), secrets: []string{fuzzSecret}}
		out, err := r.readWhole(context.Background(), bytes.NewReader(body))
		checkResult(t, r, rec, body, out, err)
	})
}
