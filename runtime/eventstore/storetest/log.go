package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

const (
	// timeout bounds what must happen; only a broken store reaches it.
	timeout = 10 * time.Second
	// blockGrace is how long a call must stay blocked to count as waiting. A store
	// that is too slow to block in time only makes the "already waiting" tests
	// weaker, never flaky.
	blockGrace = 50 * time.Millisecond
	// readers and tailEvents size the concurrent tail test.
	readers    = 50
	tailEvents = 500
)

// base is the time of the first event; microseconds, as the runtime writes them.
var base = time.Date(2026, 12, 2, 13, 0, 0, 123456000, time.UTC)

// Log runs the conformance suite of eventstore.Log against the stores newHarness
// returns: executions and their events recorded, folded and read back, on both
// handles, and waits for new events. A store that is an eventstore.Announcer is tested
// as one too. Each subtest calls newHarness once, and subtests run in parallel, so
// newHarness must be safe for concurrent use and must give each call its own time (its
// own clock) unless Advance only sleeps. The other suites call their factories alike.
func Log(t *testing.T, newHarness func(t *testing.T) Harness[eventstore.Log]) {
	run(t, logTests, newHarness)
}

var logTests = []test[eventstore.Log]{
	{"CreateAndGet", testCreateAndGet},
	{"InvalidArguments", testInvalidArguments},
	{"UnknownExecution", testUnknownExecution},
	{"AppendInOrder", testAppendInOrder},
	{"AppendRejectsOutOfOrder", testAppendRejectsOutOfOrder},
	{"RepeatedCallsSucceedOnce", testRepeatedCalls},
	{"NothingAfterTerminal", testNothingAfterTerminal},
	{"ReadAfterLimit", testReadAfterLimit},
	{"WaitReturnsWhenDataExists", testWaitReturnsWhenDataExists},
	{"WaitWakesOnAppend", testWaitWakesOnAppend},
	{"TerminalWakesEveryWaiter", testTerminalWakesEveryWaiter},
	{"WaitHonoursContext", testWaitHonoursContext},
	{"RetentionRemovesOnlyTerminal", testRetention},
	{"RemoveOnlyTerminal", testRemove},
	{"ConcurrentTail", testConcurrentTail},
	{"CopiesInAndOut", testCopies},
	{"SnapshotFollowsEvents", testSnapshotFollowsEvents},
	{"SnapshotRejectsUndecodableData", testSnapshotRejectsUndecodableData},
	{"SnapshotCopies", testSnapshotCopies},
	{"Close", testClose},
}

func testCreateAndGet(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	rec := record(t)
	if _, err := h.Store.Create(ctx, rec, "", 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := eventstore.Status{Record: rec, UpdatedAt: rec.CreatedAt, State: protocol.StatusAccepted}
	for name, s := range map[string]eventstore.Log{"store": h.Store, "peer": h.Peer} {
		got, err := s.Get(ctx, rec.ID)
		if err != nil {
			t.Fatalf("%s: Get: %v", name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: Get (-want +got):\n%s", name, diff)
		}
		snap, err := s.Snapshot(ctx, rec.ID)
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", name, err)
		}
		if diff := cmp.Diff(protocol.NewSnapshot(rec.ID), snap, ignoreFold); diff != "" {
			t.Errorf("%s: Snapshot before any event (-want +got):\n%s", name, diff)
		}
	}

	dup := rec
	dup.Info = json.RawMessage(`{"other":true}`)
	if _, err := h.Peer.Create(ctx, dup, "", 0); !errors.Is(err, eventstore.ErrExists) {
		t.Errorf("Create duplicate: got %v, want ErrExists", err)
	}
	got, err := h.Store.Get(ctx, rec.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("duplicate Create changed the record (-want +got):\n%s", diff)
	}
}

func testInvalidArguments(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	s := h.Store
	if _, err := s.Create(ctx, eventstore.Record{CreatedAt: base}, "", 0); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("Create with empty id: got %v, want ErrInvalid", err)
	}
	rec := record(t)
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := s.Create(ctx, rec, "replica-a", ttl); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Create leased for %v: got %v, want ErrInvalid", ttl, err)
		}
	}
	if _, err := s.Get(ctx, rec.ID); !errors.Is(err, eventstore.ErrNotFound) {
		t.Errorf("Get after an invalid Create: got %v, want ErrNotFound", err)
	}
	id := create(t, s)
	noID := event(id, 1, protocol.EventAccepted)
	noID.ExecutionID = ""
	if err := s.Append(ctx, eventstore.NoFence, noID); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("Append with empty execution id: got %v, want ErrInvalid", err)
	}
	if err := s.Append(ctx, eventstore.NoFence, event(id, 1, "")); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("Append with empty type: got %v, want ErrInvalid", err)
	}
	if st := status(t, s, id); st.LastSequence != 0 {
		t.Errorf("rejected appends stored events: LastSequence %d", st.LastSequence)
	}
}

