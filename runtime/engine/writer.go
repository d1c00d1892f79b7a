package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// writer appends one execution's events. It is the execution's only writer: sequences
// and timestamps are assigned under mu, so the run loop and an adapter's (possibly
// concurrent) emits never race for a sequence, and the store never sees a gap.
type writer struct {
	store Store
	ctx   context.Context // for store calls: never cancelled, the terminal must be written
	id    string
	now   func() time.Time
	// fence is the fencing token of the lease this replica holds on the execution:
	// every write carries it, so the store refuses them once another replica has taken
	// the execution over.
	fence eventstore.Fence

	limits limits
	// exceeded is called (under mu) when an append is refused for a limit; it ends the
	// execution with output_too_large. May be nil.
	exceeded func()
	// lost is called (under mu) when the store refuses a write because another replica
	// holds the execution's lease now; it ends the execution here without a terminal
	// event (that replica writes it). May be nil.
	lost func()

	mu       sync.Mutex
	seq      uint64    // last recorded sequence
	last     time.Time // last recorded timestamp
	terminal bool      // the terminal event is recorded; nothing may follow
	output   bool      // an output or tool event is recorded (by any attempt)
	outBytes int64     // materialized output recorded: text, tool arguments, results
}

// limits bound one execution (spec/http-api.md, "Limits").
type limits struct {
	events      uint64 // events, the terminal one included
	outputBytes int64  // materialized output bytes
}

// hasOutput reports whether any output or tool event has been recorded: from then on a
// failure is never retryable (spec/http-api.md, "Errors").
func (w *writer) hasOutput() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.output
}

// timestamp is the next event's time: now in UTC at microsecond precision (as the
// contract's examples), never before the previous event, so timestamps are non-decreasing
// even if the clock steps back.
func (w *writer) timestamp() time.Time {
	ts := w.now().UTC().Truncate(time.Microsecond)
	if ts.Before(w.last) {
		ts = w.last
	}
	return ts
}

// append records a lifecycle event with data v, at the next timestamp.
func (w *writer) append(typ protocol.EventType, v any) error {
	return w.appendAt(typ, v, time.Time{})
}

// appendAt records a lifecycle event with data v at ts, or at the next timestamp when ts
// is zero.
func (w *writer) appendAt(typ protocol.EventType, v any, ts time.Time) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", typ, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ts.IsZero() {
		ts = w.timestamp()
	}
	return w.appendLocked(typ, data, ts, 0)
}

// Bounds of appendRetry's pauses between tries: short, since an execution's lifecycle
// is waiting, and growing, so a struggling store is not hammered.
const (
	retryPause    = 10 * time.Millisecond
	retryPauseMax = 500 * time.Millisecond
)

// retryPolicy bounds appendRetry: by the number of tries, by time, or both. A zero field
// sets no bound of its kind; at least one must be set.
type retryPolicy struct {
	tries int       // total tries, the first included
	until time.Time // no try starts after it (wall clock, not the engine's clock)
}

// appendRetry records a lifecycle event like appendAt, trying again after a failed write
// while policy allows. A write whose reply was lost may have landed: before every retry
// the store's progress is read, events of ours found there are taken as recorded, and
// when the event itself is among them it is not written again — so a retry never records
// an event twice, nor a second terminal event.
func (w *writer) appendRetry(typ protocol.EventType, v any, ts time.Time, policy retryPolicy, log logr.Logger) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", typ, err)
	}
	// The lock is held across the pauses: the sequence must not move while a write of
	// ours may be in flight, and nothing else is to be recorded meanwhile (the attempt's
	// emitter is closed before a terminal event, and none exists before
	// execution.accepted).
	w.mu.Lock()
	defer w.mu.Unlock()
	if ts.IsZero() {
		ts = w.timestamp()
	}
	pause := retryPause
	for try := 1; ; try++ {
		err = w.appendLocked(typ, data, ts, 0)
		if err == nil || errors.Is(err, ErrAttemptOver) || errors.Is(err, ErrOutputTooLarge) {
			return err
		}
		landed, serr := w.resyncLocked(typ)
		switch {
		case serr != nil:
			log.Error(serr, "Cannot read the execution's progress after a failed write", "type", typ)
		case landed:
			log.Info("A write reported as failed had landed", "type", typ, "sequence", w.seq)
			return nil
		}
		if permanent(err) || permanent(serr) ||
			(policy.tries > 0 && try >= policy.tries) ||
			(!policy.until.IsZero() && time.Now().Add(pause).After(policy.until)) {
			return err
		}
		log.Info("Retrying a failed write", "type", typ, "try", try, "error", err.Error())
		time.Sleep(pause)
		pause = min(2*pause, retryPauseMax)
	}
}

