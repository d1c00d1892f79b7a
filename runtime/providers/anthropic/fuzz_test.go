package anthropic

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
)

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
		rec := &enginetest.Recorder{}
		r := &reader{Events: providerhttp.NewEvents(rec), log: logr.Discard(), secret: "sk-secret"}
		_, err := r.readStream(context.Background(), bytes.NewReader(body))
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !pe.Code.Known() {
				t.Fatalf("error %T %v is not a portable error", err, err)
			}
			if r.Output() && pe.Retryable && pe.Code != protocol.CodeContentFiltered {
				t.Fatalf("retryable %s after output", pe.Code)
			}
		} else if !bytes.Contains(body, []byte("message_stop")) {
			t.Fatal("succeeded without message_stop")
		}
		providertest.CheckAnswer(t, rec)
	})
}