func testUnknownExecution(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	id := newID(t)
	checkGone(t, h.Store, id)
	if _, err := h.Store.Get(ctx, id); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Append to an unknown execution created it: Get: %v", err)
	}
}

// checkGone asserts that every method of Log taking an execution id reports ErrNotFound.
func checkGone(t *testing.T, s eventstore.Log, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	checks := map[string]error{}
	_, checks["Get"] = s.Get(ctx, id)
	_, checks["Read"] = s.Read(ctx, id, 0, 0)
	_, checks["Snapshot"] = s.Snapshot(ctx, id)
	checks["Append"] = s.Append(ctx, eventstore.NoFence, event(id, 1, protocol.EventAccepted))
	checks["Wait"] = s.Wait(ctx, id, 0)
	checkNotFound(t, id, checks)
}

func testAppendInOrder(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	id := create(t, h.Store)
	want := events(id, 5, false)
	for i, ev := range want {
		// Alternate handles: the sequence is per execution, not per replica.
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatalf("Append %d: %v", ev.Sequence, err)
		}
	}
	checkEvents(t, h.Peer, id, want)
	st := status(t, h.Store, id)
	if st.LastSequence != 5 || st.Terminal || !st.UpdatedAt.Equal(want[4].Timestamp) {
		t.Errorf("Get: LastSequence %d, Terminal %v, UpdatedAt %v; want 5, false, %v",
			st.LastSequence, st.Terminal, st.UpdatedAt, want[4].Timestamp)
	}
}

func testAppendRejectsOutOfOrder(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	fresh := create(t, h.Store)
	for _, seq := range []uint64{0, 2, 7} {
		if err := h.Store.Append(ctx, eventstore.NoFence, event(fresh, seq, protocol.EventAccepted)); !errors.Is(err, eventstore.ErrSequence) {
			t.Errorf("first Append with sequence %d: got %v, want ErrSequence", seq, err)
		}
	}
	checkEvents(t, h.Store, fresh, nil)

	id := create(t, h.Store)
	stored := events(id, 3, false)
	appendAll(t, h.Store, stored)
	for _, tc := range []struct {
		name string
		seq  uint64
	}{
		{"zero", 0},
		{"duplicate of first", 1},
		{"duplicate of last", 3},
		{"gap", 5},
		{"far gap", 1 << 40},
	} {
		// Another payload: an event identical to the last one is a repeat, not a
		// duplicate (see testRepeatedCalls).
		ev := event(id, tc.seq, protocol.EventOutputDelta)
		ev.Data = json.RawMessage(`{"other":true}`)
		if err := h.Peer.Append(ctx, eventstore.NoFence, ev); !errors.Is(err, eventstore.ErrSequence) {
			t.Errorf("%s: Append sequence %d: got %v, want ErrSequence", tc.name, tc.seq, err)
		}
		// A rejected terminal event must not end the execution either.
		ev.Type = protocol.EventCompleted
		if err := h.Peer.Append(ctx, eventstore.NoFence, ev); !errors.Is(err, eventstore.ErrSequence) {
			t.Errorf("%s: Append terminal sequence %d: got %v, want ErrSequence", tc.name, tc.seq, err)
		}
	}
	checkEvents(t, h.Store, id, stored)
	if st := status(t, h.Store, id); st.LastSequence != 3 || st.Terminal {
		t.Errorf("after rejected appends: LastSequence %d, Terminal %v; want 3, false", st.LastSequence, st.Terminal)
	}
	// The next sequence is still accepted: rejections left no hole or reservation.
	next := event(id, 4, protocol.EventOutputDelta)
	if err := h.Store.Append(ctx, eventstore.NoFence, next); err != nil {
		t.Fatalf("Append 4 after rejections: %v", err)
	}
	checkEvents(t, h.Store, id, append(stored, next))
}