// permanent reports whether a store error will not go away by trying again: the
// execution is gone or terminal, the store closed, or the call is malformed.
func permanent(err error) bool {
	return errors.Is(err, eventstore.ErrNotFound) || errors.Is(err, eventstore.ErrTerminated) ||
		errors.Is(err, eventstore.ErrClosed) || errors.Is(err, eventstore.ErrInvalid) ||
		errors.Is(err, eventstore.ErrLeaseLost)
}

// resyncLocked catches up with events of this execution that the store holds beyond the
// writer's sequence: writes (lifecycle events or emits) whose failure was reported
// although they landed. This writer is the execution's only one, so every such event is
// its own. It reports whether the last of them is an event of type typ — the write being
// retried — or, for a terminal typ, whether any is terminal. What it catches up with
// comes from the execution's status; only the last event is read, for its type.
func (w *writer) resyncLocked(typ protocol.EventType) (landed bool, err error) {
	st, err := w.store.Get(w.ctx, w.id)
	if err != nil || !w.catchUpLocked(st) {
		return false, err
	}
	if typ.Terminal() {
		return w.terminal, nil
	}
	last, err := w.store.Read(w.ctx, w.id, w.seq-1, 1)
	if err != nil {
		return false, err
	}
	return len(last) == 1 && last[0].Type == typ, nil
}

// catchUpLocked takes the writer's progress from st, the execution's status, when the
// store holds events beyond the writer's sequence, and reports whether it did: the
// status carries everything the writer keeps of the events it recorded, so catching up
// reads none of them, however many there are (the whole log of an orphan taken over).
func (w *writer) catchUpLocked(st eventstore.Status) bool {
	if st.LastSequence <= w.seq {
		return false
	}
	w.seq = st.LastSequence
	if st.UpdatedAt.After(w.last) {
		w.last = st.UpdatedAt // the last event's timestamp: timestamps never decrease
	}
	w.terminal = w.terminal || st.Terminal
	w.output = w.output || st.Output
	w.outBytes = st.OutputBytes
	return true
}

// appendAllLocked records raws, the data of one event or the pieces of one split delta,
// as consecutive events of type typ at the next timestamp; outBytes is the materialized
// output they add. The pieces are recorded all or none, so that no half of an event an
// adapter emitted as one is stored.
func (w *writer) appendAllLocked(typ protocol.EventType, raws []json.RawMessage, outBytes int64) error {
	if len(raws) > 1 && w.limits.events > 0 && w.seq+uint64(len(raws))+1 > w.limits.events {
		if w.exceeded != nil {
			w.exceeded()
		}
		return ErrOutputTooLarge
	}
	for i, raw := range raws {
		n := int64(0)
		if i == 0 {
			n = outBytes // counted once, so the byte limit is checked before the first piece
		}
		if err := w.appendLocked(typ, raw, w.timestamp(), n); err != nil {
			return err
		}
	}
	return nil
}

// appendLocked records one event at the next sequence. A non-terminal event is refused
// with ErrOutputTooLarge unless it leaves room for the terminal event within the event
// limit, or when it would take the materialized output past its limit (outBytes is
// the output it adds); nothing is recorded then.
func (w *writer) appendLocked(typ protocol.EventType, data json.RawMessage, ts time.Time, outBytes int64) error {
	if w.terminal {
		return ErrAttemptOver
	}
	if !typ.Terminal() && (w.limits.events > 0 && w.seq+2 > w.limits.events ||
		w.limits.outputBytes > 0 && w.outBytes+outBytes > w.limits.outputBytes) {
		if w.exceeded != nil {
			w.exceeded()
		}
		return ErrOutputTooLarge
	}
	ev := protocol.Event{ExecutionID: w.id, Sequence: w.seq + 1, Timestamp: ts, Type: typ, Data: data}
	if err := w.store.Append(w.ctx, w.fence, ev); err != nil {
		if errors.Is(err, eventstore.ErrLeaseLost) && w.lost != nil {
			w.lost()
		}
		return fmt.Errorf("append %s to %s: %w", typ, w.id, err)
	}
	w.seq, w.last = ev.Sequence, ts
	w.terminal = typ.Terminal()
	w.output = w.output || typ.IsOutput()
	w.outBytes += outBytes
	return nil
}

// outputBytes returns the materialized output recorded so far.
func (w *writer) outputBytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outBytes
}
