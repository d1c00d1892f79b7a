package openai_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/routing"
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

	var table routing.Holder
	table.Store(routing.NewTable([]routing.Deployment{first, second}))
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	adapters := map[string]engine.Factory{}
	openai.Register(adapters)
	e := engine.New(engine.Config{Store: store, Table: &table, Adapters: adapters})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Shutdown(ctx)
	})

	req := request(t, `{"ability":"chat","input":[{"type":"text","text":"Weather in Paris and Bogotá?"},
		{"type":"tool","name":"get_weather","parameters":{"type":"object"}}]}`)
	id := engine.NewExecutionID()
	if _, err := e.Submit(context.Background(), id, time.Time{}, req); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	events := waitTerminal(t, store, id)

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

func waitTerminal(t *testing.T, store eventstore.Store, id string) []protocol.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var all []protocol.Event
	for {
		evs, err := store.Read(ctx, id, uint64(len(all)), 0)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		all = append(all, evs...)
		if n := len(all); n > 0 && all[n-1].Type.Terminal() {
			return all
		}
		if err := store.Wait(ctx, id, uint64(len(all))); err != nil && !errors.Is(err, eventstore.ErrTerminated) {
			t.Fatalf("Wait: %v", err)
		}
	}
}
