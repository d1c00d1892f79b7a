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
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// BudgetStore is a store as the Budgets suite tests it. Counters and holds do not
// depend on executions being recorded, so it needs no Log: the runtime names the
// executions and counters, and the store only counts.
type BudgetStore struct {
	eventstore.Budgets
}

// Budgets runs the conformance suite of eventstore.Budgets against the stores
// newHarness returns (see Log): holds that all fit or change nothing, holds replaced
// by the next Hold of their execution, settlement exactly once, the pending list, the
// expiry of counters, and the race of many executions for the last of a limit, on both
// handles.
func Budgets(t *testing.T, newHarness func(t *testing.T) Harness[BudgetStore]) {
	run(t, budgetTests, newHarness)
}

var budgetTests = []test[BudgetStore]{
	{"InvalidArguments", testBudgetInvalidArguments},
	{"HoldIsAllOrNothing", testHoldAllOrNothing},
	{"NoLimitNeverRefuses", testHoldWithoutLimit},
	{"HoldReplacesHolds", testHoldReplaces},
	{"RefusedHoldKeepsHolds", testRefusedHoldKeeps},
	{"SettleOnce", testSettleOnce},
	{"SettleFloorsAtZero", testSettleFloors},
	{"Pending", testPending},
	{"UnknownCounters", testUnknownCounters},
	{"CounterExpires", testCounterExpires},
	{"RacingHolds", testRacingHolds},
	{"Close", testBudgetsClose},
}

// holdLife is the Expires of the suite's holds, from the store's clock, unless a test
// lets a counter expire: longer than any test.
const holdLife = time.Hour

// racingHolds is how many executions race for racingLimit, one unit each.
const (
	racingHolds = 300
	racingLimit = 100
)

// counterNames returns n counter names of the test's own, shaped like the runtime's
// (a Budget's uid, a window's start, a unit, a subject), with '/', ':', '.' and braces
// that must not confuse a store's key layout.
func counterNames(t *testing.T, n int) []string {
	names := make([]string, n)
	uid := newID(t)
	for i := range names {
		names[i] = fmt.Sprintf("budget/%s/2026-12-01T00:00:00+01:00/cost/{User:alice.%d}", uid, i)
	}
	return names
}

// hold makes the holds for id, failing the test on any error.
func hold(t *testing.T, s eventstore.Budgets, id string, note json.RawMessage, holds ...eventstore.Hold) {
	t.Helper()
	if err := s.Hold(t.Context(), id, holds, note); err != nil {
		t.Fatalf("Hold for %s: %v", id, err)
	}
}

// checkRefused asserts that err is a refusal of the hold at index, on a counter at
// used.
func checkRefused(t *testing.T, err error, index int, used int64) {
	t.Helper()
	var refused *eventstore.HoldRefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("Hold: got %v, want a *HoldRefusedError", err)
	}
	if refused.Index != index || refused.Used != used {
		t.Errorf("Hold refused hold %d at %d, want hold %d at %d", refused.Index, refused.Used, index, used)
	}
}

// checkCounters asserts the values of the named counters, and returns them.
func checkCounters(t *testing.T, s eventstore.Budgets, names []string, want ...int64) []int64 {
	t.Helper()
	got, err := s.Counters(t.Context(), names)
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	return got
}

// settle settles id and asserts whether it held anything.
func settle(t *testing.T, s eventstore.Budgets, id string, spent map[string]int64, want bool) {
	t.Helper()
	settled, err := s.Settle(t.Context(), id, spent)
	if err != nil {
		t.Fatalf("Settle %s: %v", id, err)
	}
	if settled != want {
		t.Errorf("Settle %s: settled %v, want %v", id, settled, want)
	}
}

// pendingIDs returns the ids Pending lists.
func pendingIDs(t *testing.T, s eventstore.Budgets, before time.Time, limit int) []string {
	t.Helper()
	pending, err := s.Pending(t.Context(), before, limit)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	ids := make([]string, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
	}
	return ids
}

