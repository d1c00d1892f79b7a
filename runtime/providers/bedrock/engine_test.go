package bedrock_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
)

// TestFallbackThroughEngine: through the real engine, a first deployment whose stream
// opens with a throttlingException frame fails the attempt rate_limited and retryable,
// so the engine falls back; the second deployment (a Bedrock API key in another region
// of the same fake endpoint) streams a tool call, and its events pass the engine's checks
// and fold into the snapshot.
func TestFallbackThroughEngine(t *testing.T) {
	throttled := newUpstream(t, streamReply(script(t, "throttled.json"), "x-amzn-RequestId", "req-throttled"))
	tools := newUpstream(t, streamReply(script(t, "tool_use.json")))

	first := *deployment(throttled.URL, streaming, withCaps(protocol.CapTools))
	first.Ref.Name, first.Priority = "first", 10
	second := *deployment(tools.URL, streaming, withCaps(protocol.CapTools), withCredential(apiKeyCanary))
	second.Ref.Name, second.Priority = "second", 0

	providers := map[string]engine.Provider{}
	bedrock.Register(providers, bedrock.WithHTTPClient(loopback), bedrock.WithClock(func() time.Time { return signingTime }))
	h := enginetest.NewHarness(t, engine.Config{Providers: providers}, first, second)

	req := decode(t, `{"ability":"chat","input":[{"type":"text","text":"Weather in Paris?"},
		{"type":"tool","name":"get_weather","parameters":{"type":"object"}}]}`)
	id := h.Submit(req).ID
	events := h.WaitTerminal(id)

	var types []string
	for _, ev := range events {
		types = append(types, string(ev.Type))
	}
	want := "execution.accepted route.selected route.attempt_failed route.selected" +
		" output.delta output.delta tool.call.started" + strings.Repeat(" tool.call.arguments.delta", 3) +
		" usage.reported execution.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("event types:\n got %s\nwant %s", got, want)
	}

	var failed protocol.AttemptFailedData
	if err := json.Unmarshal(events[2].Data, &failed); err != nil {
		t.Fatal(err)
	}
	if failed.Deployment != "ai/first" || failed.Error == nil || failed.Error.Code != protocol.CodeRateLimited || !failed.Error.Retryable ||
		failed.Error.ProviderError == nil || failed.Error.ProviderError.Type != "throttlingException" {
		t.Errorf("route.attempt_failed = %s", events[2].Data)
	}
	var served protocol.RouteSelectedData
	if err := json.Unmarshal(events[3].Data, &served); err != nil {
		t.Fatal(err)
	}
	if served.Deployment != "ai/second" || served.Attempt != 2 || served.Provider != "bedrock" {
		t.Errorf("second route.selected = %s", events[3].Data)
	}

	s := protocol.Materialize(id, events)
	if s.Status != protocol.StatusCompleted || s.FinishReason != "tool_use" || len(s.ToolCalls) != 1 ||
		s.ToolCalls[0].Arguments != `{"city": "Paris"}` || len(s.Usage) != 2 {
		t.Errorf("snapshot = %+v", s)
	}
	if n := len(throttled.requests()); n != 1 {
		t.Errorf("first deployment received %d requests", n)
	}
	c := tools.only(t)
	checkPlacement(t, c)
	for _, ev := range events {
		for _, secret := range allSecrets {
			if strings.Contains(string(ev.Data), secret) {
				t.Errorf("event %s leaks a secret", ev.Type)
			}
		}
	}
}
