package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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

var tests = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
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
	{"ReserveIsAtomic", testReserveIsAtomic},
	{"ReleaseThenReserve", testReleaseThenReserve},
	{"ReservationExpires", testReservationExpires},
	{"ReservationLimit", testReservationLimit},
	{"RacingReservationLimit", testRacingReservationLimit},
	{"CancelWakesWaiters", testCancelWakesWaiters},
	{"CancelAfterTerminal", testCancelAfterTerminal},
	{"ConcurrentTail", testConcurrentTail},
	{"CopiesInAndOut", testCopies},
	{"SnapshotFollowsEvents", testSnapshotFollowsEvents},
	{"SnapshotRejectsUndecodableData", testSnapshotRejectsUndecodableData},
	{"SnapshotCopies", testSnapshotCopies},
	{"SecretSharedOnce", testSecretSharedOnce},
	{"SecretExpires", testSecretExpires},
	{"LeaseAcquisition", testLeaseAcquisition},
	{"LeaseRenewal", testLeaseRenewal},
	{"LeaseExpiry", testLeaseExpiry},
	{"LeaseFencesStaleOwner", testLeaseFencing},
	{"LeaseTakeover", testLeaseTakeover},
	{"LeaseRelease", testLeaseRelease},
	{"TerminalEndsLease", testTerminalEndsLease},
	{"RacingAcquire", testRacingAcquire},
	{"SetRemote", testSetRemote},
	{"ReservationCreated", testReservationCreated},
	{"Close", testClose},
}

func testCreateAndGet(t *testing.T, h Harness) {
	ctx := t.Context()
	rec := record(t)
	if _, err := h.Store.Create(ctx, rec, "", 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := eventstore.Status{Record: rec, UpdatedAt: rec.CreatedAt, State: protocol.StatusAccepted}
	for name, s := range map[string]eventstore.Store{"store": h.Store, "peer": h.Peer} {
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

func testInvalidArguments(t *testing.T, h Harness) {
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
	leases := map[string]error{}
	_, leases["Acquire without owner"] = s.Acquire(ctx, id, "", longLease)
	_, leases["Acquire for 0"] = s.Acquire(ctx, id, "replica-a", 0)
	_, leases["Acquire for -1s"] = s.Acquire(ctx, id, "replica-a", -time.Second)
	_, leases["Renew for 0"] = s.Renew(ctx, id, eventstore.FirstFence, 0)
	// NoFence names no lease.
	_, leases["Renew of NoFence"] = s.Renew(ctx, id, eventstore.NoFence, longLease)
	leases["ReleaseLease of NoFence"] = s.ReleaseLease(ctx, id, eventstore.NoFence)
	for name, err := range leases {
		if !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if st := status(t, s, id); st.Lease != (eventstore.Lease{}) {
		t.Errorf("invalid lease calls leased the execution: %+v", st.Lease)
	}
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
	r := reservation(id)
	if _, _, err := s.Reserve(ctx, "", r, h.Retention, 0); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("Reserve with empty key: got %v, want ErrInvalid", err)
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, _, err := s.Reserve(ctx, key(t), r, ttl, 0); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Reserve with ttl %v: got %v, want ErrInvalid", ttl, err)
		}
	}
}

func testUnknownExecution(t *testing.T, h Harness) {
	ctx := t.Context()
	id := newID(t)
	checkGone(t, h.Store, id)
	if _, err := h.Store.Get(ctx, id); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Append to an unknown execution created it: Get: %v", err)
	}
}

// checkGone asserts that every method taking an execution id reports ErrNotFound.
func checkGone(t *testing.T, s eventstore.Store, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	checks := map[string]error{}
	_, checks["Get"] = s.Get(ctx, id)
	_, checks["Read"] = s.Read(ctx, id, 0, 0)
	_, checks["Snapshot"] = s.Snapshot(ctx, id)
	checks["Append"] = s.Append(ctx, eventstore.NoFence, event(id, 1, protocol.EventAccepted))
	checks["Wait"] = s.Wait(ctx, id, 0)
	checks["RequestCancel"] = s.RequestCancel(ctx, id)
	checks["WaitCancel"] = s.WaitCancel(ctx, id)
	_, checks["Acquire"] = s.Acquire(ctx, id, "replica-a", longLease)
	_, checks["Renew"] = s.Renew(ctx, id, eventstore.FirstFence, longLease)
	checks["ReleaseLease"] = s.ReleaseLease(ctx, id, eventstore.FirstFence)
	checks["SetRemote"] = s.SetRemote(ctx, id, eventstore.NoFence, json.RawMessage(`{}`))
	for name, err := range checks {
		if !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("%s(%s): got %v, want ErrNotFound", name, id, err)
		}
	}
}

