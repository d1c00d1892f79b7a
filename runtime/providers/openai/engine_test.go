package openai_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
)

// Through the real engine: a rate-limited first deployment falls back to the second,
// whose streamed tool calls pass the engine's event checks and fold into the snapshot.
func TestThroughEngine(t *testing.T) {
	limited := serve(t, jsonReply(http.StatusTooManyRequests, testdata(t, "error_429_rate_limit.json"), "retry-after-ms", "10"))
	tools := serve(t, sseReply(testdata(t, "stream_tools.sse")))

	first := *deployment(limited.endpoint(), streaming(), with(protocol.CapTools))
	first.Ref.Name, first.Priority = "first", 10
	second := *deployment(tools.endpoint(), streaming(), with(protocol.CapTools))
	second.Ref.Name, second.Provider, second.Priority = "second", openai.ProviderCompatible, 0

	providers := map[string]engine.Provider{}
	openai.Register(providers, openai.WithHTTPClient(loopback))
	h := enginetest.NewHarness(t, engine.Config{Providers: providers}, first, second)

	req := request(t, `{"ability":"chat","input":[{"type":"text","text":"Weather in Paris and Bogotá?"},
		{"type":"tool","name":"get_weather","parameters":{"type":"object"}}]}`)
	id := h.Submit(req).ID
	events := h.WaitTerminal(id)

	var types []string
	for _, ev := range events {
		types = append(types, string(ev.Type))
	}
	wantTypes := "execution.accepted route.selected route.attempt_failed route.selected" +
		strings.Repeat(" tool.call.started"+strings.Repeat(" tool.call.arguments.delta", 7), 2) +
		" usage.reported execution.completed"
	if got := strings.Join(types, " "); got != wantTypes {
		t.Errorf("event types:\n got %s\nwant %s", got, wantTypes)
	}
	s := protocol.Materialize(id, events)
	if s.Status != protocol.StatusCompleted || s.FinishReason != "tool_calls" || len(s.ToolCalls) != 2 ||
		s.ToolCalls[1].Arguments != `{"location":"Bogotá, Colombia"}` || len(s.Usage) != 4 {
		t.Errorf("snapshot = %+v", s)
	}
	if !strings.Contains(string(events[2].Data), `"code":"rate_limited"`) {
		t.Errorf("attempt_failed = %s", events[2].Data)
	}
}
