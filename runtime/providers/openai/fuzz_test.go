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

// RemoteJob fails the test: a streaming adapter has no remote job to record.
func (e *fuzzEmitter) RemoteJob(json.RawMessage) error {
	e.t.Fatal("a streaming adapter recorded a remote job")
	return nil
}

func (e *fuzzEmitter) Emit(typ protocol.EventType, data any) error {
	switch d := data.(type) {
	case protocol.OutputDeltaData:
		if typ != protocol.EventOutputDelta || d.Index != 0 || d.Type != "text" || d.Text == "" {
			e.t.Fatalf("bad output.delta %s %+v", typ, d)
		}
	case protocol.ToolCallStartedData:
		if typ != protocol.EventToolCallStarted || d.CallID == "" || d.Name == "" || d.Index < 0 || e.started[d.CallID] {
			e.t.Fatalf("bad tool.call.started %s %+v", typ, d)
		}
		e.started[d.CallID] = true
	case protocol.ToolCallArgsDeltaData:
		if typ != protocol.EventToolCallArgsDelta || !e.started[d.CallID] || d.Delta == "" {
			e.t.Fatalf("bad tool.call.arguments.delta %s %+v", typ, d)
		}
	case protocol.UsageReportedData:
		if typ != protocol.EventUsageReported || len(d.Usage) == 0 {
			e.t.Fatalf("bad usage.reported %s %+v", typ, d)
		}
	default:
		e.t.Fatalf("unexpected emit %s %T", typ, data)
	}
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
			r := &reader{a: a, ctx: context.Background(), emit: &fuzzEmitter{t: t, started: map[string]bool{}}}
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