// testRepeatedCalls makes Create and Append again with the same arguments, as a client
// does that retries a call whose answer it lost (a timeout after the store acted): the
// repeat succeeds like the first call and stores nothing more, while any other call
// with the same id or sequence is still rejected.
func testRepeatedCalls(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	rec := record(t)
	for i, s := range []eventstore.Log{h.Store, h.Peer, h.Store} {
		if _, err := s.Create(ctx, rec, "", 0); err != nil {
			t.Fatalf("Create #%d of the same record: %v", i+1, err)
		}
	}
	noInfo := rec
	noInfo.Info = nil
	later := rec
	later.CreatedAt = rec.CreatedAt.Add(time.Nanosecond)
	for name, other := range map[string]eventstore.Record{"without info": noInfo, "created later": later} {
		if _, err := h.Peer.Create(ctx, other, "", 0); !errors.Is(err, eventstore.ErrExists) {
			t.Errorf("Create of another record (%s) with the same id: got %v, want ErrExists", name, err)
		}
	}
	want := eventstore.Status{Record: rec, UpdatedAt: rec.CreatedAt, State: protocol.StatusAccepted}
	if diff := cmp.Diff(want, status(t, h.Store, rec.ID)); diff != "" {
		t.Errorf("Get after repeated Creates (-want +got):\n%s", diff)
	}

	id := rec.ID
	evs := events(id, 4, true)
	noData := event(id, 2, protocol.EventProgress)
	noData.Data = nil
	evs[1] = noData // a repeat must tell a missing payload from another one
	for _, ev := range evs {
		for i, s := range []eventstore.Log{h.Store, h.Peer} {
			if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
				t.Fatalf("Append #%d of event %d: %v", i+1, ev.Sequence, err)
			}
		}
		if ev.Type.Terminal() {
			break
		}
		// Only the very same event repeats the append; any other event with that
		// sequence is not next.
		data, ts, typ, empty := ev, ev, ev, ev
		data.Data = json.RawMessage(`{"other":true}`)
		ts.Timestamp = ev.Timestamp.Add(time.Microsecond)
		typ.Type = protocol.EventUsageReported
		empty.Data = json.RawMessage{}
		for name, other := range map[string]protocol.Event{"data": data, "timestamp": ts, "type": typ, "empty data": empty} {
			if err := h.Peer.Append(ctx, eventstore.NoFence, other); !errors.Is(err, eventstore.ErrSequence) {
				t.Errorf("Append %d with another %s: got %v, want ErrSequence", ev.Sequence, name, err)
			}
		}
		if ev.Sequence > 1 {
			// Repeating an earlier event is no repeat of the last append.
			if err := h.Peer.Append(ctx, eventstore.NoFence, evs[0]); !errors.Is(err, eventstore.ErrSequence) {
				t.Errorf("Append 1 again after %d: got %v, want ErrSequence", ev.Sequence, err)
			}
		}
	}
	checkEvents(t, h.Store, id, evs)
	checkFold(t, h, id, 4) // the repeats folded nothing twice
	if st := status(t, h.Peer, id); st.LastSequence != 4 || !st.Terminal || !st.UpdatedAt.Equal(evs[3].Timestamp) {
		t.Errorf("Get after repeated appends: LastSequence %d, Terminal %v, UpdatedAt %v; want 4, true, %v",
			st.LastSequence, st.Terminal, st.UpdatedAt, evs[3].Timestamp)
	}
	// After the terminal event, only its own repeat succeeds.
	failed := evs[3]
	failed.Type = protocol.EventFailed
	if err := h.Peer.Append(ctx, eventstore.NoFence, failed); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Append of another terminal event 4: got %v, want ErrTerminated", err)
	}
	if err := h.Peer.Append(ctx, eventstore.NoFence, evs[2]); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Append 3 again after the terminal event: got %v, want ErrTerminated", err)
	}
	checkEvents(t, h.Store, id, evs)
}

