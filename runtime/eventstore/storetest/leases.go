package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Lease durations of the lease tests (spec/events.md, "Ownership and orphans"). A store
// on real time sleeps through shortLease, so it is short, yet long enough for the
// checks a test makes before it expires.
const (
	// longLease outlasts every test: a lease that must stay held.
	longLease = time.Minute
	// shortLease is a lease a test lets expire with expireShort.
	shortLease = 200 * time.Millisecond
	// leaseSlack is how long after its expiry a lease is sure to count as expired.
	leaseSlack = 50 * time.Millisecond
	// clockSlack is how far Harness.Now may be from the store's clock (Redis's TIME,
	// or another machine's): the tolerance of checks on a lease's absolute expiry.
	clockSlack = 250 * time.Millisecond
	// racers is how many callers race for one expired lease.
	racers = 16
)

// Leases runs the conformance suite of eventstore.Leases against the stores newHarness
// returns (see Log): leases created, renewed, expired, released and taken over, with
// fences that refuse a stale holder's writes, the orphan index, and remote job handles,
// on both handles.
func Leases(t *testing.T, newHarness func(t *testing.T) Harness[LeaseStore]) {
	run(t, leaseTests, newHarness)
}

var leaseTests = []test[LeaseStore]{
	{"InvalidArguments", testLeaseInvalidArguments},
	{"UnknownExecution", testLeaseUnknownExecution},
	{"RetentionRemovesLeases", testLeaseRetention},
	{"LeaseAcquisition", testLeaseAcquisition},
	{"LeaseRenewal", testLeaseRenewal},
	{"LeaseExpiry", testLeaseExpiry},
	{"LeaseFencesStaleOwner", testLeaseFencing},
	{"LeaseTakeover", testLeaseTakeover},
	{"LeaseRelease", testLeaseRelease},
	{"TerminalEndsLease", testTerminalEndsLease},
	{"RacingAcquire", testRacingAcquire},
	{"SetRemote", testSetRemote},
	{"Close", testLeasesClose},
}

func testLeaseInvalidArguments(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	s := h.Store
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
}

func testLeaseUnknownExecution(t *testing.T, h Harness[LeaseStore]) {
	checkLeaseGone(t, h.Store, newID(t))
}

// testLeaseRetention: a terminal execution removed after its retention is unknown to
// leases too.
func testLeaseRetention(t *testing.T, h Harness[LeaseStore]) {
	id := removedExecution(t, h)
	checkLeaseGone(t, h.Store, id)
	checkLeaseGone(t, h.Peer, id)
}

// checkLeaseGone asserts that every method of Leases taking an execution id reports
// ErrNotFound.
func checkLeaseGone(t *testing.T, s eventstore.Leases, id string) {
	t.Helper()
	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Acquire"] = s.Acquire(ctx, id, "replica-a", longLease)
	_, checks["Renew"] = s.Renew(ctx, id, eventstore.FirstFence, longLease)
	checks["ReleaseLease"] = s.ReleaseLease(ctx, id, eventstore.FirstFence)
	checks["SetRemote"] = s.SetRemote(ctx, id, eventstore.NoFence, json.RawMessage(`{}`))
	checkNotFound(t, id, checks)
}

