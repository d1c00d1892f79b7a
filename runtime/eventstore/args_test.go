package eventstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestArgumentChecks pins what every store answers a malformed call: ErrInvalid, with
// the message both stores gave before their checks moved here.
func TestArgumentChecks(t *testing.T) {
	rec := eventstore.Record{ID: "exe_1"}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"Create", eventstore.CheckCreate(rec, "replica-a", time.Second), ""},
		{"Create unleased", eventstore.CheckCreate(rec, "", 0), ""},
		{"Create without id", eventstore.CheckCreate(eventstore.Record{}, "", 0), "create execution: empty id: eventstore: invalid argument"},
		{"Create leased for 0", eventstore.CheckCreate(rec, "replica-a", 0), "create execution exe_1: lease ttl 0s: eventstore: invalid argument"},
		{"Append", eventstore.CheckAppend(&protocol.Event{ExecutionID: "exe_1", Type: protocol.EventAccepted}), ""},
		{"Append without id", eventstore.CheckAppend(&protocol.Event{Type: protocol.EventAccepted}), "append event: empty execution id or type: eventstore: invalid argument"},
		{"Append without type", eventstore.CheckAppend(&protocol.Event{ExecutionID: "exe_1"}), "append event: empty execution id or type: eventstore: invalid argument"},
		{"Reserve", eventstore.CheckReserve("key", time.Second), ""},
		{"Reserve without key", eventstore.CheckReserve("", time.Second), "reserve: empty key or ttl 1s: eventstore: invalid argument"},
		{"Reserve for -1s", eventstore.CheckReserve("key", -time.Second), "reserve: empty key or ttl -1s: eventstore: invalid argument"},
		{"Acquire", eventstore.CheckAcquire("exe_1", "replica-a", time.Second), ""},
		{"Acquire without owner", eventstore.CheckAcquire("exe_1", "", time.Second), `acquire lease of exe_1: owner "", ttl 1s: eventstore: invalid argument`},
		{"Acquire for 0", eventstore.CheckAcquire("exe_1", "replica-a", 0), `acquire lease of exe_1: owner "replica-a", ttl 0s: eventstore: invalid argument`},
		{"Renew", eventstore.CheckRenew("exe_1", eventstore.FirstFence, time.Second), ""},
		{"Renew of NoFence", eventstore.CheckRenew("exe_1", eventstore.NoFence, time.Second), "renew lease of exe_1: fence 0, ttl 1s: eventstore: invalid argument"},
		{"Renew for 0", eventstore.CheckRenew("exe_1", eventstore.FirstFence, 0), "renew lease of exe_1: fence 1, ttl 0s: eventstore: invalid argument"},
		{"ReleaseLease", eventstore.CheckReleaseLease("exe_1", eventstore.FirstFence), ""},
		{"ReleaseLease of NoFence", eventstore.CheckReleaseLease("exe_1", eventstore.NoFence), "release lease of exe_1: no fence: eventstore: invalid argument"},
		{"Secret", eventstore.CheckSecret("name", []byte("x"), time.Second), ""},
		{"Secret without name", eventstore.CheckSecret("", []byte("x"), time.Second), `secret "": empty name or candidate, or ttl 1s: eventstore: invalid argument`},
		{"Secret without candidate", eventstore.CheckSecret("name", nil, time.Second), `secret "name": empty name or candidate, or ttl 1s: eventstore: invalid argument`},
		{"Secret for 0", eventstore.CheckSecret("name", []byte("x"), 0), `secret "name": empty name or candidate, or ttl 0s: eventstore: invalid argument`},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want no error", tc.name, tc.err)
		case tc.want != "" && (!errors.Is(tc.err, eventstore.ErrInvalid) || tc.err.Error() != tc.want):
			t.Errorf("%s: %v, want ErrInvalid as %q", tc.name, tc.err, tc.want)
		}
	}
	for limit, want := range map[int]int{-1: 100, 0: 100, 1: 1, 500: 500} {
		if got := eventstore.OrphanLimit(limit); got != want {
			t.Errorf("OrphanLimit(%d) = %d, want %d", limit, got, want)
		}
		if got := eventstore.PendingLimit(limit); got != want {
			t.Errorf("PendingLimit(%d) = %d, want %d", limit, got, want)
		}
	}
}