func testNothingAfterTerminal(t *testing.T, h Harness[eventstore.Log]) {
	for _, typ := range []protocol.EventType{protocol.EventCompleted, protocol.EventFailed} {
		t.Run(string(typ), func(t *testing.T) {
			ctx := t.Context()
			id := create(t, h.Store)
			evs := events(id, 3, false)
			evs = append(evs, event(id, 4, typ))
			appendAll(t, h.Store, evs)
			st := status(t, h.Peer, id)
			if st.LastSequence != 4 || !st.Terminal {
				t.Errorf("Get: LastSequence %d, Terminal %v; want 4, true", st.LastSequence, st.Terminal)
			}
			// Another terminal event 4: the same one again would be a repeat (see
			// testRepeatedCalls).
			other := func(typ protocol.EventType) protocol.Event {
				ev := event(id, 4, typ)
				ev.Data = json.RawMessage(`{"other":true}`)
				return ev
			}
			for _, ev := range []protocol.Event{
				event(id, 5, protocol.EventOutputDelta),
				event(id, 5, protocol.EventCompleted),
				other(protocol.EventFailed),
				other(protocol.EventCompleted),
			} {
				if err := h.Peer.Append(ctx, eventstore.NoFence, ev); !errors.Is(err, eventstore.ErrTerminated) {
					t.Errorf("Append %d %s after terminal: got %v, want ErrTerminated", ev.Sequence, ev.Type, err)
				}
			}
			checkEvents(t, h.Store, id, evs)
		})
	}
}

func testReadAfterLimit(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	id := create(t, h.Store)
	all := events(id, 10, true)
	appendAll(t, h.Store, all)
	for _, tc := range []struct {
		after      uint64
		limit      int
		start, end int // want all[start:end]
	}{
		{0, 0, 0, 10},
		{0, -1, 0, 10},
		{0, 3, 0, 3},
		{3, 0, 3, 10},
		{3, 4, 3, 7},
		{7, 100, 7, 10},
		{9, 1, 9, 10},
		{9, 0, 9, 10},
		{10, 0, 10, 10},
		{10, 5, 10, 10},
		{1 << 62, 5, 10, 10},
	} {
		got, err := h.Peer.Read(ctx, id, tc.after, tc.limit)
		if err != nil {
			t.Fatalf("Read(after %d, limit %d): %v", tc.after, tc.limit, err)
		}
		if diff := cmp.Diff(all[tc.start:tc.end], got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Read(after %d, limit %d) (-want +got):\n%s", tc.after, tc.limit, diff)
		}
	}
}

func testWaitReturnsWhenDataExists(t *testing.T, h Harness[eventstore.Log]) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 3, false))
	for _, after := range []uint64{0, 1, 2} {
		if err := h.Peer.Wait(ctx, id, after); err != nil {
			t.Errorf("Wait(after %d) with 3 events: %v", after, err)
		}
	}
	// Waiting past the end of a terminal execution could never end: it must say so.
	appendAll(t, h.Store, []protocol.Event{event(id, 4, protocol.EventFailed)})
	if err := h.Peer.Wait(ctx, id, 3); err != nil {
		t.Errorf("Wait(after 3) with terminal event 4: %v", err)
	}
	for _, after := range []uint64{4, 9} {
		if err := h.Peer.Wait(ctx, id, after); !errors.Is(err, eventstore.ErrTerminated) {
			t.Errorf("Wait(after %d) on terminal execution with 4 events: got %v, want ErrTerminated", after, err)
		}
	}
}

func testWaitWakesOnAppend(t *testing.T, h Harness[eventstore.Log]) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 2, false))
	// Waiters past the next event must keep waiting when it arrives.
	near := start(func() error { return h.Peer.Wait(ctx, id, 2) })
	far := start(func() error { return h.Peer.Wait(ctx, id, 3) })
	assertBlocked(t, near, far)
	appendAll(t, h.Store, []protocol.Event{event(id, 3, protocol.EventOutputDelta)})
	if err := result(t, near); err != nil {
		t.Errorf("Wait(after 2) woken by event 3: %v", err)
	}
	assertBlocked(t, far)
	appendAll(t, h.Store, []protocol.Event{event(id, 4, protocol.EventOutputDelta)})
	if err := result(t, far); err != nil {
		t.Errorf("Wait(after 3) woken by event 4: %v", err)
	}
}

func testTerminalWakesEveryWaiter(t *testing.T, h Harness[eventstore.Log]) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 2, false))
	var waiters []<-chan error
	for i := range 10 {
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		waiters = append(waiters, start(func() error { return s.Wait(ctx, id, 2) }))
	}
	assertBlocked(t, waiters...)
	terminal := event(id, 3, protocol.EventCompleted)
	appendAll(t, h.Store, []protocol.Event{terminal})
	for i, w := range waiters {
		if err := result(t, w); err != nil {
			t.Errorf("waiter %d: Wait: %v", i, err)
		}
	}
	got, err := h.Peer.Read(ctx, id, 2, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if diff := cmp.Diff([]protocol.Event{terminal}, got); diff != "" {
		t.Errorf("Read after terminal (-want +got):\n%s", diff)
	}
}

