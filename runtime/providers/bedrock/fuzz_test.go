package bedrock

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
)

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
		rec := &enginetest.Recorder{}
		r := &reader{Events: providerhttp.NewEvents(rec), log: logr.Discard(), secrets: []string{secret}}
		_, err := r.readStream(context.Background(), bytes.NewReader(body), nil)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || !pe.Code.Known() {
				t.Fatalf("error %T %v is not a portable error", err, err)
			}
			if r.Output() && pe.Retryable {
				t.Fatalf("retryable %s after output", pe.Code)
			}
		} else if !bytes.Contains(body, []byte(evStop)) {
			t.Fatal("succeeded without messageStop")
		}
		snap := providertest.CheckAnswer(t, rec)
		for _, c := range snap.ToolCalls {
			if bytes.Contains([]byte(c.CallID+c.Name), []byte(secret)) {
				t.Fatal("a secret reached a tool call")
			}
		}
	})
}