// TestBudgetArgumentChecks pins the refusals of Hold and Settle, each naming the hold
// or the unit at fault.
func TestBudgetArgumentChecks(t *testing.T) {
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := eventstore.Hold{Counter: "b/uid-1/2026-12-01T00:00:00Z/cost", Unit: "cost", Amount: 10, Limit: 100, Expires: end}
	with := func(f func(h *eventstore.Hold)) []eventstore.Hold {
		h := ok
		f(&h)
		return []eventstore.Hold{ok, h}
	}
	other := func(h *eventstore.Hold) { h.Counter = "b/uid-1/2026-12-01T00:00:00Z/tokens" }
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"Hold", eventstore.CheckHold("exe_1", with(other)), ""},
		{"Hold nothing", eventstore.CheckHold("exe_1", nil), ""},
		{"Hold the largest amount without limit", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) {
			other(h)
			h.Amount, h.Limit = eventstore.MaxAmount, -1
		})), ""},
		{"Hold without id", eventstore.CheckHold("", with(other)), "hold budget: empty execution id: eventstore: invalid argument"},
		{"Hold without counter", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { h.Counter = "" })),
			"hold budget for exe_1: hold 1: empty counter: eventstore: invalid argument"},
		{"Hold without unit", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { other(h); h.Unit = "" })),
			"hold budget for exe_1: hold 1 (b/uid-1/2026-12-01T00:00:00Z/tokens): empty unit: eventstore: invalid argument"},
		{"Hold a negative amount", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { other(h); h.Amount = -1 })),
			"hold budget for exe_1: hold 1 (b/uid-1/2026-12-01T00:00:00Z/tokens): amount -1 outside 0..9007199254740991: eventstore: invalid argument"},
		{"Hold 2^53", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { other(h); h.Amount = 1 << 53 })),
			"hold budget for exe_1: hold 1 (b/uid-1/2026-12-01T00:00:00Z/tokens): amount 9007199254740992 outside 0..9007199254740991: eventstore: invalid argument"},
		{"Hold under a limit of 2^53", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { other(h); h.Limit = 1 << 53 })),
			"hold budget for exe_1: hold 1 (b/uid-1/2026-12-01T00:00:00Z/tokens): limit 9007199254740992 above 9007199254740991: eventstore: invalid argument"},
		{"Hold without expiry", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { other(h); h.Expires = time.Time{} })),
			"hold budget for exe_1: hold 1 (b/uid-1/2026-12-01T00:00:00Z/tokens): zero expiry: eventstore: invalid argument"},
		{"Hold one counter twice", eventstore.CheckHold("exe_1", with(func(h *eventstore.Hold) { h.Unit = "tokens" })),
			"hold budget for exe_1: holds 0 and 1 name counter b/uid-1/2026-12-01T00:00:00Z/cost: eventstore: invalid argument"},
		{"Settle", eventstore.CheckSettle("exe_1", map[string]int64{"cost": 0, "tokens": eventstore.MaxAmount}), ""},
		{"Settle nothing spent", eventstore.CheckSettle("exe_1", nil), ""},
		{"Settle without id", eventstore.CheckSettle("", nil), "settle budget: empty execution id: eventstore: invalid argument"},
		{"Settle a negative amount", eventstore.CheckSettle("exe_1", map[string]int64{"cost": -5}),
			"settle budget of exe_1: spent -5 cost outside 0..9007199254740991: eventstore: invalid argument"},
		{"Settle 2^53", eventstore.CheckSettle("exe_1", map[string]int64{"tokens": 1 << 53}),
			"settle budget of exe_1: spent 9007199254740992 tokens outside 0..9007199254740991: eventstore: invalid argument"},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want no error", tc.name, tc.err)
		case tc.want != "" && (!errors.Is(tc.err, eventstore.ErrInvalid) || tc.err.Error() != tc.want):
			t.Errorf("%s: %v, want ErrInvalid as %q", tc.name, tc.err, tc.want)
		}
	}
}
