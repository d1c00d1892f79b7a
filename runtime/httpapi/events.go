package httpapi

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

const (
	// sseRetry is the reconnection time announced at the start of every stream.
	sseRetry = 2 * time.Second
	// replayBatch bounds the events one Read returns to a stream, and so a subscriber's
	// memory (events can be large), however far behind it starts. A subscriber that
	// keeps up reads one or two events per wake-up anyway.
	replayBatch = 32
	// pollPage and pollPageBytes bound one polling response (spec/events.md): events,
	// and bytes of encoded events. A poller continues with after=next_after.
	pollPage      = 1000
	pollPageBytes = 4 << 20
	// frameSize is the initial size of a stream's frame buffers; a typical envelope fits.
	frameSize = 1024
	// coalesceBytes bounds the frames written to a stream in one write.
	coalesceBytes = 64 << 10
	// idleFrameCap is the largest frame buffer the pool keeps.
	idleFrameCap = 8 << 10
)

// appendFrame appends ev's SSE frame, whose data is its envelope env: the id is the
// sequence, the event name its type (spec/events.md, "Server-sent events").
func appendFrame(dst []byte, ev *protocol.Event, env []byte) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendUint(dst, ev.Sequence, 10)
	dst = append(dst, '\n')
	return sse.AppendEvent(dst, "", string(ev.Type), env)
}

// streamEvents is GET /v1/executions/{id}/events (spec/events.md, "Server-sent events"):
// the execution's events after a cursor, as a server-sent event stream or, with Accept:
// application/json, as one polling page. Every refusal (bad cursor, unknown execution) is
// answered as JSON before any SSE byte; after the stream's head is written, a failure
// only ends it.
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	after, stream, err := s.openStream(w, r, id)
	if err != nil || !stream {
		return err
	}
	s.obs.Subscribers(1)
	defer s.obs.Subscribers(-1)
	if err := s.tail(w, r, id, after); err != nil {
		s.logStreamEnd(r, id, err)
	}
	return nil // the head is out: the stream just ends, without any error body
}

// openStream checks a stream request and answers it, or writes the stream's head: stream
// is true when the SSE stream is to follow, from the returned cursor.
//
// It is a function of its own, never inlined, so that its frame (the execution's status
// among it) is gone from the stack while the stream runs: net/http writes the response
// head, deep in its own frames, at the stream's first flush, and the goroutine's stack,
// which an idle subscriber keeps, then stays within 8 KiB instead of doubling to 16 KiB
// (TestIdleStreamStack; the fan-out benchmark's idle memory per subscriber).
//
//go:noinline
func (s *server) openStream(w http.ResponseWriter, r *http.Request, id string) (after uint64, stream bool, err error) {
	after, err = eventCursor(r)
	if err != nil {
		return 0, false, err
	}
	rec, err := s.accessible(r.Context(), id, auth.VerbGet)
	if err != nil {
		return 0, false, err
	}
	if wantsJSON(r.Header.Values("Accept")) {
		return 0, false, s.pollEvents(w, r, id, after, rec.Terminal, rec.LastSequence)
	}

	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if rec.Terminal && after >= rec.LastSequence {
		// Nothing newer will ever exist. 204 also stops browsers from reconnecting.
		w.WriteHeader(http.StatusNoContent)
		return 0, false, nil
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies (nginx) from buffering frames
	// A stream outlives the server's read timeout, which bounds reading a request (and
	// would otherwise end the stream's context when it passes): lift it for this one.
	if err := http.NewResponseController(w).SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return 0, false, err
	}
	w.WriteHeader(http.StatusOK)
	return after, r.Method != http.MethodHead, nil
}