// testBudgetInvalidArguments: every malformed call is refused with ErrInvalid and
// changes nothing, neither the counters nor what the execution held.
func testBudgetInvalidArguments(t *testing.T, h Harness[BudgetStore]) {
	ctx := t.Context()
	s := h.Store
	c := counterNames(t, 2)
	id := newID(t)
	expires := h.Now().Add(holdLife)
	good := eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 5, Limit: 100, Expires: expires}
	hold(t, s, id, nil, good)

	with := func(f func(h *eventstore.Hold)) []eventstore.Hold {
		bad := eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 7, Limit: 100, Expires: expires}
		f(&bad)
		return []eventstore.Hold{good, bad}
	}
	calls := map[string]error{
		"Hold without id":            s.Hold(ctx, "", []eventstore.Hold{good}, nil),
		"Hold without counter":       s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Counter = "" }), nil),
		"Hold without unit":          s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Unit = "" }), nil),
		"Hold a negative amount":     s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Amount = -1 }), nil),
		"Hold above MaxAmount":       s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Amount = eventstore.MaxAmount + 1 }), nil),
		"Hold under a limit too big": s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Limit = eventstore.MaxAmount + 1 }), nil),
		"Hold without expiry":        s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Expires = time.Time{} }), nil),
		"Hold one counter twice":     s.Hold(ctx, id, with(func(h *eventstore.Hold) { h.Counter = c[0] }), nil),
	}
	_, calls["Settle without id"] = s.Settle(ctx, "", nil)
	_, calls["Settle a negative amount"] = s.Settle(ctx, id, map[string]int64{"cost": 1, "tokens": -1})
	_, calls["Settle above MaxAmount"] = s.Settle(ctx, id, map[string]int64{"cost": eventstore.MaxAmount + 1})
	for name, err := range calls {
		if !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	checkCounters(t, h.Peer, c, 5, 0)
	// The execution still holds its 5: settling gives them back.
	settle(t, h.Peer, id, nil, true)
	checkCounters(t, h.Peer, c, 0, 0)
}

// testHoldAllOrNothing: when the second of two holds does not fit, the first counter
// does not take its amount either, and the refusal names the second and its value.
func testHoldAllOrNothing(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 2)
	expires := h.Now().Add(holdLife)
	first, second := newID(t), newID(t)
	hold(t, h.Store, first, nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 30, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 8, Limit: 10, Expires: expires})
	checkCounters(t, h.Peer, c, 30, 8)

	err := h.Peer.Hold(t.Context(), second, []eventstore.Hold{
		{Counter: c[0], Unit: "cost", Amount: 30, Limit: 100, Expires: expires},
		{Counter: c[1], Unit: "tokens", Amount: 3, Limit: 10, Expires: expires},
	}, nil)
	checkRefused(t, err, 1, 8)
	checkCounters(t, h.Store, c, 30, 8)
	if ids := pendingIDs(t, h.Store, h.Now().Add(holdLife), 0); !cmp.Equal(ids, []string{first}) {
		t.Errorf("Pending after a refusal: %q, want only %s", ids, first)
	}
	settle(t, h.Store, second, nil, false)

	// Exactly up to the limit fits.
	hold(t, h.Peer, second, nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 70, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 2, Limit: 10, Expires: expires})
	checkCounters(t, h.Store, c, 100, 10)
	// A first hold that does not fit is named as the first.
	err = h.Store.Hold(t.Context(), newID(t), []eventstore.Hold{
		{Counter: c[0], Unit: "cost", Amount: 1, Limit: 100, Expires: expires},
		{Counter: c[1], Unit: "tokens", Amount: 1, Limit: 10, Expires: expires},
	}, nil)
	checkRefused(t, err, 0, 100)
	checkCounters(t, h.Peer, c, 100, 10)
}