// testLeaseAcquisition creates executions leased and unleased: the lease is returned
// and reported by Get on every replica, and writes must carry its fence.
func testLeaseAcquisition(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	rec := record(t)
	before := h.Now()
	lease, err := h.Store.Create(ctx, rec, "replica-a", longLease)
	if err != nil {
		t.Fatalf("Create leased: %v", err)
	}
	checkLease(t, lease, "replica-a", eventstore.FirstFence, before.Add(longLease))
	checkStatusLease(t, h, rec.ID, lease)
	// A repeated Create returns the current lease, whoever repeats it.
	for _, owner := range []string{"replica-a", "replica-b", ""} {
		again, err := h.Peer.Create(ctx, rec, owner, longLease)
		if err != nil {
			t.Fatalf("Create again (owner %q): %v", owner, err)
		}
		if diff := cmp.Diff(lease, again); diff != "" {
			t.Errorf("Create again (owner %q) returned another lease (-want +got):\n%s", owner, diff)
		}
	}

	evs := events(rec.ID, 2, false)
	appendWith(t, h.Peer, lease.Fence, evs)
	for _, f := range []eventstore.Fence{eventstore.NoFence, lease.Fence + 1} {
		if err := h.Store.Append(ctx, f, event(rec.ID, 3, protocol.EventOutputDelta)); !errors.Is(err, eventstore.ErrLeaseLost) {
			t.Errorf("Append with fence %d to a lease with fence %d: got %v, want ErrLeaseLost", f, lease.Fence, err)
		}
	}
	checkEvents(t, h.Store, rec.ID, evs)

	// Without an owner, an execution is unleased: its fence is NoFence.
	unleased := record(t)
	got, err := h.Store.Create(ctx, unleased, "", longLease)
	if err != nil {
		t.Fatalf("Create unleased: %v", err)
	}
	if diff := cmp.Diff(eventstore.Lease{}, got); diff != "" {
		t.Errorf("Create unleased returned a lease (-want +got):\n%s", diff)
	}
	checkStatusLease(t, h, unleased.ID, eventstore.Lease{})
	if err := h.Store.Append(ctx, eventstore.FirstFence, event(unleased.ID, 1, protocol.EventAccepted)); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Errorf("Append with fence 1 to an unleased execution: got %v, want ErrLeaseLost", err)
	}
	appendWith(t, h.Peer, eventstore.NoFence, events(unleased.ID, 1, false))
	if ids := orphans(t, h.Peer, 0); len(ids) != 0 {
		t.Errorf("Orphans with no lease expired: %v", ids)
	}
}

// testLeaseRenewal renews a lease before it expires and one after it expired: both are
// held again, on the same fence.
func testLeaseRenewal(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	early, earlyLease := createLeased(t, h.Store, shortLease)
	late, lateLease := createLeased(t, h.Store, shortLease)
	before := h.Now()
	renewed, err := h.Store.Renew(ctx, early, earlyLease.Fence, longLease)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	checkLease(t, renewed, "replica-a", earlyLease.Fence, before.Add(longLease))
	if !renewed.Expires.After(earlyLease.Expires) {
		t.Errorf("Renew: expiry %v, not after the lease's %v", renewed.Expires, earlyLease.Expires)
	}
	checkStatusLease(t, h, early, renewed)

	h.Advance(shortLease + leaseSlack)
	if diff := cmp.Diff([]string{late}, orphans(t, h.Peer, 0)); diff != "" {
		t.Errorf("Orphans after the unrenewed lease expired (-want +got):\n%s", diff)
	}
	// Nobody acquired the expired lease: its holder renews it as well.
	before = h.Now()
	renewed, err = h.Peer.Renew(ctx, late, lateLease.Fence, longLease)
	if err != nil {
		t.Fatalf("Renew of an expired lease: %v", err)
	}
	checkLease(t, renewed, "replica-a", lateLease.Fence, before.Add(longLease))
	if ids := orphans(t, h.Store, 0); len(ids) != 0 {
		t.Errorf("Orphans after every lease was renewed: %v", ids)
	}
	for _, id := range []string{early, late} {
		if _, err := h.Peer.Acquire(ctx, id, "replica-b", longLease); !errors.Is(err, eventstore.ErrLeaseHeld) {
			t.Errorf("Acquire of a renewed lease: got %v, want ErrLeaseHeld", err)
		}
	}

	if _, err := h.Store.Renew(ctx, early, earlyLease.Fence+1, longLease); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Errorf("Renew with another fence: got %v, want ErrLeaseLost", err)
	}
	appendWith(t, h.Store, earlyLease.Fence, events(early, 2, true))
	if _, err := h.Store.Renew(ctx, early, earlyLease.Fence, longLease); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Renew after the terminal event: got %v, want ErrTerminated", err)
	}
}

