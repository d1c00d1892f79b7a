package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// maxFrameSize bounds one event frame: a single envelope whose data the runtime keeps
// within protocol.MaxEventBytes, plus the envelope's own fields and the id and event
// lines, for which 64 KiB is ample. It admits the largest event the runtime can emit
// and keeps a broken or hostile peer from making the client buffer without limit.
const maxFrameSize = protocol.MaxEventBytes + 64<<10

// drainLimit is how much of a finished stream Close reads so that the connection can be
// reused; the server ends the response right after the terminal event.
const drainLimit = 4 << 10

// Events opens the event stream of execution id with the events whose sequence is
// greater than after (0: from the start). A 404 or other refusal is returned as an
// *Error; a terminal execution with nothing newer than after (204) gives a stream that
// ends at once without error. The caller must Close the stream.
func (c *Client) Events(ctx context.Context, id string, after uint64) (*Stream, error) {
	path := executionPath(id) + "/events"
	if after > 0 {
		path += "?after=" + strconv.FormatUint(after, 10)
	}
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		resp.Body.Close()
		st := &Stream{ctx: ctx, id: id, last: after}
		st.done.Store(true)
		return st, nil
	case http.StatusOK:
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
			resp.Body.Close()
			return nil, fmt.Errorf("client: event stream has content type %q", mt)
		}
		return &Stream{
			ctx:  ctx,
			id:   id,
			last: after,
			body: resp.Body,
			dec:  sse.NewDecoder(resp.Body, sse.WithMaxFrameSize(maxFrameSize)),
		}, nil
	}
	defer resp.Body.Close()
	return nil, readError(resp)
}

// Stream reads one event stream. Next advances to the next event; Event returns it; Err
// reports why the stream ended, nil after the terminal event (or a 204). Every event
// continues the sequence exactly (no gaps, no duplicates) and belongs to the execution,
// or the stream fails. A Stream is not safe for concurrent use, except that Close may be
// called from another goroutine to abort a blocked Next.
type Stream struct {
	ctx  context.Context
	id   string
	body io.ReadCloser
	dec  *sse.Decoder

	ev   protocol.Event
	last uint64 // sequence of the last event returned, or the starting cursor
	err  error
	// done is set once the terminal event was returned or there was nothing to stream.
	// It is atomic because Close, which may run on another goroutine, reads it.
	done atomic.Bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Next advances to the next event and reports whether there is one. It returns false at
// the end of the stream; Err tells whether the end was the normal one.
func (s *Stream) Next() bool {
	if s.done.Load() || s.err != nil {
		return false
	}
	// The frame's data is decoded in the decoder's buffer; the event copies what it keeps.
	_, data, err := s.dec.NextData()
	if err != nil {
		s.err = s.endError(err)
		return false
	}
	ev, err := protocol.DecodeEvent(data)
	if err != nil {
		s.err = fmt.Errorf("client: decode event after sequence %d: %w", s.last, err)
		return false
	}
	switch {
	case ev.ExecutionID != s.id:
		s.err = fmt.Errorf("client: event %d belongs to another execution", ev.Sequence)
		return false
	case ev.Sequence != s.last+1:
		s.err = fmt.Errorf("client: event stream out of order: %w", &protocol.SequenceGapError{Have: s.last, Got: ev.Sequence})
		return false
	}
	s.ev, s.last = ev, ev.Sequence
	s.done.Store(ev.Type.Terminal())
	return true
}

// endError classifies the error that ended the decoder.
func (s *Stream) endError(err error) error {
	switch {
	case s.closed.Load():
		return nil // the caller closed the stream; nothing to report
	case s.ctx.Err() != nil:
		return s.ctx.Err()
	case errors.Is(err, sse.ErrFrameTooLarge):
		return fmt.Errorf("client: event after sequence %d: %w", s.last, err)
	case errors.Is(err, io.EOF):
		return &TruncatedError{LastSequence: s.last}
	}
	return &TruncatedError{LastSequence: s.last, Err: err}
}

// Event returns the event Next advanced to.
func (s *Stream) Event() protocol.Event { return s.ev }

// Err returns the error that ended the stream: nil after the terminal event, after a 204
// or after Close; a *TruncatedError when the stream ended early; the context's error when
// it was cancelled; another error when the stream broke the protocol.
func (s *Stream) Err() error { return s.err }

// LastSequence returns the sequence of the last event Next returned, or the cursor the
// stream started after. Reading again after it continues the stream.
func (s *Stream) LastSequence() uint64 { return s.last }

// Close closes the response body. It is safe to call more than once and from another
// goroutine than Next.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.body == nil {
			return
		}
		if s.done.Load() {
			// The server ends the response after the terminal event; reading that end lets
			// the transport reuse the connection.
			_, _ = io.Copy(io.Discard, io.LimitReader(s.body, drainLimit))
		}
		s.closeErr = s.body.Close()
	})
	return s.closeErr
}

// All returns an iterator over the remaining events. If the stream ends with an error, the
// iterator yields it last, with a zero event. The stream is closed when the loop ends.
func (s *Stream) All() iter.Seq2[protocol.Event, error] {
	return func(yield func(protocol.Event, error) bool) {
		defer s.Close()
		for s.Next() {
			if !yield(s.ev, nil) {
				return
			}
		}
		if err := s.Err(); err != nil {
			yield(protocol.Event{}, err)
		}
	}
}