func testWaitHonoursContext(t *testing.T, h Harness[eventstore.Log]) {
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 1, false))

	ctx, cancel := context.WithCancel(t.Context())
	wait := start(func() error { return h.Store.Wait(ctx, id, 1) })
	assertBlocked(t, wait)
	cancel()
	if err := result(t, wait); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel: got %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithTimeout(t.Context(), blockGrace)
	defer cancel()
	if err := h.Store.Wait(ctx, id, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past deadline: got %v, want context.DeadlineExceeded", err)
	}
}

func testRetention(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	done := create(t, h.Store)
	appendAll(t, h.Store, events(done, 3, true))
	running := create(t, h.Store)
	appendAll(t, h.Store, events(running, 3, false))
	idle := create(t, h.Store)

	h.Advance(h.Retention / 2)
	for _, id := range []string{done, running, idle} {
		if _, err := h.Peer.Get(ctx, id); err != nil {
			t.Fatalf("Get %s within retention: %v", id, err)
		}
	}
	checkEvents(t, h.Peer, done, events(done, 3, true))
	checkFold(t, h, done, 3)

	h.Advance(h.Retention)
	checkGone(t, h.Store, done)
	checkGone(t, h.Peer, done)
	// Only the terminal event starts the clock: running executions are never expired.
	checkEvents(t, h.Peer, running, events(running, 3, false))
	if _, err := h.Peer.Get(ctx, idle); err != nil {
		t.Errorf("Get execution without events after retention: %v", err)
	}
	appendAll(t, h.Store, []protocol.Event{event(running, 4, protocol.EventCompleted)})
}

// testRemove: Remove ends a terminal execution's retention at once, on every handle,
// and refuses one that is still running without changing it; removing again, or an
// execution that never existed, succeeds and changes nothing.
func testRemove(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	done := create(t, h.Store)
	appendAll(t, h.Store, events(done, 3, true))
	other := create(t, h.Store)
	appendAll(t, h.Store, events(other, 2, true))
	running := create(t, h.Store)
	appendAll(t, h.Store, events(running, 3, false))
	idle := create(t, h.Store)

	for _, id := range []string{running, idle} {
		if err := h.Peer.Remove(ctx, id); !errors.Is(err, eventstore.ErrNotTerminal) {
			t.Errorf("Remove of an execution without its terminal event: got %v, want ErrNotTerminal", err)
		}
	}
	checkEvents(t, h.Store, running, events(running, 3, false))
	if st := status(t, h.Store, idle); st.LastSequence != 0 {
		t.Errorf("refused Remove changed an idle execution: LastSequence %d", st.LastSequence)
	}

	if err := h.Peer.Remove(ctx, done); err != nil {
		t.Fatalf("Remove of a terminal execution: %v", err)
	}
	checkGone(t, h.Store, done)
	checkGone(t, h.Peer, done)
	for i, s := range []eventstore.Log{h.Store, h.Peer} {
		if err := s.Remove(ctx, done); err != nil {
			t.Errorf("handle %d: Remove again: %v", i, err)
		}
	}
	if err := h.Store.Remove(ctx, newID(t)); err != nil {
		t.Errorf("Remove of an unknown execution: %v", err)
	}
	// Only the execution named is removed.
	checkEvents(t, h.Peer, other, events(other, 2, true))
	checkFold(t, h, other, 2)
	// A running execution still ends as usual, and can then be removed.
	appendAll(t, h.Store, []protocol.Event{event(running, 4, protocol.EventFailed)})
	if err := h.Store.Remove(ctx, running); err != nil {
		t.Fatalf("Remove once terminal: %v", err)
	}
	checkGone(t, h.Peer, running)
	// Retention passing over a removed execution finds nothing to do.
	h.Advance(h.Retention + h.Retention/2)
	checkGone(t, h.Store, done)
	checkGone(t, h.Store, other)
}