func testAppendInOrder(t *testing.T, h Harness) {
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

func testAppendRejectsOutOfOrder(t *testing.T, h Harness) {
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

// testRepeatedCalls makes Create, Append and Reserve again with the same arguments, as a
// client does that retries a call whose answer it lost (a timeout after the store
// acted): the repeat succeeds like the first call and stores nothing more, while any
// other call with the same id, sequence or key is still rejected.
func testRepeatedCalls(t *testing.T, h Harness) {
	ctx := t.Context()
	rec := record(t)
	for i, s := range []eventstore.Store{h.Store, h.Peer, h.Store} {
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
		for i, s := range []eventstore.Store{h.Store, h.Peer} {
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

	k := key(t)
	mine := reservation(id)
	reserve(t, h.Store, k, mine, h.Retention, true, mine)
	reserve(t, h.Peer, k, mine, h.Retention, true, mine)
	// Another execution, or another request with this execution, is not a repeat.
	other := reservation("exe_other")
	reserve(t, h.Peer, k, other, h.Retention, false, mine)
	reused := mine
	reused.Fingerprint = "sha256:fedcba9876543210"
	reserve(t, h.Store, k, reused, h.Retention, false, mine)
	// A repeat leaves the expiry of the first reservation alone.
	h.Advance(h.Retention / 2)
	reserve(t, h.Store, k, mine, h.Retention, true, mine)
	h.Advance(h.Retention)
	reserve(t, h.Peer, k, other, h.Retention, true, other)
}

func testNothingAfterTerminal(t *testing.T, h Harness) {
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

func testReadAfterLimit(t *testing.T, h Harness) {
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

func testWaitReturnsWhenDataExists(t *testing.T, h Harness) {
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

func testWaitWakesOnAppend(t *testing.T, h Harness) {
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

func testTerminalWakesEveryWaiter(t *testing.T, h Harness) {
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

func testWaitHonoursContext(t *testing.T, h Harness) {
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 1, false))

	ctx, cancel := context.WithCancel(t.Context())
	wait := start(func() error { return h.Store.Wait(ctx, id, 1) })
	waitCancel := start(func() error { return h.Store.WaitCancel(ctx, id) })
	assertBlocked(t, wait, waitCancel)
	cancel()
	if err := result(t, wait); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel: got %v, want context.Canceled", err)
	}
	if err := result(t, waitCancel); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitCancel after cancel: got %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithTimeout(t.Context(), blockGrace)
	defer cancel()
	if err := h.Store.Wait(ctx, id, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past deadline: got %v, want context.DeadlineExceeded", err)
	}
}

func testRetention(t *testing.T, h Harness) {
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

func testReserveIsAtomic(t *testing.T, h Harness) {
	ctx := t.Context()
	k := key(t)
	const n = 32
	type outcome struct {
		r        eventstore.Reservation
		reserved bool
		err      error
	}
	outcomes := make([]outcome, n)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		wg.Go(func() {
			<-ready
			r := reservation(fmt.Sprintf("exe_candidate_%d", i))
			o := &outcomes[i]
			o.r, o.reserved, o.err = s.Reserve(ctx, k, r, h.Retention, 0)
		})
	}
	close(ready)
	wg.Wait()

	winner := -1
	for i, o := range outcomes {
		if o.err != nil {
			t.Fatalf("Reserve %d: %v", i, o.err)
		}
		if o.reserved {
			if winner >= 0 {
				t.Fatalf("Reserve: both %d and %d reserved the key", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("Reserve: nobody reserved the key")
	}
	want := reservation(fmt.Sprintf("exe_candidate_%d", winner))
	for i, o := range outcomes {
		if diff := cmp.Diff(want, o.r); diff != "" {
			t.Errorf("Reserve %d returned another reservation than the winner's (-want +got):\n%s", i, diff)
		}
	}
}

func testReleaseThenReserve(t *testing.T, h Harness) {
	ctx := t.Context()
	k := key(t)
	first, second := reservation("exe_first"), reservation("exe_second")
	reserve(t, h.Store, k, first, h.Retention, true, first)
	reserve(t, h.Peer, k, second, h.Retention, false, first)

	// A Release naming another execution must leave the owner's reservation alone.
	if err := h.Peer.Release(ctx, k, second.ExecutionID); err != nil {
		t.Fatalf("Release foreign: %v", err)
	}
	reserve(t, h.Peer, k, second, h.Retention, false, first)

	if err := h.Peer.Release(ctx, k, first.ExecutionID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	reserve(t, h.Store, k, second, h.Retention, true, second)
	if err := h.Store.Release(ctx, key(t), "exe_none"); err != nil {
		t.Errorf("Release of a missing key: %v", err)
	}
}

func testReservationExpires(t *testing.T, h Harness) {
	k := key(t)
	first, second := reservation("exe_first"), reservation("exe_second")
	reserve(t, h.Store, k, first, h.Retention, true, first)
	h.Advance(h.Retention / 2)
	reserve(t, h.Peer, k, second, h.Retention, false, first)
	h.Advance(h.Retention)
	reserve(t, h.Peer, k, second, h.Retention, true, second)
	reserve(t, h.Store, k, first, h.Retention, false, second)
}

// testReservationLimit: Reserve counts a scope's unexpired reservations on every handle
// and refuses one over its limit without storing it; releases and expiry make room at
// once, and neither another scope nor a key stored already is limited.
func testReservationLimit(t *testing.T, h Harness) {
	ctx := t.Context()
	const limit = 3
	scope, other := "principal:alice", "principal:bob"
	keys := make([]string, limit)
	for i := range keys {
		keys[i] = key(t)
		r := scoped(scope, fmt.Sprintf("exe_kept_%d", i))
		reserveLimited(t, []eventstore.Store{h.Store, h.Peer}[i%2], keys[i], r, h.Retention, limit, r)
	}
	over := key(t)
	checkLimited(t, h.Peer, over, scoped(scope, "exe_over"), h.Retention, limit)
	// Nothing was stored: without a limit the key is free (and is then counted).
	unlimited := scoped(scope, "exe_unlimited")
	reserveLimited(t, h.Store, over, unlimited, h.Retention, 0, unlimited)
	checkLimited(t, h.Store, key(t), scoped(scope, "exe_over"), h.Retention, limit+1)
	release(t, h.Peer, over, unlimited.ExecutionID)

	// A key stored already answers whatever the limit: another request's reservation,
	// and a repeat of the caller's own Reserve.
	kept := scoped(scope, "exe_kept_0")
	got, reserved, err := h.Peer.Reserve(ctx, keys[0], scoped(scope, "exe_replay"), h.Retention, limit)
	if err != nil || reserved {
		t.Errorf("Reserve of a stored key at the limit: reserved %v, %v; want the stored reservation", reserved, err)
	} else if diff := cmp.Diff(kept, got); diff != "" {
		t.Errorf("Reserve of a stored key at the limit (-want +got):\n%s", diff)
	}
	reserveLimited(t, h.Store, keys[0], kept, h.Retention, limit, kept)
	// Another scope has its own count.
	elsewhere := scoped(other, "exe_elsewhere")
	reserveLimited(t, h.Peer, key(t), elsewhere, h.Retention, limit, elsewhere)

	// A release naming another execution makes no room; the owner's does.
	release(t, h.Store, keys[1], "exe_foreign")
	checkLimited(t, h.Store, over, scoped(scope, "exe_over"), h.Retention, limit)
	release(t, h.Store, keys[1], "exe_kept_1")
	next := scoped(scope, "exe_next")
	reserveLimited(t, h.Peer, over, next, h.Retention, limit, next)

	// Expiry makes room too, and the store says when it will.
	h.Advance(h.Retention / 2)
	if wait := checkLimited(t, h.Peer, key(t), scoped(scope, "exe_over"), h.Retention, limit); wait > h.Retention/2 {
		t.Errorf("RetryAfter %v, half the ttl after the earliest reservation: want at most %v", wait, h.Retention/2)
	}
	h.Advance(h.Retention)
	for i := range limit {
		r := scoped(scope, fmt.Sprintf("exe_after_expiry_%d", i))
		reserveLimited(t, h.Store, key(t), r, h.Retention, limit, r)
	}
	checkLimited(t, h.Peer, key(t), scoped(scope, "exe_over"), h.Retention, limit)
}

// testRacingReservationLimit: of many Reserves racing on both handles for new keys of
// one scope, exactly the limit succeed.
func testRacingReservationLimit(t *testing.T, h Harness) {
	const limit, racers = 5, 32
	scope := "principal:alice"
	var stored, refused atomic.Int32
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		s := []eventstore.Store{h.Store, h.Peer}[i%2]
		wg.Go(func() {
			<-ready
			_, reserved, err := s.Reserve(t.Context(), key(t), scoped(scope, fmt.Sprintf("exe_racer_%d", i)), h.Retention, limit)
			_, full := errors.AsType[*eventstore.ReservationLimitError](err)
			switch {
			case err == nil && reserved:
				stored.Add(1)
			case full:
				refused.Add(1)
			default:
				t.Errorf("Reserve %d: reserved %v, %v", i, reserved, err)
			}
		})
	}
	close(ready)
	wg.Wait()
	if stored.Load() != limit || refused.Load() != racers-limit {
		t.Errorf("%d racing Reserves with limit %d: %d stored, %d refused", racers, limit, stored.Load(), refused.Load())
	}
}

func testCancelWakesWaiters(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 2, false))
	var waiters []<-chan error
	for i := range 4 {
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		waiters = append(waiters, start(func() error { return s.WaitCancel(ctx, id) }))
	}
	assertBlocked(t, waiters...)
	if st := status(t, h.Store, id); st.CancelRequested {
		t.Error("Get before RequestCancel: CancelRequested is true")
	}

	if err := h.Peer.RequestCancel(ctx, id); err != nil {
		t.Fatalf("RequestCancel: %v", err)
	}
	for i, w := range waiters {
		if err := result(t, w); err != nil {
			t.Errorf("waiter %d: WaitCancel: %v", i, err)
		}
	}
	if err := h.Store.RequestCancel(ctx, id); err != nil {
		t.Errorf("second RequestCancel: %v", err)
	}
	if st := status(t, h.Store, id); !st.CancelRequested {
		t.Error("Get after RequestCancel: CancelRequested is false")
	}
	if err := h.Store.WaitCancel(ctx, id); err != nil {
		t.Errorf("WaitCancel after RequestCancel: %v", err)
	}

	// The engine ends a cancelled execution with its terminal event; the request stays
	// visible and later cancels are no-ops.
	appendAll(t, h.Store, []protocol.Event{event(id, 3, protocol.EventFailed)})
	if err := h.Peer.WaitCancel(ctx, id); err != nil {
		t.Errorf("WaitCancel after cancel and terminal: %v", err)
	}
	if err := h.Peer.RequestCancel(ctx, id); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("RequestCancel after terminal: got %v, want ErrTerminated", err)
	}
	checkEvents(t, h.Store, id, append(events(id, 2, false), event(id, 3, protocol.EventFailed)))
}

func testCancelAfterTerminal(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 2, false))
	// A watcher ends by itself when the execution ends without a cancel.
	w := start(func() error { return h.Peer.WaitCancel(ctx, id) })
	assertBlocked(t, w)
	appendAll(t, h.Store, []protocol.Event{event(id, 3, protocol.EventCompleted)})
	if err := result(t, w); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("WaitCancel when the execution ends: got %v, want ErrTerminated", err)
	}
	if err := h.Peer.RequestCancel(ctx, id); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("RequestCancel on terminal execution: got %v, want ErrTerminated", err)
	}
	if err := h.Store.WaitCancel(ctx, id); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("WaitCancel on terminal execution: got %v, want ErrTerminated", err)
	}
	if st := status(t, h.Store, id); st.CancelRequested {
		t.Error("Get: CancelRequested after a rejected RequestCancel")
	}
}

func testConcurrentTail(t *testing.T, h Harness) {
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

func testCopies(t *testing.T, h Harness) {
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

	k := key(t)
	r := reservation(id)
	wantResponse := string(r.Response)
	stored, _, err := h.Store.Reserve(ctx, k, r, h.Retention, 0)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	r.Response[0] = 'X'
	stored.Response[1] = 'X'
	existing, reserved, err := h.Store.Reserve(ctx, k, reservation("exe_other"), h.Retention, 0)
	if err != nil || reserved {
		t.Fatalf("Reserve again: reserved %v, err %v", reserved, err)
	}
	if string(existing.Response) != wantResponse {
		t.Errorf("mutating a Response changed the stored reservation: %s", existing.Response)
	}
}

func testClose(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 1, false))
	wait := start(func() error { return h.Store.Wait(ctx, id, 1) })
	waitCancel := start(func() error { return h.Store.WaitCancel(ctx, id) })
	assertBlocked(t, wait, waitCancel)
	if err := h.Store.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := result(t, wait); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Wait blocked during Close: got %v, want ErrClosed", err)
	}
	if err := result(t, waitCancel); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("WaitCancel blocked during Close: got %v, want ErrClosed", err)
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
	leases := map[string]error{}
	_, leases["Create"] = h.Store.Create(ctx, record(t), "replica-a", longLease)
	_, leases["Acquire"] = h.Store.Acquire(ctx, id, "replica-a", longLease)
	_, leases["Renew"] = h.Store.Renew(ctx, id, eventstore.FirstFence, longLease)
	leases["ReleaseLease"] = h.Store.ReleaseLease(ctx, id, eventstore.FirstFence)
	leases["SetRemote"] = h.Store.SetRemote(ctx, id, eventstore.NoFence, nil)
	_, leases["Orphans"] = h.Store.Orphans(ctx, 0)
	for name, err := range leases {
		if !errors.Is(err, eventstore.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
	if err := h.Store.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Helpers.

func newID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "exe_" + hex.EncodeToString(b[:])
}

func key(t *testing.T) string {
	return "idem_" + newID(t)
}

func record(t *testing.T) eventstore.Record {
	return eventstore.Record{
		ID:        newID(t),
		CreatedAt: base.Add(-time.Second),
		Info:      json.RawMessage(`{"ability":"chat","metadata":{"team":"search"}}`),
	}
}

func create(t *testing.T, s eventstore.Store) string {
	t.Helper()
	rec := record(t)
	if _, err := s.Create(t.Context(), rec, "", 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return rec.ID
}

func reservation(executionID string) eventstore.Reservation {
	return eventstore.Reservation{
		Fingerprint: "sha256:0123456789abcdef",
		ExecutionID: executionID,
		Response:    json.RawMessage(`{"id":"` + executionID + `","status":"accepted"}`),
		CreatedAt:   base,
	}
}

// scoped is reservation(executionID) in scope.
func scoped(scope, executionID string) eventstore.Reservation {
	r := reservation(executionID)
	r.Scope = scope
	return r
}

// reserveLimited calls Reserve with limit and requires it to store r, returning want.
func reserveLimited(t *testing.T, s eventstore.Store, k string, r eventstore.Reservation, ttl time.Duration, limit int, want eventstore.Reservation) {
	t.Helper()
	got, reserved, err := s.Reserve(t.Context(), k, r, ttl, limit)
	if err != nil || !reserved {
		t.Fatalf("Reserve(%s) with limit %d: reserved %v, %v; want it stored", r.ExecutionID, limit, reserved, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Reserve(%s) (-want +got):\n%s", r.ExecutionID, diff)
	}
}

// checkLimited requires Reserve with limit to refuse r, and returns its RetryAfter.
func checkLimited(t *testing.T, s eventstore.Store, k string, r eventstore.Reservation, ttl time.Duration, limit int) time.Duration {
	t.Helper()
	_, reserved, err := s.Reserve(t.Context(), k, r, ttl, limit)
	full, ok := errors.AsType[*eventstore.ReservationLimitError](err)
	if !ok {
		t.Fatalf("Reserve(%s) over limit %d: reserved %v, %v; want a *ReservationLimitError", r.ExecutionID, limit, reserved, err)
	}
	if full.Limit != limit || full.RetryAfter <= 0 || full.RetryAfter > ttl {
		t.Errorf("Reserve(%s) over limit %d: %v; want the limit and a RetryAfter within the ttl %v", r.ExecutionID, limit, full, ttl)
	}
	return full.RetryAfter
}

// release calls Release and requires it to succeed.
func release(t *testing.T, s eventstore.Store, k, executionID string) {
	t.Helper()
	if err := s.Release(t.Context(), k, executionID); err != nil {
		t.Fatalf("Release(%s): %v", executionID, err)
	}
}

// reserve calls Reserve and checks its outcome.
func reserve(t *testing.T, s eventstore.Store, k string, r eventstore.Reservation, ttl time.Duration, wantReserved bool, want eventstore.Reservation) {
	t.Helper()
	got, reserved, err := s.Reserve(t.Context(), k, r, ttl, 0)
	if err != nil {
		t.Fatalf("Reserve(%s): %v", r.ExecutionID, err)
	}
	if reserved != wantReserved {
		t.Errorf("Reserve(%s): reserved %v, want %v", r.ExecutionID, reserved, wantReserved)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Reserve(%s) (-want +got):\n%s", r.ExecutionID, diff)
	}
}

// event returns event seq of execution id, with a payload unique to it.
func event(id string, seq uint64, typ protocol.EventType) protocol.Event {
	return protocol.Event{
		ExecutionID: id,
		Sequence:    seq,
		Timestamp:   base.Add(time.Duration(seq) * time.Millisecond),
		Type:        typ,
		Data:        json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq)),
	}
}

// events returns events 1..to of execution id: execution.accepted first, then text
// deltas, and a terminal execution.completed last if terminal.
func events(id string, to uint64, terminal bool) []protocol.Event {
	var evs []protocol.Event
	for seq := uint64(1); seq <= to; seq++ {
		typ := protocol.EventOutputDelta
		switch {
		case seq == 1:
			typ = protocol.EventAccepted
		case seq == to && terminal:
			typ = protocol.EventCompleted
		}
		evs = append(evs, event(id, seq, typ))
	}
	return evs
}

// appendAll appends evs to an unleased execution.
func appendAll(t *testing.T, s eventstore.Store, evs []protocol.Event) {
	t.Helper()
	appendWith(t, s, eventstore.NoFence, evs)
}

// appendWith appends evs with fence.
func appendWith(t *testing.T, s eventstore.Store, fence eventstore.Fence, evs []protocol.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := s.Append(t.Context(), fence, ev); err != nil {
			t.Fatalf("Append %d with fence %d: %v", ev.Sequence, fence, err)
		}
	}
}

