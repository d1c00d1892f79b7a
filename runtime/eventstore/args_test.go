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
	}
}
