package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Cancels runs the conformance suite of eventstore.Cancels against the stores
// newHarness returns (see Log): cancel requests recorded and waking their watchers on
// both handles, and refused once the execution is terminal.
func Cancels(t *testing.T, newHarness func(t *testing.T) Harness[CancelStore]) {
	run(t, cancelTests, newHarness)
}

var cancelTests = []test[CancelStore]{
	{"UnknownExecution", testCancelUnknownExecution},
	{"CancelWakesWaiters", testCancelWakesWaiters},
	{"CancelAfterTerminal", testCancelAfterTerminal},
	{"WaitCancelHonoursContext", testWaitCancelHonoursContext},
	{"RetentionRemovesCancels", testCancelRetention},
	{"Close", testCancelsClose},
}

func testCancelUnknownExecution(t *testing.T, h Harness[CancelStore]) {
	checkCancelGone(t, h.Store, newID(t))
}

// checkCancelGone asserts that every method of Cancels reports ErrNotFound.
func checkCancelGone(t *testing.T, s eventstore.Cancels, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	checkNotFound(t, id, map[string]error{
		"RequestCancel": s.RequestCancel(ctx, id),
		"WaitCancel":    s.WaitCancel(ctx, id),
	})
}

func testCancelWakesWaiters(t *testing.T, h Harness[CancelStore]) {
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

func testCancelAfterTerminal(t *testing.T, h Harness[CancelStore]) {
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

func testWaitCancelHonoursContext(t *testing.T, h Harness[CancelStore]) {
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 1, false))
	ctx, cancel := context.WithCancel(t.Context())
	waitCancel := start(func() error { return h.Store.WaitCancel(ctx, id) })
	assertBlocked(t, waitCancel)
	cancel()
	if err := result(t, waitCancel); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitCancel after cancel: got %v, want context.Canceled", err)
	}
}

// testCancelRetention: a terminal execution removed after its retention is unknown to
// cancels too.
func testCancelRetention(t *testing.T, h Harness[CancelStore]) {
	id := removedExecution(t, h)
	checkCancelGone(t, h.Store, id)
	checkCancelGone(t, h.Peer, id)
}

func testCancelsClose(t *testing.T, h Harness[CancelStore]) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 1, false))
	waitCancel := start(func() error { return h.Store.WaitCancel(ctx, id) })
	assertBlocked(t, waitCancel)
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := result(t, waitCancel); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("WaitCancel blocked during Close: got %v, want ErrClosed", err)
	}
	checkClosed(t, map[string]error{"RequestCancel": h.Store.RequestCancel(ctx, id)})
}
