package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
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

// emitter is the Emitter of one attempt.
type emitter struct {
	w   *writer
	ctx context.Context // the attempt's context: emits stop when it ends
	log logr.Logger
	// attempt and deployment identify the attempt in a RemoteJob record and in
	// measurements.
	attempt    int
	deployment *routing.Deployment
	obs        Observer
	start      time.Time // when the attempt started, for the time to its first chunk

	// Guarded by w.mu, so that close and a concurrent emit agree on whether the event
	// belongs to the attempt.
	closed bool
	output bool       // an output or tool event was recorded
	tokens tokenCount // the input and output tokens reported, for the attempt's span
}

var _ Emitter = (*emitter)(nil)

// Emit implements Emitter.
func (em *emitter) Emit(typ protocol.EventType, data any) error {
	// Encoding happens before the lock: a large payload does not hold up other emits.
	var one [1]json.RawMessage // the usual case, one event, without an allocation
	raws, v, outBytes, err := encodeEvents(one[:0], typ, data, em.log)
	if err != nil || raws == nil {
		if errors.Is(err, ErrOutputTooLarge) {
			em.w.mu.Lock()
			if em.w.exceeded != nil && !em.closed {
				em.w.exceeded()
			}
			em.w.mu.Unlock()
		}
		return err
	}
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	if em.closed || em.ctx.Err() != nil {
		return ErrAttemptOver
	}
	if len(raws) > 1 && em.w.limits.events > 0 && em.w.seq+uint64(len(raws))+1 > em.w.limits.events {
		// The pieces of a split delta are recorded all or none, so that no half of an
		// event the adapter emitted as one is stored.
		if em.w.exceeded != nil {
			em.w.exceeded()
		}
		return ErrOutputTooLarge
	}
	for i, raw := range raws {
		n := int64(0)
		if i == 0 {
			n = outBytes // counted once, so the byte limit is checked before the first piece
		}
		if err := em.w.appendLocked(typ, raw, em.w.timestamp(), n); err != nil {
			return err
		}
	}
	switch {
	case typ.IsOutput() && !em.output:
		em.output = true
		em.obs.FirstChunk(em.deployment, time.Since(em.start))
	case typ == protocol.EventUsageReported:
		usage := v.(protocol.UsageReportedData).Usage
		em.tokens.add(usage)
		em.obs.Usage(em.deployment, usage)
	}
	return nil
}

// tokenCount returns the tokens the attempt reported.
func (em *emitter) tokenCount() tokenCount {
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	return em.tokens
}

// RemoteJob implements Emitter. The handle is stored with the attempt's number and
// deployment, so that the replica taking the execution over resumes this attempt, on
// this deployment, and only while it is the execution's last attempt.
func (em *emitter) RemoteJob(handle json.RawMessage) error {
	if len(handle) == 0 || len(handle) > MaxRemoteJobBytes || !json.Valid(handle) {
		return fmt.Errorf("remote job handle: empty, larger than %d bytes or not JSON: %w", MaxRemoteJobBytes, ErrInvalidEvent)
	}
	rec, err := json.Marshal(remoteJob{Attempt: em.attempt, Deployment: em.deployment.RefString(), Handle: handle})
	if err != nil {
		return fmt.Errorf("remote job handle: %w", ErrInvalidEvent)
	}
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	// An attempt being handed over may still record its job (a create answered during
	// the cleanup grace), so that the replica taking over adopts it rather than leaving
	// it unfollowed; the store refuses it once that replica holds the lease.
	if em.closed || em.w.terminal || (em.ctx.Err() != nil && !Detached(em.ctx)) {
		return ErrAttemptOver
	}
	if err := em.w.store.SetRemote(em.w.ctx, em.w.id, em.w.fence, rec); err != nil {
		if errors.Is(err, eventstore.ErrLeaseLost) && em.w.lost != nil {
			em.w.lost()
		}
		return fmt.Errorf("record remote job of %s: %w", em.w.id, err)
	}
	return nil
}

// close ends the attempt: later emits are refused. It reports whether the attempt
// recorded output, which rules out a fallback.
func (em *emitter) close() (output bool) {
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	em.closed = true
	return em.output
}

