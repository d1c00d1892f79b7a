package engine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestStatusOf(t *testing.T) {
	const id = "exe_test"
	created := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	deadline := created.Add(time.Minute)
	info, _ := json.Marshal(engine.Info{Ability: "chat", Metadata: map[string]string{"team": "x"}, DeadlineAt: deadline, CreatedAt: created})
	routeB := &protocol.RouteStatus{Deployment: "ai/b", Provider: "anthropic", Model: "m-b"}
	cancelled := protocol.NewError(protocol.CodeCancelled, "the execution was cancelled")
	st := func(f func(*eventstore.Status)) eventstore.Status {
		s := eventstore.Status{
			Record:    eventstore.Record{ID: id, CreatedAt: created, Info: info},
			UpdatedAt: created, State: protocol.StatusAccepted,
		}
		f(&s)
		return s
	}
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
		name string
		st   eventstore.Status
		want protocol.ExecutionStatus
	}{
		{"created, no events", st(func(*eventstore.Status) {}), base},
		{"running after fallback", st(func(s *eventstore.Status) {
			s.LastSequence, s.UpdatedAt, s.State, s.Attempts, s.Route = 4, created.Add(4*time.Second), protocol.StatusRunning, 2, routeB
		}), with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.UpdatedAt, s.Attempts, s.Route = protocol.StatusRunning, 4, created.Add(4*time.Second), 2, routeB
		})},
		{"completed", st(func(s *eventstore.Status) {
			s.LastSequence, s.Terminal, s.State, s.Attempts, s.Route = 5, true, protocol.StatusCompleted, 2, routeB
		}), with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.Attempts, s.Route = protocol.StatusCompleted, 5, 2, routeB
		})},
		{"failed", st(func(s *eventstore.Status) {
			s.LastSequence, s.Terminal, s.State, s.Error = 2, true, protocol.StatusFailed, cancelled
		}), with(func(s *protocol.ExecutionStatus) {
			s.Status, s.LastSequence, s.Error = protocol.StatusFailed, 2, cancelled
		})},
		{"no state", st(func(s *eventstore.Status) { s.State = "" }), base},
		{"creation time from info", st(func(s *eventstore.Status) { s.CreatedAt = time.Time{} }), base},
		{"foreign info", eventstore.Status{Record: eventstore.Record{ID: id, CreatedAt: created, Info: json.RawMessage(`"x"`)}, UpdatedAt: created},
			protocol.ExecutionStatus{ID: id, Status: protocol.StatusAccepted, CreatedAt: created, UpdatedAt: created, Metadata: map[string]string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, engine.StatusOf(tt.st)); diff != "" {
				t.Errorf("StatusOf (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatusOfStoreFold checks StatusOf on what a store folds from the events the engine
// records: status, attempts, route and error follow the events with one Get.
func TestStatusOfStoreFold(t *testing.T) {
	const id = "exe_fold"
	created := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	deadline := created.Add(time.Minute)
	at := func(s int) time.Time { return created.Add(time.Duration(s) * time.Second) }
	info, _ := json.Marshal(engine.Info{Ability: "chat", DeadlineAt: deadline, CreatedAt: created})
	ev := func(seq uint64, typ protocol.EventType, data any) protocol.Event {
		b, _ := json.Marshal(data)
		return protocol.Event{ExecutionID: id, Sequence: seq, Timestamp: at(int(seq)), Type: typ, Data: b}
	}
	cancelled := protocol.NewError(protocol.CodeCancelled, "the execution was cancelled")
	routeA := &protocol.RouteStatus{Deployment: "ai/a", Provider: "openai", Model: "m-a"}
	routeB := &protocol.RouteStatus{Deployment: "ai/b", Provider: "anthropic", Model: "m-b"}
	steps := []struct {
		ev   protocol.Event
		want func(*protocol.ExecutionStatus)
	}{
		{ev(1, protocol.EventAccepted, protocol.AcceptedData{Ability: "chat", DeadlineAt: deadline}), func(*protocol.ExecutionStatus) {}},
		{ev(2, protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/a", Provider: "openai", Model: "m-a"}),
			func(s *protocol.ExecutionStatus) { s.Status, s.Attempts, s.Route = protocol.StatusRunning, 1, routeA }},
		{ev(3, protocol.EventAttemptFailed, protocol.AttemptFailedData{Attempt: 1, Deployment: "ai/a",
			Error: protocol.NewError(protocol.CodeProviderUnavailable, "unavailable")}),
			func(s *protocol.ExecutionStatus) { s.Status, s.Attempts, s.Route = protocol.StatusRunning, 1, routeA }},
		{ev(4, protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 2, Deployment: "ai/b", Provider: "anthropic", Model: "m-b"}),
			func(s *protocol.ExecutionStatus) { s.Status, s.Attempts, s.Route = protocol.StatusRunning, 2, routeB }},
		{ev(5, protocol.EventFailed, protocol.FailedData{Error: cancelled}), func(s *protocol.ExecutionStatus) {
			s.Status, s.Attempts, s.Route, s.Error = protocol.StatusFailed, 2, routeB, cancelled
		}},
	}
	store := memory.New(memory.WithSweepInterval(0))
	defer store.Close()
	ctx := t.Context()
	if _, err := store.Create(ctx, eventstore.Record{ID: id, CreatedAt: created, Info: info}, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, step := range steps {
		if err := store.Append(ctx, eventstore.NoFence, step.ev); err != nil {
			t.Fatal(err)
		}
		st, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := protocol.ExecutionStatus{
			ID: id, Ability: "chat", Status: protocol.StatusAccepted, CreatedAt: created, UpdatedAt: step.ev.Timestamp,
			DeadlineAt: deadline, LastSequence: step.ev.Sequence, Metadata: map[string]string{},
		}
		step.want(&want)
		if diff := cmp.Diff(want, engine.StatusOf(st)); diff != "" {
			t.Errorf("after event %d: StatusOf (-want +got):\n%s", step.ev.Sequence, diff)
		}
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

// The owner of an execution is the name and, when one was recorded, the uid of its
// creator (spec/authentication.md, "Isolation").
func TestOwnedBy(t *testing.T) {
	const sa = "system:serviceaccount:team-a:summarizer"
	const uid, recreated = "8f3c0e4e-0b6e-4f57-9d1e-8a2f5b7c1d00", "1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5"
	withUID, _ := json.Marshal(engine.Info{Ability: "chat", Principal: sa, PrincipalUID: uid, Namespace: "ai"})
	// As the engine recorded executions before uids were: no principal_uid member.
	legacy := []byte(`{"ability":"chat","deadline_at":"2026-12-02T13:01:00Z","created_at":"2026-12-02T13:00:00Z","principal":"` + sa + `","namespace":"ai"}`)
	anonymous, _ := json.Marshal(engine.Info{Ability: "chat"})

	if got, want := engine.OwnerOf(eventstore.Status{Record: eventstore.Record{Info: withUID}}), (engine.Owner{Principal: sa, UID: uid, Namespace: "ai"}); got != want {
		t.Errorf("OwnerOf = %+v, want %+v", got, want)
	}
	for _, tt := range []struct {
		what      string
		info      []byte
		name, uid string
		want      bool
	}{
		{"its creator", withUID, sa, uid, true},
		{"the same name with another uid (recreated)", withUID, sa, recreated, false},
		{"the same name without a uid", withUID, sa, "", false},
		{"another name with the uid", withUID, "system:serviceaccount:team-a:other", uid, false},
		{"recorded without a uid: the name", legacy, sa, recreated, true},
		{"recorded without a uid: the name, no uid", legacy, sa, "", true},
		{"recorded without a uid: another name", legacy, "alice", "", false},
		{"created without a principal", anonymous, "", "", false},
		{"not the engine's", []byte("{"), "", "", false},
	} {
		if got := engine.OwnerOf(eventstore.Status{Record: eventstore.Record{Info: tt.info}}).OwnedBy(tt.name, tt.uid); got != tt.want {
			t.Errorf("%s: OwnedBy(%q, %q) = %v, want %v", tt.what, tt.name, tt.uid, got, tt.want)
		}
	}
}