// tail writes the events after cursor as SSE frames: the replay from the store, then
// the live tail, until the terminal event is written (then it returns nil), the client
// leaves, a write misses its deadline or the store fails.
//
// It is pull-based: the stream's only state is its cursor and its two frame buffers.
// Read returns at most replayBatch events; when the stream has caught up, Wait blocks
// until the store has something newer, which a store whose wake-ups carry the events
// then hands over without a Read (eventstore.Announcer). Nothing is queued per
// subscriber, so a reader that falls behind only falls further behind in the store, and
// the engine never waits for it.
func (s *server) tail(w http.ResponseWriter, r *http.Request, id string, cursor uint64) error {
	ctx := r.Context()
	out := compat.NewStream(w, s.writeTimeout)
	idle := newIdleTimer(ctx, s.keepAlive)
	defer idle.stop()
	// The frame buffers come from a pool while events are written and go back before
	// the stream waits, so that an idle subscriber holds none.
	var bufs *frameBuffers
	defer func() { bufs.release() }()
	// The retry field opens the stream: with the first events when some are stored
	// already (one write), else alone, so that the client sees the stream open.
	opening := retryFrame
	woken := false // Wait returned: the store may have announced what is newer
	for {
		var events []protocol.Event
		if woken && s.announcer != nil {
			events = s.announcer.Announced(id, cursor, replayBatch)
		}
		if events == nil {
			var err error
			if events, err = s.store.Read(ctx, id, cursor, replayBatch); err != nil {
				return err
			}
		}
		woken = false
		if len(events) == 0 && opening != nil {
			if err := out.Write(opening); err != nil {
				return err
			}
			opening = nil
		}
		// The frames of one read go out in one write and one flush (in pieces of at most
		// coalesceBytes): every one of those events is stored already, so none waits for
		// another, and a reader catching up costs one system call per batch, not per event.
		if bufs == nil {
			bufs = framePool.Get().(*frameBuffers)
		}
		frame := append(bufs.frame[:0], opening...)
		opening = nil
		for i := range events {
			ev := &events[i]
			bufs.env = protocol.AppendEnvelope(bufs.env[:0], ev)
			frame = appendFrame(frame, ev, bufs.env)
			cursor = ev.Sequence
			if last := i == len(events)-1 || ev.Type.Terminal(); last || len(frame) >= coalesceBytes {
				bufs.frame = frame
				if err := out.Write(frame); err != nil {
					return err
				}
				frame = frame[:0]
			}
			if ev.Type.Terminal() {
				return nil
			}
		}
		if len(events) == replayBatch {
			continue // more to replay; no need to wait
		}
		// Caught up: give the buffers back and wait for the next append, with a
		// keep-alive comment each time the stream has been idle for the interval.
		bufs.release()
		bufs = nil
		for {
			err := s.store.Wait(idle.ctx, id, cursor)
			if err == nil {
				idle.reset()
				woken = true
				break
			}
			if ctx.Err() != nil || !idle.fired() {
				return err
			}
			if err := out.Write(keepAlive); err != nil {
				return err
			}
			idle.renew()
		}
	}
}

// errIdle is the cause with which an idleTimer ends its context.
var errIdle = errors.New("event stream idle")