// testHoldWithoutLimit: a limit <= 0 counts and never refuses, up to MaxAmount
// exactly, beside a counter that does refuse.
func testHoldWithoutLimit(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 3)
	expires := h.Now().Add(holdLife)
	hold(t, h.Store, newID(t), nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 1 << 52, Limit: 0, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 1000, Limit: -1, Expires: expires})
	hold(t, h.Peer, newID(t), nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 1<<52 - 1, Limit: 0, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 1000, Limit: -1, Expires: expires},
		eventstore.Hold{Counter: c[2], Unit: "requests", Amount: 1, Limit: 1, Expires: expires})
	checkCounters(t, h.Store, c, eventstore.MaxAmount, 2000, 1)
	// The limited counter refuses; the others would have taken the amounts.
	err := h.Store.Hold(t.Context(), newID(t), []eventstore.Hold{
		{Counter: c[1], Unit: "tokens", Amount: 1000, Limit: 0, Expires: expires},
		{Counter: c[2], Unit: "requests", Amount: 1, Limit: 1, Expires: expires},
	}, nil)
	checkRefused(t, err, 1, 1)
	checkCounters(t, h.Peer, c, eventstore.MaxAmount, 2000, 1)
}

// testHoldReplaces: the next Hold of an execution gives back what it held before, on
// the counters it names again and on those it no longer names, before checking the
// limits; an empty Hold gives everything back and holds nothing.
func testHoldReplaces(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 3)
	expires := h.Now().Add(holdLife)
	mine, other := newID(t), newID(t)
	hold(t, h.Store, mine, nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 60, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 10, Limit: 100, Expires: expires})
	hold(t, h.Peer, other, nil, eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 40, Limit: 100, Expires: expires})
	checkCounters(t, h.Store, c, 100, 10, 0)

	// 100 - 60 + 60 fits the limit of 100: the execution's own 60 were given back.
	hold(t, h.Peer, mine, nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 60, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 5, Limit: 100, Expires: expires})
	checkCounters(t, h.Store, c, 100, 5, 0)

	// A fallback to another model holds on other counters: the first ones get back
	// everything, c[1] as well as c[0].
	hold(t, h.Store, mine, nil, eventstore.Hold{Counter: c[2], Unit: "cost", Amount: 25, Limit: 100, Expires: expires})
	checkCounters(t, h.Peer, c, 40, 0, 25)

	// Settling settles only the last holds.
	settle(t, h.Peer, mine, map[string]int64{"cost": 20, "tokens": 99}, true)
	checkCounters(t, h.Store, c, 40, 0, 20)

	// An empty Hold gives back and holds nothing.
	hold(t, h.Store, other, nil)
	checkCounters(t, h.Peer, c, 0, 0, 20)
	settle(t, h.Peer, other, map[string]int64{"cost": 40}, false)
	checkCounters(t, h.Store, c, 0, 0, 20)
	if ids := pendingIDs(t, h.Store, h.Now().Add(holdLife), 0); len(ids) != 0 {
		t.Errorf("Pending after every execution settled or let go: %q, want none", ids)
	}
}

// testRefusedHoldKeeps: a refused Hold leaves the execution with what it held before,
// its note included.
func testRefusedHoldKeeps(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 3)
	expires := h.Now().Add(holdLife)
	mine, other := newID(t), newID(t)
	note := json.RawMessage(`{"model":"first"}`)
	hold(t, h.Store, mine, note,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 50, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 50, Limit: 100, Expires: expires})
	hold(t, h.Store, other, nil, eventstore.Hold{Counter: c[2], Unit: "cost", Amount: 90, Limit: 100, Expires: expires})

	err := h.Peer.Hold(t.Context(), mine, []eventstore.Hold{
		{Counter: c[0], Unit: "cost", Amount: 10, Limit: 100, Expires: expires},
		{Counter: c[2], Unit: "cost", Amount: 20, Limit: 100, Expires: expires},
	}, json.RawMessage(`{"model":"second"}`))
	checkRefused(t, err, 1, 90)
	checkCounters(t, h.Store, c, 50, 50, 90)
	pending, err := h.Store.Pending(t.Context(), h.Now().Add(holdLife), 0)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	var kept json.RawMessage
	for _, p := range pending {
		if p.ID == mine {
			kept = p.Note
		}
	}
	if string(kept) != string(note) {
		t.Errorf("note after a refused Hold: %s, want the first Hold's %s", kept, note)
	}
	// It still holds the first 50 and 50: nothing spent gives them all back.
	settle(t, h.Peer, mine, nil, true)
	checkCounters(t, h.Store, c, 0, 0, 90)
}