func testConcurrentTail(t *testing.T, h Harness[eventstore.Log]) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*timeout)
	defer cancel()
	id := create(t, h.Store)
	want := events(id, tailEvents, true)

	var wg, started sync.WaitGroup
	var announced atomic.Int64 // events taken from Announced
	started.Add(readers)
	for r := range readers {
		s := h.Store
		if r%2 == 1 {
			s = h.Peer
		}
		// Half the readers take what the wake-ups announced, as an event stream does,
		// when the store announces events.
		a, _ := s.(eventstore.Announcer)
		if r%4 >= 2 {
			a = nil
		}
		wg.Go(func() {
			started.Done()
			// Small batches make readers interleave with the writer.
			limit := 1 + r%16
			var after uint64
			woken := false
			for {
				var evs []protocol.Event
				if woken && a != nil {
					if evs = a.Announced(id, after, limit); evs != nil {
						announced.Add(int64(len(evs)))
					}
				}
				if evs == nil {
					var err error
					if evs, err = s.Read(ctx, id, after, limit); err != nil {
						t.Errorf("reader %d: Read(after %d): %v", r, after, err)
						return
					}
				}
				if len(evs) > limit {
					t.Errorf("reader %d: %d events for a limit of %d", r, len(evs), limit)
					return
				}
				for _, ev := range evs {
					if ev.Sequence != after+1 || ev.ExecutionID != id {
						t.Errorf("reader %d: got event %s/%d after %d", r, ev.ExecutionID, ev.Sequence, after)
						return
					}
					if diff := cmp.Diff(want[after], ev); diff != "" {
						t.Errorf("reader %d: event %d differs from the appended one (-want +got):\n%s", r, ev.Sequence, diff)
						return
					}
					after = ev.Sequence
					if ev.Type.Terminal() {
						if after != tailEvents {
							t.Errorf("reader %d: terminal event at %d, want %d", r, after, tailEvents)
						}
						return
					}
				}
				if err := s.Wait(ctx, id, after); err != nil {
					t.Errorf("reader %d: Wait(after %d): %v", r, after, err)
					return
				}
				woken = true
			}
		})
	}
	// Readers that start before the writer, and a writer that yields, make most reads
	// end in Wait rather than finding everything already stored.
	started.Wait()
	for _, ev := range events(id, tailEvents, true) {
		if err := h.Store.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Errorf("Append %d: %v", ev.Sequence, err)
			break
		}
		if ev.Sequence%8 == 0 {
			runtime.Gosched()
		}
	}
	wg.Wait()
	t.Logf("%d events taken from Announced", announced.Load())
}

func testCopies(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	rec := record(t)
	wantInfo := string(rec.Info)
	if _, err := h.Store.Create(ctx, rec, "", 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	rec.Info[0] = 'X'
	st := status(t, h.Store, rec.ID)
	if string(st.Info) != wantInfo {
		t.Errorf("mutating Info after Create changed the store: %s", st.Info)
	}
	st.Info[0] = 'X'
	if st := status(t, h.Store, rec.ID); string(st.Info) != wantInfo {
		t.Errorf("mutating Info returned by Get changed the store: %s", st.Info)
	}

	id := rec.ID
	want := events(id, 3, false)
	for _, ev := range events(id, 3, false) {
		if err := h.Store.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatalf("Append: %v", err)
		}
		ev.Data[0] = 'X'
	}
	checkEvents(t, h.Store, id, want)
	got, err := h.Store.Read(ctx, id, 0, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	got[0].Data[1] = 'X'
	// Growing a returned payload in place must reach neither the store nor its
	// neighbours in the same result.
	_ = append(got[0].Data, "XXXXXXXXXXXXXXXX"...)
	if diff := cmp.Diff(want[1:], got[1:]); diff != "" {
		t.Errorf("growing one returned payload changed the others (-want +got):\n%s", diff)
	}
	checkEvents(t, h.Store, id, want)
}

func testClose(t *testing.T, h Harness[eventstore.Log]) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 1, false))
	wait := start(func() error { return h.Store.Wait(ctx, id, 1) })
	assertBlocked(t, wait)
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := result(t, wait); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Wait blocked during Close: got %v, want ErrClosed", err)
	}
	if _, err := h.Store.Get(ctx, id); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Get after Close: got %v, want ErrClosed", err)
	}
	if _, err := h.Store.Snapshot(ctx, id); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Snapshot after Close: got %v, want ErrClosed", err)
	}
	if err := h.Store.Append(ctx, eventstore.NoFence, event(id, 2, protocol.EventCompleted)); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Append after Close: got %v, want ErrClosed", err)
	}
	if _, err := h.Store.Create(ctx, record(t), "replica-a", longLease); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Create after Close: got %v, want ErrClosed", err)
	}
	if err := h.Store.Remove(ctx, id); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Remove after Close: got %v, want ErrClosed", err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