// testLeaseExpiry checks that Orphans lists an execution only once its lease expired,
// earliest expiry first, and respects its limit.
func testLeaseExpiry(t *testing.T, h Harness[LeaseStore]) {
	const stagger = 50 * time.Millisecond
	var want []string
	for i := range 3 {
		id, _ := createLeased(t, h.Store, shortLease+time.Duration(2-i)*stagger)
		want = append([]string{id}, want...) // the last one created expires first
	}
	createLeased(t, h.Store, longLease)
	create(t, h.Store) // unleased: never an orphan
	if ids := orphans(t, h.Peer, 0); len(ids) != 0 {
		t.Errorf("Orphans before any lease expired: %v", ids)
	}

	h.Advance(shortLease + 2*stagger + leaseSlack)
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{0, want},
		{-1, want},
		{100, want},
		{2, want[:2]},
		{1, want[:1]},
	} {
		if diff := cmp.Diff(tc.want, orphans(t, h.Peer, tc.limit), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Orphans(limit %d) (-want +got):\n%s", tc.limit, diff)
		}
	}
}

// testLeaseFencing takes a lease over from a holder that stopped renewing: every write
// and lease change of the old holder is refused from then on and changes nothing.
func testLeaseFencing(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	id, old := createLeased(t, h.Store, shortLease)
	evs := events(id, 2, false)
	appendWith(t, h.Store, old.Fence, evs)
	remote := json.RawMessage(`{"prediction":"p-old"}`)
	if err := h.Store.SetRemote(ctx, id, old.Fence, remote); err != nil {
		t.Fatalf("SetRemote: %v", err)
	}
	h.Advance(shortLease + leaseSlack)
	before := h.Now()
	taken, err := h.Peer.Acquire(ctx, id, "replica-b", longLease)
	if err != nil {
		t.Fatalf("Acquire of an expired lease: %v", err)
	}
	checkLease(t, taken, "replica-b", old.Fence+1, before.Add(longLease))

	checks := map[string]error{}
	checks["Append"] = h.Store.Append(ctx, old.Fence, event(id, 3, protocol.EventOutputDelta))
	checks["Append terminal"] = h.Store.Append(ctx, old.Fence, event(id, 3, protocol.EventFailed))
	_, checks["Renew"] = h.Store.Renew(ctx, id, old.Fence, longLease)
	checks["SetRemote"] = h.Store.SetRemote(ctx, id, old.Fence, json.RawMessage(`{"prediction":"p-stale"}`))
	checks["ReleaseLease"] = h.Store.ReleaseLease(ctx, id, old.Fence)
	for name, err := range checks {
		if !errors.Is(err, eventstore.ErrLeaseLost) {
			t.Errorf("%s with the old fence after a takeover: got %v, want ErrLeaseLost", name, err)
		}
	}
	checkEvents(t, h.Peer, id, evs)
	st := status(t, h.Peer, id)
	if diff := cmp.Diff(taken, st.Lease); diff != "" {
		t.Errorf("Get after the old holder's attempts: lease (-want +got):\n%s", diff)
	}
	if string(st.Remote) != string(remote) || st.LastSequence != 2 || st.Terminal {
		t.Errorf("Get after the old holder's attempts: Remote %s, LastSequence %d, Terminal %v; want %s, 2, false",
			st.Remote, st.LastSequence, st.Terminal, remote)
	}
	if ids := orphans(t, h.Store, 0); len(ids) != 0 {
		t.Errorf("Orphans after the takeover: %v", ids)
	}
	// The new holder writes on.
	next := event(id, 3, protocol.EventCompleted)
	appendWith(t, h.Peer, taken.Fence, []protocol.Event{next})
	checkEvents(t, h.Store, id, append(evs, next))
}

