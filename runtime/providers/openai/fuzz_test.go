package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const fuzzCredential = "sk-fuzz-credential"

// fuzzEmitter checks the adapter's emits the way the engine would: every event is of an
// adapter type, tool calls are announced once with id and name, and argument deltas
// only name announced calls.
type fuzzEmitter struct {
	t       *testing.T
	started map[string]bool
}

func (e *fuzzEmitter) Text(index int, text string) error {
	if index != 0 || text == "" {
		e.t.Fatalf("bad output.delta %d %q", index, text)
	}
	return nil
}

func (e *fuzzEmitter) ToolStarted(index int, callID, name string) error {
	if callID == "" || name == "" || index < 0 || e.started[callID] {
		e.t.Fatalf("bad tool.call.started %d %q %q", index, callID, name)
	}
	e.started[callID] = true
	return nil
}

func (e *fuzzEmitter) ToolArgs(callID, delta string) error {
	if !e.started[callID] || delta == "" {
		e.t.Fatalf("bad tool.call.arguments.delta %q %q", callID, delta)
	}
	return nil
}

func (e *fuzzEmitter) Usage(usage []protocol.Usage) error {
	if len(usage) == 0 {
		e.t.Fatal("empty usage.reported")
	}
	return nil
}

func (e *fuzzEmitter) Progress(protocol.ProgressData) error {
	e.t.Fatal("a chat adapter emitted execution.progress")
	return nil
}

func (e *fuzzEmitter) Result(protocol.OutputResultData) error {
	e.t.Fatal("a chat adapter emitted output.result")
	return nil
}

// RemoteJob fails the test: a streaming adapter has no remote job to record.
func (e *fuzzEmitter) RemoteJob(json.RawMessage) error {
	e.t.Fatal("a streaming adapter recorded a remote job")
	return nil
}

// FuzzReadResponse feeds arbitrary bytes to the stream and completion readers: they must
// never panic, emit only well-formed events, and fail only with a portable error whose
// provider identifiers never hold the credential.
func FuzzReadResponse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.*"))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"x\"}}]}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"type":"` + fuzzCredential + `","code":1e400}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		a := &adapter{provider: ProviderOpenAI, cred: routing.NewCredential(fuzzCredential), log: logr.Discard()}
		for _, stream := range []bool{true, false} {
			r := &reader{Events: providerhttp.NewEvents(&fuzzEmitter{t: t, started: map[string]bool{}}), a: a, ctx: context.Background()}
			var err error
			if stream {
				_, err = r.readStream(bytes.NewReader(body))
			} else {
				_, err = r.readCompletion(bytes.NewReader(body))
			}
			if err == nil {
				continue
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || !pe.Code.Known() {
				t.Fatalf("error %v is not a portable error", err)
			}
			if b, _ := json.Marshal(pe); strings.Contains(string(b), fuzzCredential) {
				t.Fatalf("credential in error %s", b)
			}
		}
	})
}