// testSettleOnce: Settle applies what was spent against what was held, each counter by
// its unit's amount (0 for a unit missing), once: a second Settle, on either handle,
// reports false and changes nothing.
func testSettleOnce(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 3)
	expires := h.Now().Add(holdLife)
	id, other := newID(t), newID(t)
	hold(t, h.Store, other, nil, eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 7, Limit: 0, Expires: expires})
	hold(t, h.Store, id, nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 50, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[1], Unit: "requests", Amount: 1, Limit: 100, Expires: expires},
		eventstore.Hold{Counter: c[2], Unit: "tokens", Amount: 4000, Limit: 0, Expires: expires})
	checkCounters(t, h.Peer, c, 57, 1, 4000)

	// Spent more cost than held (the counter grows), no tokens reported (0), and a
	// unit no hold has (ignored).
	settle(t, h.Peer, id, map[string]int64{"cost": 65, "requests": 1, "images": 3}, true)
	checkCounters(t, h.Store, c, 72, 1, 0)
	settle(t, h.Store, id, map[string]int64{"cost": 65, "requests": 1}, false)
	settle(t, h.Peer, id, nil, false)
	checkCounters(t, h.Store, c, 72, 1, 0)
	if ids := pendingIDs(t, h.Store, h.Now().Add(holdLife), 0); !cmp.Equal(ids, []string{other}) {
		t.Errorf("Pending after Settle: %q, want only %s", ids, other)
	}
	settle(t, h.Store, newID(t), map[string]int64{"cost": 1}, false)
	checkCounters(t, h.Store, c, 72, 1, 0)
}

// testSettleFloors: a counter never goes below 0, also when what is given back exceeds
// its value, as when the counter expired after the Hold and started again.
func testSettleFloors(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 1)
	early, late := newID(t), newID(t)
	hold(t, h.Store, early, nil, eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 50, Limit: 100, Expires: h.Now().Add(h.Retention / 2)})
	h.Advance(h.Retention)
	checkCounters(t, h.Peer, c, 0)
	hold(t, h.Peer, late, nil, eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 5, Limit: 100, Expires: h.Now().Add(holdLife)})
	checkCounters(t, h.Store, c, 5)
	settle(t, h.Store, early, map[string]int64{"cost": 10}, true) // 5 + 10 - 50
	checkCounters(t, h.Peer, c, 0)
	settle(t, h.Peer, late, map[string]int64{"cost": 3}, true) // 0 + 3 - 5
	checkCounters(t, h.Store, c, 0)
}

// testPending: Pending lists the executions holding something since before `before`,
// oldest first, at most limit, with the note of their last Hold; a new Hold makes an
// execution younger, and a settled one leaves the list.
func testPending(t *testing.T, h Harness[BudgetStore]) {
	ctx := t.Context()
	c := counterNames(t, 1)
	step := h.Retention / 50
	ids := []string{newID(t), newID(t), newID(t)}
	notes := []json.RawMessage{json.RawMessage(`{"n":0}`), nil, json.RawMessage(`{"n":2}`)}
	holdAt := func(i int) {
		note := append(json.RawMessage(nil), notes[i]...)
		if notes[i] == nil {
			note = nil
		}
		hold(t, h.Store, ids[i], note, eventstore.Hold{Counter: c[0], Unit: "requests", Amount: 1, Limit: 0, Expires: h.Now().Add(holdLife)})
		if note != nil {
			note[0] = 'X' // the caller's own: the stored note stays
		}
	}
	holdAt(0)
	h.Advance(step)
	mid := h.Now()
	h.Advance(step)
	holdAt(1)
	h.Advance(step)
	holdAt(2)
	later := h.Now().Add(holdLife)

	pending, err := h.Peer.Pending(ctx, later, 0)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	want := []eventstore.PendingHold{{ID: ids[0], Note: notes[0]}, {ID: ids[1], Note: notes[1]}, {ID: ids[2], Note: notes[2]}}
	if diff := cmp.Diff(want, pending, cmpopts.IgnoreFields(eventstore.PendingHold{}, "Since")); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	if len(pending) == 3 {
		if !pending[0].Since.Before(mid) || pending[1].Since.Before(mid) {
			t.Errorf("Pending: since %v and %v, want the first before %v and the second not", pending[0].Since, pending[1].Since, mid)
		}
		pending[0].Note[0] = 'X' // the caller's own
	}
	if got := pendingIDs(t, h.Store, mid, 0); !cmp.Equal(got, ids[:1]) {
		t.Errorf("Pending before %v: %q, want %q", mid, got, ids[:1])
	}
	if got := pendingIDs(t, h.Store, later, 2); !cmp.Equal(got, ids[:2]) {
		t.Errorf("Pending limited to 2: %q, want %q", got, ids[:2])
	}
	if got := pendingIDs(t, h.Store, mid.Add(-time.Hour), 0); len(got) != 0 {
		t.Errorf("Pending before every Hold: %q, want none", got)
	}

	// Held again: the youngest now. Settled: gone.
	h.Advance(step)
	holdAt(0)
	settle(t, h.Peer, ids[1], nil, true)
	pending, err = h.Store.Pending(ctx, later, 0)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	want = []eventstore.PendingHold{{ID: ids[2], Note: notes[2]}, {ID: ids[0], Note: notes[0]}}
	if diff := cmp.Diff(want, pending, cmpopts.IgnoreFields(eventstore.PendingHold{}, "Since")); diff != "" {
		t.Errorf("Pending after a new Hold and a Settle (-want +got):\n%s", diff)
	}
}