// testLeaseTakeover acquires leases: an expired or released one goes to the first
// caller with the next fence; an unexpired one to nobody, its holder included.
func testLeaseTakeover(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	rec := record(t)
	first, err := h.Store.Create(ctx, rec, "replica-a", shortLease)
	if err != nil {
		t.Fatalf("Create leased: %v", err)
	}
	for _, owner := range []string{"replica-b", "replica-a"} {
		if _, err := h.Peer.Acquire(ctx, rec.ID, owner, longLease); !errors.Is(err, eventstore.ErrLeaseHeld) {
			t.Errorf("Acquire by %s of an unexpired lease: got %v, want ErrLeaseHeld", owner, err)
		}
	}
	checkStatusLease(t, h, rec.ID, first)

	h.Advance(shortLease + leaseSlack)
	second, err := h.Peer.Acquire(ctx, rec.ID, "replica-b", longLease)
	if err != nil {
		t.Fatalf("Acquire of an expired lease: %v", err)
	}
	if second.Owner != "replica-b" || second.Fence != first.Fence+1 {
		t.Errorf("Acquire of an expired lease: %+v, want owner replica-b, fence %d", second, first.Fence+1)
	}
	if _, err := h.Store.Acquire(ctx, rec.ID, "replica-c", longLease); !errors.Is(err, eventstore.ErrLeaseHeld) {
		t.Errorf("Acquire of a lease just acquired: got %v, want ErrLeaseHeld", err)
	}
	// A repeated Create reports the lease as it is now.
	if again, err := h.Store.Create(ctx, rec, "replica-a", shortLease); err != nil || !cmp.Equal(again, second) {
		t.Errorf("Create again after a takeover: %+v, %v; want %+v", again, err, second)
	}
	if err := h.Peer.ReleaseLease(ctx, rec.ID, second.Fence); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	third, err := h.Store.Acquire(ctx, rec.ID, "replica-c", longLease)
	if err != nil || third.Owner != "replica-c" || third.Fence != first.Fence+2 {
		t.Errorf("Acquire of a released lease: %+v, %v; want owner replica-c, fence %d", third, err, first.Fence+2)
	}
	checkStatusLease(t, h, rec.ID, third)

	// A never-leased execution is acquired with the first fence; a terminal one never.
	id := create(t, h.Store)
	lease, err := h.Peer.Acquire(ctx, id, "replica-a", longLease)
	if err != nil || lease.Owner != "replica-a" || lease.Fence != eventstore.FirstFence {
		t.Errorf("Acquire of an unleased execution: %+v, %v; want owner replica-a, fence 1", lease, err)
	}
	appendWith(t, h.Store, lease.Fence, events(id, 2, true))
	if _, err := h.Peer.Acquire(ctx, id, "replica-b", longLease); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Acquire of a terminal execution: got %v, want ErrTerminated", err)
	}
}

// testLeaseRelease lets go of a lease: the execution is an orphan at once, and the
// releaser's fence stays current until another replica acquires the lease.
func testLeaseRelease(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	id, lease := createLeased(t, h.Store, longLease)
	if err := h.Store.ReleaseLease(ctx, id, lease.Fence); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	st := status(t, h.Peer, id)
	if st.Lease.Owner != lease.Owner || st.Lease.Fence != lease.Fence || st.Lease.Expires.After(h.Now().Add(clockSlack)) {
		t.Errorf("Get after ReleaseLease: lease %+v, want %s's fence %d expiring by now", st.Lease, lease.Owner, lease.Fence)
	}
	if diff := cmp.Diff([]string{id}, orphans(t, h.Peer, 0)); diff != "" {
		t.Errorf("Orphans after ReleaseLease (-want +got):\n%s", diff)
	}
	if err := h.Peer.ReleaseLease(ctx, id, lease.Fence); err != nil {
		t.Errorf("ReleaseLease again: %v", err)
	}
	ev := event(id, 1, protocol.EventAccepted)
	appendWith(t, h.Store, lease.Fence, []protocol.Event{ev})

	taken, err := h.Peer.Acquire(ctx, id, "replica-b", longLease)
	if err != nil {
		t.Fatalf("Acquire of a released lease: %v", err)
	}
	if err := h.Store.ReleaseLease(ctx, id, lease.Fence); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Errorf("ReleaseLease after a takeover: got %v, want ErrLeaseLost", err)
	}
	if err := h.Store.Append(ctx, lease.Fence, event(id, 2, protocol.EventOutputDelta)); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Errorf("Append by the releaser after a takeover: got %v, want ErrLeaseLost", err)
	}
	// Releasing the lease of a terminal execution does nothing.
	appendWith(t, h.Peer, taken.Fence, []protocol.Event{event(id, 2, protocol.EventCompleted)})
	if err := h.Peer.ReleaseLease(ctx, id, taken.Fence); err != nil {
		t.Errorf("ReleaseLease of a terminal execution: %v", err)
	}
	checkStatusLease(t, h, id, taken)
	if ids := orphans(t, h.Store, 0); len(ids) != 0 {
		t.Errorf("Orphans after the terminal event: %v", ids)
	}
}

