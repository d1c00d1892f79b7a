package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestStatusOf(t *testing.T) {
	const id = "exe_test"
	created := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	deadline := created.Add(time.Minute)
	at := func(s int) time.Time { return created.Add(time.Duration(s) * time.Second) }
	info, _ := json.Marshal(engine.Info{Ability: "chat", Metadata: map[string]string{"team": "x"}, DeadlineAt: deadline, CreatedAt: created})
	rec := func(last uint64, updated time.Time) eventstore.Status {
		return eventstore.Status{
			Record:       eventstore.Record{ID: id, CreatedAt: created, Info: info},
			LastSequence: last, UpdatedAt: updated,
		}
	}
	ev := func(seq uint64, typ protocol.EventType, data any) protocol.Event {
		b, _ := json.Marshal(data)
		return protocol.Event{ExecutionID: id, Sequence: seq, Timestamp: at(int(seq)), Type: typ, Data: b}
	}
	accepted := ev(1, protocol.EventAccepted, protocol.AcceptedData{Ability: "chat", DeadlineAt: deadline})
	selA := ev(2, protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/a", Provider: "openai", Model: "m-a"})
	failA := ev(3, protocol.EventAttemptFailed, protocol.AttemptFailedData{Attempt: 1, Deployment: "ai/a",
		Error: protocol.NewError(protocol.CodeProviderUnavailable, "unavailable")})
	selB := ev(4, protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 2, Deployment: "ai/b", Provider: "anthropic", Model: "m-b"})
	cancelled := protocol.NewError(protocol.CodeCancelled, "the execution was cancelled")
	failed := ev(5, protocol.EventFailed, protocol.FailedData{Error: cancelled})
	completed := ev(5, protocol.EventCompleted, protocol.CompletedData{FinishReason: "stop"})
	routeB := &protocol.RouteStatus{Deployment: "ai/b", Provider: "anthropic", Model: "m-b"}

	base := protocol.ExecutionStatus{
		ID: id, Ability: "chat", Status: protocol.StatusAccepted, CreatedAt: created, UpdatedAt: created,
		DeadlineAt: deadline, Metadata: map[string]string{"team": "x"},
	}
	with := func(f func(*protocol.ExecutionStatus)) protocol.ExecutionStatus {
		s := base
		f(&s)
		return s
	}
	tests := []struct {
		name   string
		rec    eventstore.Status
		events []protocol.Event
		want   protocol.ExecutionStatus
	}{
		{"created, no events", rec(0, created), nil, base},
		{"accepted", rec(1, at(1)), []protocol.Event{accepted}, with(func(s *protocol.ExecutionStatus) {
			s.LastSequence, s.UpdatedAt = 1, at(1)
		})},
		{"running after fallback", rec(4, at(4)), []protocol.Event{accepted, selA, failA, selB}, with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.UpdatedAt, s.Attempts, s.Route = protocol.StatusRunning, 4, at(4), 2, routeB
		})},
		{"completed", rec(5, at(5)), []protocol.Event{accepted, selA, failA, selB, completed}, with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.UpdatedAt, s.Attempts, s.Route = protocol.StatusCompleted, 5, at(5), 2, routeB
		})},
		{"failed", rec(5, at(5)), []protocol.Event{accepted, selA, failA, selB, failed}, with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.UpdatedAt, s.Attempts, s.Route, s.Error = protocol.StatusFailed, 5, at(5), 2, routeB, cancelled
		})},
		{"events newer than the record", rec(1, at(1)), []protocol.Event{accepted, selA}, with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.UpdatedAt, s.Attempts = protocol.StatusRunning, 2, at(2), 1
			s.Route = &protocol.RouteStatus{Deployment: "ai/a", Provider: "openai", Model: "m-a"}
		})},
		{"record newer than the events", rec(3, at(3)), []protocol.Event{accepted}, with(func(s *protocol.ExecutionStatus) {
			s.LastSequence, s.UpdatedAt = 3, at(3)
		})},
		{"foreign info", eventstore.Status{Record: eventstore.Record{ID: id, CreatedAt: created, Info: json.RawMessage(`"x"`)}, UpdatedAt: created},
			nil, protocol.ExecutionStatus{ID: id, Status: protocol.StatusAccepted, CreatedAt: created, UpdatedAt: created, Metadata: map[string]string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, engine.StatusOf(tt.rec, tt.events)); diff != "" {
				t.Errorf("StatusOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusJSON(t *testing.T) {
	created := time.Date(2026, 12, 2, 13, 0, 0, 123456000, time.UTC)
	st := protocol.ExecutionStatus{ID: "exe_1", Ability: "chat", Status: protocol.StatusAccepted,
		CreatedAt: created, UpdatedAt: created, DeadlineAt: created, Metadata: map[string]string{}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":"exe_1","ability":"chat","status":"accepted","created_at":"2026-12-02T13:00:00.123456Z",` +
		`"updated_at":"2026-12-02T13:00:00.123456Z","deadline_at":"2026-12-02T13:00:00.123456Z",` +
		`"last_sequence":0,"attempts":0,"route":null,"metadata":{}}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
}
