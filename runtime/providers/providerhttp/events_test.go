package providerhttp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// Events records text at part 0, skips what carries nothing, and notes output: usage is
// not output.
func TestEvents(t *testing.T) {
	rec := &enginetest.Recorder{}
	ev := providerhttp.NewEvents(rec)
	n := 7.0
	if err := ev.Text(""); err != nil {
		t.Fatal(err)
	}
	if err := ev.Usage(providerhttp.Tokens{Input: &n}); err != nil {
		t.Fatal(err)
	}
	if ev.Output() {
		t.Error("usage counted as output")
	}
	if err := ev.Usage(providerhttp.Tokens{}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{ev.Text("Hel"), ev.ToolStarted(0, "call_1", "f"), ev.ToolArgs("call_1", "{}")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !ev.Output() {
		t.Error("output not noted")
	}
	want := []enginetest.Emitted{
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 7)),
		enginetest.TextDelta("Hel"), enginetest.ToolStarted(0, "call_1", "f"), enginetest.ArgsDelta("call_1", "{}"),
	}
	if diff := cmp.Diff(want, rec.Recorded()); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
}

// An emit failure names the event and keeps the engine's error; nothing is noted.
func TestEventsEmitFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev := providerhttp.NewEvents(&enginetest.Recorder{Context: ctx})
	err := ev.Text("late")
	if !errors.Is(err, engine.ErrAttemptOver) || !strings.Contains(err.Error(), "output.delta") {
		t.Errorf("Text after the attempt: %v, want ErrAttemptOver naming output.delta", err)
	}
	if ev.Output() {
		t.Error("a refused event counted as output")
	}
}
