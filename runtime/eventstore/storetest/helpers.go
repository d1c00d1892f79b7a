package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Helpers of every suite.

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

func create(t *testing.T, s eventstore.Log) string {
	t.Helper()
	rec := record(t)
	if _, err := s.Create(t.Context(), rec, "", 0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return rec.ID
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
func appendAll(t *testing.T, s eventstore.Log, evs []protocol.Event) {
	t.Helper()
	appendWith(t, s, eventstore.NoFence, evs)
}

// appendWith appends evs with fence.
func appendWith(t *testing.T, s eventstore.Log, fence eventstore.Fence, evs []protocol.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := s.Append(t.Context(), fence, ev); err != nil {
			t.Fatalf("Append %d with fence %d: %v", ev.Sequence, fence, err)
		}
	}
}

func status(t *testing.T, s eventstore.Log, id string) eventstore.Status {
	t.Helper()
	st, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return st
}

// checkEvents asserts that the execution holds exactly want.
func checkEvents(t *testing.T, s eventstore.Log, id string, want []protocol.Event) {
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

// removedExecution records a terminal execution and advances past its retention: every
// call that names the execution must then answer ErrNotFound, on every handle.
func removedExecution[S eventstore.Log](t *testing.T, h Harness[S]) string {
	t.Helper()
	id := create(t, h.Store)
	appendAll(t, h.Store, events(id, 3, true))
	h.Advance(h.Retention + h.Retention/2)
	return id
}

// checkNotFound asserts that the calls that named execution id, by name, all reported
// ErrNotFound.
func checkNotFound(t *testing.T, id string, calls map[string]error) {
	t.Helper()
	for name, err := range calls {
		if !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("%s(%s): got %v, want ErrNotFound", name, id, err)
		}
	}
}

// checkClosed asserts that the calls made after Close, by name, all reported ErrClosed.
func checkClosed(t *testing.T, calls map[string]error) {
	t.Helper()
	for name, err := range calls {
		if !errors.Is(err, eventstore.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
}