// testTerminalEndsLease ends an execution whose lease expired: it is no orphan any
// more, and its lease can be neither acquired nor renewed.
func testTerminalEndsLease(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	id, lease := createLeased(t, h.Store, shortLease)
	appendWith(t, h.Store, lease.Fence, events(id, 2, false))
	h.Advance(shortLease + leaseSlack)
	if diff := cmp.Diff([]string{id}, orphans(t, h.Peer, 0)); diff != "" {
		t.Fatalf("Orphans after the lease expired (-want +got):\n%s", diff)
	}
	// Nobody took the lease, so its holder may still end the execution.
	appendWith(t, h.Store, lease.Fence, []protocol.Event{event(id, 3, protocol.EventFailed)})
	if ids := orphans(t, h.Peer, 0); len(ids) != 0 {
		t.Errorf("Orphans after the terminal event: %v", ids)
	}
	if _, err := h.Peer.Acquire(ctx, id, "replica-b", longLease); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Acquire after the terminal event: got %v, want ErrTerminated", err)
	}
	if _, err := h.Store.Renew(ctx, id, lease.Fence, longLease); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Renew after the terminal event: got %v, want ErrTerminated", err)
	}
	if err := h.Store.SetRemote(ctx, id, lease.Fence, nil); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("SetRemote after the terminal event: got %v, want ErrTerminated", err)
	}
	checkStatusLease(t, h, id, lease) // a terminal execution keeps its last lease
}

// testRacingAcquire makes many callers on both handles acquire one expired lease at
// once: exactly one gets it.
func testRacingAcquire(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	id, lease := createLeased(t, h.Store, shortLease)
	h.Advance(shortLease + leaseSlack)
	leases := make([]eventstore.Lease, racers)
	errs := make([]error, racers)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		wg.Go(func() {
			<-ready
			leases[i], errs[i] = s.Acquire(ctx, id, fmt.Sprintf("replica-%d", i), longLease)
		})
	}
	close(ready)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("Acquire: both %d and %d acquired the lease", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, eventstore.ErrLeaseHeld):
			t.Errorf("Acquire %d: got %v, want ErrLeaseHeld for the losers", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("Acquire: nobody acquired the expired lease")
	}
	won := leases[winner]
	if won.Owner != fmt.Sprintf("replica-%d", winner) || won.Fence != lease.Fence+1 {
		t.Errorf("winning Acquire %d: %+v, want its owner and fence %d", winner, won, lease.Fence+1)
	}
	checkStatusLease(t, h, id, won)
}