// idleTimer gives a stream's waits a context that ends after the keep-alive interval
// without events. One timer serves the whole stream: reset after every wake-up costs no
// allocation, and only an actual keep-alive makes a new context.
type idleTimer struct {
	parent context.Context
	d      time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func newIdleTimer(parent context.Context, d time.Duration) *idleTimer {
	t := &idleTimer{parent: parent, d: d}
	t.renew()
	return t
}

// renew starts a fresh interval with a fresh context, after the previous one ended.
func (t *idleTimer) renew() {
	t.stop()
	ctx, cancel := context.WithCancelCause(t.parent)
	t.ctx, t.cancel = ctx, cancel
	t.timer = time.AfterFunc(t.d, func() { cancel(errIdle) })
}

// reset restarts the interval. If the timer fired meanwhile, the context has ended and
// the next wait returns at once, which only brings the next keep-alive forward.
func (t *idleTimer) reset() { t.timer.Reset(t.d) }

// fired reports whether the interval passed without events.
func (t *idleTimer) fired() bool { return errors.Is(context.Cause(t.ctx), errIdle) }

func (t *idleTimer) stop() {
	if t.timer != nil {
		t.timer.Stop()
		t.cancel(nil)
	}
}

// frameBuffers are the buffers a stream encodes frames in: the envelope of one event and
// the frames of one batch.
type frameBuffers struct{ frame, env []byte }

var framePool = sync.Pool{New: func() any {
	return &frameBuffers{frame: make([]byte, 0, frameSize), env: make([]byte, 0, frameSize)}
}}

// release returns b to the pool, unless a large batch grew it: the pool keeps only
// small buffers. A nil b is a no-op.
func (b *frameBuffers) release() {
	if b == nil || cap(b.frame) > idleFrameCap || cap(b.env) > idleFrameCap {
		return
	}
	framePool.Put(b)
}

// retryFrame announces the reconnection time at the start of every stream.
var retryFrame = sse.AppendRetry(nil, sseRetry)

// keepAlive is the keep-alive comment frame.
var keepAlive = sse.AppendComment(nil, "keep-alive")

// logStreamEnd logs why a stream ended early. A client that left or stopped reading, a
// store shutting down and an execution removed by retention are routine; any other store
// failure is worth an error.
// Every early end but the client's own leaving is counted as a drop, by reason.
func (s *server) logStreamEnd(r *http.Request, id string, err error) {
	var reason, drop string
	var ne interface{ Timeout() bool } // errors writing to the connection are net errors
	switch {
	case r.Context().Err() != nil:
		reason = "the client left"
	case errors.As(err, &ne):
		reason = "the client stopped reading"
		if ne.Timeout() {
			drop = DropWriteTimeout
		}
	case errors.Is(err, eventstore.ErrClosed):
		reason, drop = "the store is shutting down", DropShutdown
	case errors.Is(err, eventstore.ErrNotFound), errors.Is(err, eventstore.ErrTerminated):
		reason, drop = "the execution was removed", DropRemoved
	default:
		s.obs.StreamDropped(DropStoreError)
		s.log.Error(err, "Event stream ended by a store failure", "execution", id)
		return
	}
	if drop != "" {
		s.obs.StreamDropped(drop)
	}
	s.log.V(1).Info("Event stream ended early", "execution", id, "reason", reason)
}

// pollEvents answers the polling form: the events after the cursor, at most pollPage of
// them and pollPageBytes of encoded envelopes (always at least one event when any is
// newer: one event's data is at most protocol.MaxEventBytes), the cursor to continue
// from, and whether the stream is over (the page holds the terminal event, or the
// execution is terminal and nothing is newer than the cursor). It never waits.
//
// Events are read in batches that shrink as large events arrive, so a page of large
// events is not held in memory many times over before it is cut.
func (s *server) pollEvents(w http.ResponseWriter, r *http.Request, id string, after uint64, terminal bool, last uint64) error {
	body := append(make([]byte, 0, frameSize), `{"events":[`...)
	cursor, count, ended := after, 0, false
	batch, largest := replayBatch, 0
	for count < pollPage && !ended {
		events, err := s.store.Read(r.Context(), id, cursor, min(batch, pollPage-count))
		if err != nil {
			return err
		}
		full := false
		for i := range events {
			start := len(body)
			if count > 0 {
				body = append(body, ',')
			}
			body = protocol.AppendEnvelope(body, &events[i])
			size := len(body) - start
			if count > 0 && len(body) > pollPageBytes {
				body, full = body[:start], true
				break
			}
			largest = max(largest, size)
			cursor, count = events[i].Sequence, count+1
			ended = events[i].Type.Terminal()
		}
		if full || len(events) < batch {
			break
		}
		batch = max(1, min(replayBatch, (pollPageBytes-len(body))/max(largest, 1)))
	}
	ended = ended || (terminal && cursor >= last)
	body = append(body, `],"next_after":`...)
	body = strconv.AppendUint(body, cursor, 10)
	body = append(body, `,"terminal":`...)
	body = strconv.AppendBool(body, ended)
	writeJSONBytes(w, http.StatusOK, append(body, '}'))
	return nil
}

// eventCursor returns the cursor of an events request: the after query parameter or the
// Last-Event-ID header, each a decimal sequence; the larger wins when both are given.
// A value that is not one decimal number is an error.
func eventCursor(r *http.Request) (uint64, error) {
	var cursor uint64
	if vals, ok := r.URL.Query()["after"]; ok {
		n, err := parseCursor(vals)
		if err != nil {
			return 0, err
		}
		cursor = n
	}
	if vals := r.Header.Values("Last-Event-ID"); len(vals) > 0 {
		n, err := parseCursor(vals)
		if err != nil {
			return 0, err
		}
		cursor = max(cursor, n)
	}
	return cursor, nil
}

// parseCursor parses exactly one decimal sequence: ASCII digits only.
func parseCursor(vals []string) (uint64, error) {
	if len(vals) != 1 {
		return 0, errCursorInvalid
	}
	// Base 10 accepts digits only: no sign, no underscores, no spaces, no empty value.
	n, err := strconv.ParseUint(vals[0], 10, 64)
	if err != nil {
		return 0, errCursorInvalid
	}
	return n, nil
}

// wantsJSON reports whether the Accept header prefers application/json to
// text/event-stream. Without a preference (no Accept, */*, or equal quality) the answer
// is the event stream, the endpoint's primary form.
func wantsJSON(accept []string) bool {
	jsonQ, sseQ := 0.0, 0.0
	for _, header := range accept {
		for _, item := range strings.Split(header, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(item))
			if err != nil {
				continue
			}
			q := 1.0
			if qs, ok := params["q"]; ok {
				if v, err := strconv.ParseFloat(qs, 64); err == nil && v >= 0 && v <= 1 {
					q = v
				}
			}
			switch mt {
			case "application/json":
				jsonQ = max(jsonQ, q)
			case "text/event-stream":
				sseQ = max(sseQ, q)
			}
		}
	}
	return jsonQ > sseQ
}