// maxPieceText bounds the text of one piece of a split delta. JSON escaping makes at
// most six bytes of one (a control character as \u00XX), so a piece always encodes
// within protocol.MaxEventBytes, envelope fields included.
const maxPieceText = protocol.MaxEventBytes / 8

// encodeEvents checks and encodes data for typ (checkData) and appends to dst what to
// record: one event's data, or — for a text or tool-argument delta whose encoding is larger
// than protocol.MaxEventBytes — the delta split at rune boundaries into pieces that fit,
// in order, which the result snapshot concatenates back into the same text.
// Any other event larger than protocol.MaxEventBytes gives ErrOutputTooLarge. outBytes
// is the materialized output the event adds (spec/http-api.md, "Limits").
func encodeEvents(dst []json.RawMessage, typ protocol.EventType, data any, log logr.Logger) (raws []json.RawMessage, v any, outBytes int64, err error) {
	v, raw, err := checkData(typ, data, log)
	if err != nil || raw == nil {
		return nil, nil, 0, err
	}
	tooLarge := len(raw) > protocol.MaxEventBytes
	switch d := v.(type) {
	case protocol.OutputDeltaData:
		outBytes = int64(len(d.Text))
		if tooLarge {
			raws = pieces(dst, d.Text, func(p string) any { d.Text = p; return d })
		}
	case protocol.ToolCallArgsDeltaData:
		outBytes = int64(len(d.Delta))
		if tooLarge {
			raws = pieces(dst, d.Delta, func(p string) any { d.Delta = p; return d })
		}
	case protocol.OutputResultData:
		outBytes = int64(len(d.Result))
	}
	switch {
	case raws != nil:
		return raws, v, outBytes, nil
	case tooLarge:
		return nil, nil, 0, fmt.Errorf("emit %s: %d bytes of data: %w", typ, len(raw), ErrOutputTooLarge)
	}
	return append(dst, raw), v, outBytes, nil
}

// pieces appends to dst the encoded payloads with(p) for each piece p of s, in order
// (see split).
func pieces(dst []json.RawMessage, s string, with func(piece string) any) []json.RawMessage {
	for _, p := range split(s, maxPieceText) {
		dst = append(dst, mustMarshal(with(p)))
	}
	return dst
}

// split cuts s into pieces of at most n bytes, never inside a UTF-8 sequence.
func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n // not UTF-8 at all: any cut is as good
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

// mustMarshal encodes a payload that has just been encoded whole; a piece of it cannot
// fail where the whole did not.
func mustMarshal(v any) json.RawMessage {
	b, err := encodeData(v)
	if err != nil {
		panic("engine: re-encoding a checked payload failed: " + err.Error())
	}
	return b
}

// checkData checks data against typ and returns the checked (possibly normalised) value
// and its encoding. It returns nil data and no error when nothing is to be recorded
// (usage whose every entry was dropped). The checks keep every recorded event foldable by
// protocol.Snapshot.Apply, which stops at an event it cannot decode, and keep the
// envelope fields out of adapters' hands. Error messages name the type and the broken
// rule, never the data.
func checkData(typ protocol.EventType, data any, log logr.Logger) (any, json.RawMessage, error) {
	var (
		v   any
		err error
	)
	switch typ {
	case protocol.EventOutputDelta:
		v, err = checked(data, func(d protocol.OutputDeltaData) (protocol.OutputDeltaData, string) {
			if d.Type == "" {
				d.Type = "text" // the only output type; adapters may leave it out
			}
			switch {
			case d.Type != "text":
				return d, "type must be text"
			case d.Index < 0:
				return d, "index must not be negative"
			}
			return d, ""
		})
	case protocol.EventToolCallStarted:
		v, err = checked(data, func(d protocol.ToolCallStartedData) (protocol.ToolCallStartedData, string) {
			switch {
			case d.CallID == "" || d.Name == "":
				return d, "call_id and name are required"
			case d.Index < 0:
				return d, "index must not be negative"
			}
			return d, ""
		})
	case protocol.EventToolCallArgsDelta:
		v, err = checked(data, func(d protocol.ToolCallArgsDeltaData) (protocol.ToolCallArgsDeltaData, string) {
			if d.CallID == "" {
				return d, "call_id is required"
			}
			return d, ""
		})
	case protocol.EventProgress:
		v, err = checked(data, func(d protocol.ProgressData) (protocol.ProgressData, string) {
			switch {
			case d.Stage != protocol.StageQueued && d.Stage != protocol.StageRunning:
				return d, "stage must be queued or running"
			case d.Percent != nil && !(*d.Percent >= 0 && *d.Percent <= 100):
				return d, "percent must be between 0 and 100"
			case d.QueuePosition != nil && *d.QueuePosition < 0:
				return d, "queue_position must not be negative"
			}
			return d, ""
		})
	case protocol.EventOutputResult:
		v, err = checked(data, func(d protocol.OutputResultData) (protocol.OutputResultData, string) {
			if d.Artifacts == nil {
				d.Artifacts = []protocol.Artifact{} // the contract shows a list, never null
			}
			for _, a := range d.Artifacts {
				if a.URI == "" || a.MediaType == "" {
					return d, "artifacts need uri and media_type"
				}
			}
			return d, ""
		})
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		d, err = convert[protocol.UsageReportedData](data)
		if err == nil {
			d.Usage = validUsage(d.Usage, log)
			if len(d.Usage) == 0 {
				return nil, nil, nil
			}
			v = d
		}
	default:
		return nil, nil, fmt.Errorf("emit %s: adapters may not emit this type: %w", typ, ErrInvalidEvent)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("emit %s: %w", typ, err)
	}
	raw, err := encodeData(v)
	if err != nil {
		return nil, nil, fmt.Errorf("emit %s: data cannot be encoded: %w", typ, ErrInvalidEvent)
	}
	return v, raw, nil
}