// testSetRemote records, replaces and clears a remote job handle, reads it back on
// every replica and checks that values are copied in and out.
func testSetRemote(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	id, lease := createLeased(t, h.Store, longLease)
	checkRemote := func(want string) {
		t.Helper()
		for name, s := range map[string]LeaseStore{"store": h.Store, "peer": h.Peer} {
			got := status(t, s, id).Remote
			if (got == nil) != (want == "") || string(got) != want {
				t.Errorf("%s: Get: Remote %q, want %q", name, got, want)
			}
		}
	}
	checkRemote("")
	first := json.RawMessage(`{"provider":"replicate","prediction":"p1"}`)
	if err := h.Store.SetRemote(ctx, id, lease.Fence, first); err != nil {
		t.Fatalf("SetRemote: %v", err)
	}
	first[0] = 'X'
	checkRemote(`{"provider":"replicate","prediction":"p1"}`)
	st := status(t, h.Store, id)
	st.Remote[0] = 'X'
	checkRemote(`{"provider":"replicate","prediction":"p1"}`)

	if err := h.Peer.SetRemote(ctx, id, lease.Fence, json.RawMessage(`{"prediction":"p2"}`)); err != nil {
		t.Fatalf("SetRemote again: %v", err)
	}
	checkRemote(`{"prediction":"p2"}`)
	if err := h.Store.SetRemote(ctx, id, lease.Fence, nil); err != nil {
		t.Fatalf("SetRemote(nil): %v", err)
	}
	checkRemote("")

	// An unleased execution takes NoFence, like its appends.
	unleased := create(t, h.Store)
	if err := h.Store.SetRemote(ctx, unleased, eventstore.FirstFence, json.RawMessage(`{}`)); !errors.Is(err, eventstore.ErrLeaseLost) {
		t.Errorf("SetRemote with fence 1 on an unleased execution: got %v, want ErrLeaseLost", err)
	}
	if err := h.Store.SetRemote(ctx, unleased, eventstore.NoFence, json.RawMessage(`{"prediction":"p3"}`)); err != nil {
		t.Errorf("SetRemote on an unleased execution: %v", err)
	}
	if got := status(t, h.Peer, unleased).Remote; string(got) != `{"prediction":"p3"}` {
		t.Errorf("Get of an unleased execution: Remote %s", got)
	}
}

// createLeased creates an execution leased to "replica-a" for ttl and returns its id and
// lease.
func createLeased(t *testing.T, s eventstore.Log, ttl time.Duration) (string, eventstore.Lease) {
	t.Helper()
	rec := record(t)
	lease, err := s.Create(t.Context(), rec, "replica-a", ttl)
	if err != nil {
		t.Fatalf("Create leased: %v", err)
	}
	return rec.ID, lease
}

// checkLease asserts a lease's owner and fence, and that it expires at about expires.
func checkLease(t *testing.T, got eventstore.Lease, owner string, fence eventstore.Fence, expires time.Time) {
	t.Helper()
	if got.Owner != owner || got.Fence != fence {
		t.Errorf("lease %+v: want owner %s, fence %d", got, owner, fence)
	}
	if d := got.Expires.Sub(expires); d < -clockSlack || d > clockSlack {
		t.Errorf("lease expires at %v, %v from the expected %v", got.Expires, d, expires)
	}
}

// checkStatusLease asserts that both handles' Get report lease.
func checkStatusLease(t *testing.T, h Harness[LeaseStore], id string, lease eventstore.Lease) {
	t.Helper()
	for name, s := range map[string]LeaseStore{"store": h.Store, "peer": h.Peer} {
		if diff := cmp.Diff(lease, status(t, s, id).Lease); diff != "" {
			t.Errorf("%s: Get: lease (-want +got):\n%s", name, diff)
		}
	}
}

func orphans(t *testing.T, s eventstore.Leases, limit int) []string {
	t.Helper()
	ids, err := s.Orphans(t.Context(), limit)
	if err != nil {
		t.Fatalf("Orphans: %v", err)
	}
	return ids
}

func testLeasesClose(t *testing.T, h Harness[LeaseStore]) {
	ctx := t.Context()
	id, lease := createLeased(t, h.Store, longLease)
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]error{}
	_, calls["Acquire"] = h.Store.Acquire(ctx, id, "replica-a", longLease)
	_, calls["Renew"] = h.Store.Renew(ctx, id, lease.Fence, longLease)
	calls["ReleaseLease"] = h.Store.ReleaseLease(ctx, id, lease.Fence)
	calls["SetRemote"] = h.Store.SetRemote(ctx, id, lease.Fence, nil)
	_, calls["Orphans"] = h.Store.Orphans(ctx, 0)
	checkClosed(t, calls)
}