func status(t *testing.T, s eventstore.Store, id string) eventstore.Status {
	t.Helper()
	st, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return st
}

// checkEvents asserts that the execution holds exactly want.
func checkEvents(t *testing.T, s eventstore.Store, id string, want []protocol.Event) {
	t.Helper()
	got, err := s.Read(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("stored events (-want +got):\n%s", diff)
	}
}

// start runs f in a goroutine and delivers its result.
func start(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// assertBlocked gives calls started with start time to block and fails if any ended.
func assertBlocked(t *testing.T, calls ...<-chan error) {
	t.Helper()
	time.Sleep(blockGrace)
	for i, c := range calls {
		select {
		case err := <-c:
			t.Fatalf("call %d returned %v, want it blocked", i, err)
		default:
		}
	}
}

// result returns the result of a call started with start, failing if it stays blocked.
func result(t *testing.T, call <-chan error) error {
	t.Helper()
	select {
	case err := <-call:
		return err
	case <-time.After(timeout):
		t.Fatal("call still blocked")
		return nil
	}
}

// testSecretSharedOnce: the first candidate stored under a name is the secret every
// handle gets, also when several race to store theirs.
func testSecretSharedOnce(t *testing.T, h Harness) {
	ctx := t.Context()
	name := "secret-" + rand.Text()
	first, err := h.Store.Secret(ctx, name, []byte("first"), h.Retention)
	if err != nil || string(first) != "first" {
		t.Fatalf("Secret: %q, %v; want the candidate stored", first, err)
	}
	first[0] = 'X' // the caller's own copy
	again, err := h.Peer.Secret(ctx, name, []byte("second"), h.Retention)
	if err != nil || string(again) != "first" {
		t.Fatalf("Secret from the peer: %q, %v; want the first candidate", again, err)
	}

	raced := "secret-" + rand.Text()
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		wg.Go(func() {
			b, err := s.Secret(ctx, raced, fmt.Appendf(nil, "candidate-%d", i), h.Retention)
			if err != nil {
				t.Errorf("Secret: %v", err)
			}
			got[i] = string(b)
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatalf("racing Secret calls got %q: want one secret for all", got)
		}
	}

	for _, c := range []struct {
		name      string
		candidate []byte
		ttl       time.Duration
	}{{"", []byte("x"), time.Hour}, {name, nil, time.Hour}, {name, []byte("x"), 0}, {name, []byte("x"), -time.Second}} {
		if _, err := h.Store.Secret(ctx, c.name, c.candidate, c.ttl); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Secret(%q, %q, %v): %v, want ErrInvalid", c.name, c.candidate, c.ttl, err)
		}
	}
}

// testSecretExpires: a secret is gone ttl after it was stored, for every handle; the
// next candidate offered then becomes the secret. Asking again does not extend it.
func testSecretExpires(t *testing.T, h Harness) {
	ctx := t.Context()
	name := "secret-" + rand.Text()
	if got, err := h.Store.Secret(ctx, name, []byte("first"), h.Retention); err != nil || string(got) != "first" {
		t.Fatalf("Secret: %q, %v; want the candidate stored", got, err)
	}
	h.Advance(h.Retention / 2)
	if got, err := h.Peer.Secret(ctx, name, []byte("second"), h.Retention); err != nil || string(got) != "first" {
		t.Fatalf("Secret before its ttl: %q, %v; want the first candidate", got, err)
	}
	h.Advance(h.Retention)
	if got, err := h.Peer.Secret(ctx, name, []byte("third"), h.Retention); err != nil || string(got) != "third" {
		t.Fatalf("Secret after its ttl: %q, %v; want the new candidate", got, err)
	}
}