// encodeData encodes a checked payload as encoding/json does: output.delta, recorded for
// every token, by hand (protocol.AppendDelta, the same bytes without reflection), any
// other with encoding/json.
func encodeData(v any) (json.RawMessage, error) {
	if d, ok := v.(protocol.OutputDeltaData); ok {
		return protocol.AppendDelta(make([]byte, 0, len(d.Type)+len(d.Text)+32), d), nil
	}
	return json.Marshal(v)
}

// checked converts data to T and applies check, which may normalise the value and
// returns a non-empty reason when it is invalid.
//
// The value goes in and out of check rather than by pointer, which would move it to the
// heap: this runs for every event an adapter emits.
func checked[T any](data any, check func(T) (T, string)) (T, error) {
	d, err := convert[T](data)
	if err != nil {
		return d, err
	}
	d, reason := check(d)
	if reason != "" {
		return d, fmt.Errorf("%s: %w", reason, ErrInvalidEvent)
	}
	return d, nil
}

// convert returns data as T. The protocol payload types (value or pointer) are taken as
// they are, without a JSON round trip, since that is what adapters emit on the hot path;
// anything else is encoded and decoded strictly (no unknown fields).
func convert[T any](data any) (T, error) {
	switch d := data.(type) {
	case T:
		return d, nil
	case *T:
		if d != nil {
			return *d, nil
		}
		var zero T
		return zero, fmt.Errorf("data is nil: %w", ErrInvalidEvent)
	}
	return decodeStrict[T](data)
}

// decodeStrict is convert's slow path, apart so that the fast path does not allocate.
func decodeStrict[T any](data any) (T, error) {
	var out T
	b, err := json.Marshal(data)
	if err != nil {
		return out, fmt.Errorf("data cannot be encoded: %w", ErrInvalidEvent)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return out, fmt.Errorf("data does not have the type's shape: %w", ErrInvalidEvent)
	}
	return out, nil
}

// validUsage returns the valid entries of us (spec/events.md, "usage.reported"), logging
// what it drops. It reuses us's array only when nothing is dropped, so the caller's slice
// is never changed.
func validUsage(us []protocol.Usage, log logr.Logger) []protocol.Usage {
	valid := 0
	for _, u := range us {
		if u.Valid() {
			valid++
		}
	}
	if valid == len(us) {
		return us
	}
	out := make([]protocol.Usage, 0, valid)
	for _, u := range us {
		if u.Valid() {
			out = append(out, u)
			continue
		}
		// The unit is the adapter's, not the caller's; the quantity is logged as text
		// because NaN and ±Inf have no JSON encoding.
		log.Info("Dropped invalid usage entry", "unit", u.Unit, "source", u.Source,
			"quantity", strconv.FormatFloat(u.Quantity, 'g', -1, 64))
	}
	return out
}