// testUnknownCounters: counters never used count 0, in the order asked.
func testUnknownCounters(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 3)
	hold(t, h.Store, newID(t), nil, eventstore.Hold{Counter: c[1], Unit: "cost", Amount: 9, Limit: 0, Expires: h.Now().Add(holdLife)})
	checkCounters(t, h.Peer, c, 0, 9, 0)
	checkCounters(t, h.Peer, []string{c[1], c[1], c[2]}, 9, 9, 0)
	checkCounters(t, h.Store, nil)
}

// testCounterExpires: a counter is gone after the latest Expires of the holds that
// touched it, for every handle; the holds stay until Settle, which leaves it gone.
func testCounterExpires(t *testing.T, h Harness[BudgetStore]) {
	c := counterNames(t, 2)
	first, second := newID(t), newID(t)
	start := h.Now()
	hold(t, h.Store, first, nil,
		eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 3, Limit: 100, Expires: start.Add(h.Retention)},
		eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 4, Limit: 100, Expires: start.Add(h.Retention)})
	// A later Expires extends c[1]; an earlier one would not shorten it.
	hold(t, h.Peer, second, nil, eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 5, Limit: 100, Expires: start.Add(2 * h.Retention)})
	hold(t, h.Peer, newID(t), nil, eventstore.Hold{Counter: c[1], Unit: "tokens", Amount: 0, Limit: 100, Expires: start.Add(h.Retention / 4)})

	h.Advance(h.Retention / 2)
	checkCounters(t, h.Peer, c, 3, 9)
	h.Advance(h.Retention)
	checkCounters(t, h.Peer, c, 0, 9)
	checkCounters(t, h.Store, c, 0, 9)
	h.Advance(h.Retention)
	checkCounters(t, h.Store, c, 0, 0)

	settle(t, h.Store, first, map[string]int64{"cost": 10, "tokens": 10}, true)
	settle(t, h.Peer, second, map[string]int64{"tokens": 10}, true)
	checkCounters(t, h.Store, c, 0, 0)
	// A new Hold starts a counter again from 0, its limit intact.
	hold(t, h.Store, newID(t), nil, eventstore.Hold{Counter: c[0], Unit: "cost", Amount: 100, Limit: 100, Expires: h.Now().Add(holdLife)})
	checkCounters(t, h.Peer, c, 100, 0)
}

