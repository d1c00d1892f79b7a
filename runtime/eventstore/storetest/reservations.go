package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Reservations runs the conformance suite of eventstore.Reservations against the
// stores newHarness returns (see Log): idempotency keys reserved atomically, repeated,
// released, expired and limited per scope, on both handles, and the mark Create leaves
// on the reservation an execution was created for.
func Reservations(t *testing.T, newHarness func(t *testing.T) Harness[ReservationStore]) {
	run(t, reservationTests, newHarness)
}

var reservationTests = []test[ReservationStore]{
	{"InvalidArguments", testReserveInvalidArguments},
	{"RepeatedReserveSucceedsOnce", testRepeatedReserve},
	{"ReserveIsAtomic", testReserveIsAtomic},
	{"ReleaseThenReserve", testReleaseThenReserve},
	{"ReservationExpires", testReservationExpires},
	{"ReservationLimit", testReservationLimit},
	{"RacingReservationLimit", testRacingReservationLimit},
	{"ReservationCreated", testReservationCreated},
	{"CopiesInAndOut", testReservationCopies},
	{"Close", testReservationsClose},
}

func testReserveInvalidArguments(t *testing.T, h Harness[ReservationStore]) {
	ctx := t.Context()
	s := h.Store
	r := reservation(newID(t))
	if _, _, err := s.Reserve(ctx, "", r, h.Retention, 0); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("Reserve with empty key: got %v, want ErrInvalid", err)
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, _, err := s.Reserve(ctx, key(t), r, ttl, 0); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Reserve with ttl %v: got %v, want ErrInvalid", ttl, err)
		}
	}
}

// testRepeatedReserve makes Reserve again with the same arguments, as a client does
// that retries a call whose answer it lost: the repeat succeeds like the first call and
// stores nothing more, while another request's Reserve of the key is still refused.
func testRepeatedReserve(t *testing.T, h Harness[ReservationStore]) {
	id := newID(t)
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

func testReserveIsAtomic(t *testing.T, h Harness[ReservationStore]) {
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

func testReleaseThenReserve(t *testing.T, h Harness[ReservationStore]) {
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

func testReservationExpires(t *testing.T, h Harness[ReservationStore]) {
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
func testReservationLimit(t *testing.T, h Harness[ReservationStore]) {
	ctx := t.Context()
	const limit = 3
	scope, other := "principal:alice", "principal:bob"
	keys := make([]string, limit)
	for i := range keys {
		keys[i] = key(t)
		r := scoped(scope, fmt.Sprintf("exe_kept_%d", i))
		reserveLimited(t, []ReservationStore{h.Store, h.Peer}[i%2], keys[i], r, h.Retention, limit, r)
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
func testRacingReservationLimit(t *testing.T, h Harness[ReservationStore]) {
	const limit, racers = 5, 32
	scope := "principal:alice"
	var stored, refused atomic.Int32
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		s := []ReservationStore{h.Store, h.Peer}[i%2]
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

// testReservationCreated checks that Create marks the reservation it was created for,
// and only one that names the execution, for as long as the reservation lasts.
func testReservationCreated(t *testing.T, h Harness[ReservationStore]) {
	ctx := t.Context()
	k := key(t)
	rec := record(t)
	rec.IdempotencyKey = k
	claimed := reservation(rec.ID)
	claimed.Created = true // Reserve ignores it
	reserve(t, h.Store, k, claimed, h.Retention, true, reservation(rec.ID))
	if _, err := h.Store.Create(ctx, rec, "replica-a", longLease); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if got := status(t, h.Peer, rec.ID).IdempotencyKey; got != k {
		t.Errorf("Get: IdempotencyKey %q, want %q", got, k)
	}
	want := reservation(rec.ID)
	want.Created = true
	reserve(t, h.Peer, k, reservation(rec.ID), h.Retention, true, want)
	reserve(t, h.Store, k, reservation("exe_other"), h.Retention, false, want)

	// A reservation that names another execution stays unmarked.
	k2 := key(t)
	other := reservation("exe_other")
	reserve(t, h.Store, k2, other, h.Retention, true, other)
	rec2 := record(t)
	rec2.IdempotencyKey = k2
	if _, err := h.Store.Create(ctx, rec2, "", 0); err != nil {
		t.Fatalf("Create for another execution's reservation: %v", err)
	}
	reserve(t, h.Peer, k2, other, h.Retention, true, other)

	// The mark lasts as long as the reservation, after the execution's retention too:
	// a replay must still tell an execution that ended from one never created.
	k3 := key(t)
	rec3 := record(t)
	rec3.IdempotencyKey = k3
	reserve(t, h.Store, k3, reservation(rec3.ID), 3*h.Retention, true, reservation(rec3.ID))
	if _, err := h.Store.Create(ctx, rec3, "", 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	appendAll(t, h.Store, events(rec3.ID, 2, true))
	h.Advance(h.Retention + h.Retention/2)
	if _, err := h.Peer.Get(ctx, rec3.ID); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Get after retention: got %v, want ErrNotFound", err)
	}
	want3 := reservation(rec3.ID)
	want3.Created = true
	reserve(t, h.Peer, k3, reservation(rec3.ID), 3*h.Retention, true, want3)
}

func testReservationCopies(t *testing.T, h Harness[ReservationStore]) {
	ctx := t.Context()
	k := key(t)
	r := reservation(newID(t))
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

func testReservationsClose(t *testing.T, h Harness[ReservationStore]) {
	ctx := t.Context()
	k := key(t)
	reserve(t, h.Store, k, reservation("exe_first"), h.Retention, true, reservation("exe_first"))
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]error{}
	_, _, calls["Reserve"] = h.Store.Reserve(ctx, key(t), reservation("exe_second"), h.Retention, 0)
	calls["Release"] = h.Store.Release(ctx, k, "exe_first")
	checkClosed(t, calls)
}

// Helpers.

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
func reserveLimited(t *testing.T, s eventstore.Reservations, k string, r eventstore.Reservation, ttl time.Duration, limit int, want eventstore.Reservation) {
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
func checkLimited(t *testing.T, s eventstore.Reservations, k string, r eventstore.Reservation, ttl time.Duration, limit int) time.Duration {
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
func release(t *testing.T, s eventstore.Reservations, k, executionID string) {
	t.Helper()
	if err := s.Release(t.Context(), k, executionID); err != nil {
		t.Fatalf("Release(%s): %v", executionID, err)
	}
}

// reserve calls Reserve and checks its outcome.
func reserve(t *testing.T, s eventstore.Reservations, k string, r eventstore.Reservation, ttl time.Duration, wantReserved bool, want eventstore.Reservation) {
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