// testRacingHolds: racingHolds executions, on both handles at once, each hold 1 on one
// counter limited to racingLimit: exactly racingLimit succeed and the counter is at its
// limit. Settling the winners, half having spent 1 and half 0, at once, leaves the sum
// of what was spent; every second Settle reports false.
func testRacingHolds(t *testing.T, h Harness[BudgetStore]) {
	ctx := t.Context()
	c := counterNames(t, 1)
	expires := h.Now().Add(holdLife)
	handle := func(i int) eventstore.Budgets {
		if i%2 == 1 {
			return h.Peer
		}
		return h.Store
	}
	ids := make([]string, racingHolds)
	for i := range ids {
		ids[i] = newID(t)
	}
	held := make([]bool, racingHolds)
	var refusals atomic.Int64
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			<-ready
			err := handle(i).Hold(ctx, ids[i], []eventstore.Hold{{Counter: c[0], Unit: "requests", Amount: 1, Limit: racingLimit, Expires: expires}}, nil)
			var refused *eventstore.HoldRefusedError
			switch {
			case err == nil:
				held[i] = true
			case errors.As(err, &refused) && refused.Index == 0 && refused.Used == racingLimit:
				refusals.Add(1)
			default:
				t.Errorf("Hold %d: %v, want success or a refusal of hold 0 at %d", i, err, racingLimit)
			}
		})
	}
	close(ready)
	wg.Wait()
	var winners []int
	for i, ok := range held {
		if ok {
			winners = append(winners, i)
		}
	}
	if len(winners) != racingLimit {
		t.Fatalf("%d of %d racing holds succeeded, want %d", len(winners), racingHolds, racingLimit)
	}
	held0 := checkCounters(t, h.Store, c, racingLimit)

	// Every execution settles twice at once, once on each handle: each winner's
	// settles exactly once, half having spent 1 and half 0; a loser holds nothing and
	// its spent 1 must change nothing.
	spent := make([]int64, racingHolds)
	var spentSum int64
	for n, i := range winners {
		spent[i] = int64(n % 2)
		spentSum += spent[i]
	}
	for i, ok := range held {
		if !ok {
			spent[i] = 1
		}
	}
	settleAll := func(round int, copies int) []int64 {
		settled := make([]atomic.Int64, racingHolds)
		var wg sync.WaitGroup
		for i := range ids {
			for k := range copies {
				wg.Go(func() {
					ok, err := handle(i+k).Settle(ctx, ids[i], map[string]int64{"requests": spent[i]})
					if err != nil {
						t.Errorf("Settle %d in round %d: %v", i, round, err)
					}
					if ok {
						settled[i].Add(1)
					}
				})
			}
		}
		wg.Wait()
		counts := make([]int64, racingHolds)
		for i := range settled {
			counts[i] = settled[i].Load()
		}
		return counts
	}
	var once, twice, wrong int
	for i, n := range settleAll(1, 2) {
		switch {
		case n == 1 && held[i]:
			once++
		case n > 1:
			twice++
		case n != 0 || held[i]:
			wrong++
		}
	}
	if once != racingLimit || twice != 0 || wrong != 0 {
		t.Errorf("racing Settle: %d winners settled once, %d more than once, %d wrongly; want all %d once and the losers never",
			once, twice, wrong, racingLimit)
	}
	checkCounters(t, h.Peer, c, spentSum)
	again := 0
	for _, n := range settleAll(2, 1) {
		again += int(n)
	}
	if again != 0 {
		t.Errorf("a second round of Settle settled %d executions, want none", again)
	}
	final := checkCounters(t, h.Store, c, spentSum)
	t.Logf("racing holds: %d of %d held (counter %v), %d refused; racing Settle: %d once, %d twice, %d wrong; "+
		"counter %v for %d spent; second round settled %d",
		len(winners), racingHolds, held0, refusals.Load(), once, twice, wrong, final, spentSum, again)
}

func testBudgetsClose(t *testing.T, h Harness[BudgetStore]) {
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	c := counterNames(t, 1)
	calls := map[string]error{
		"Hold": h.Store.Hold(ctx, newID(t), []eventstore.Hold{{Counter: c[0], Unit: "cost", Amount: 1, Expires: h.Now().Add(holdLife)}}, nil),
	}
	_, calls["Settle"] = h.Store.Settle(ctx, newID(t), nil)
	_, calls["Pending"] = h.Store.Pending(ctx, h.Now(), 0)
	_, calls["Counters"] = h.Store.Counters(ctx, c)
	checkClosed(t, calls)
}
