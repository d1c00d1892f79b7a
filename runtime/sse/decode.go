package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultMaxFrameSize is the frame size bound a Decoder uses unless WithMaxFrameSize says
// otherwise. Switchboard's own frames are one envelope each, far below it.
const DefaultMaxFrameSize = 1 << 20

// ErrFrameTooLarge is returned by Decoder.Next when a frame exceeds the decoder's maximum
// frame size. The decoder cannot resynchronise with a stream it stopped reading mid-frame,
// so the error is permanent for that decoder.
var ErrFrameTooLarge = errors.New("sse: frame exceeds the maximum size")

// utf8BOM is the byte order mark the standard's UTF-8 decode step skips at stream start.
const utf8BOM = "\xEF\xBB\xBF"

// retainBuffer is the largest scratch buffer a Decoder or Encoder keeps between frames; a
// rare huge frame should not pin its memory for the rest of a long-lived stream.
const retainBuffer = 64 << 10

// maxRetryMs is the largest reconnection time, in milliseconds, a time.Duration holds.
const maxRetryMs = math.MaxInt64 / int64(time.Millisecond)

// Event is one dispatched server-sent event.
type Event struct {
	// ID is the stream's last event ID when the event was dispatched: the value of the most
	// recent id field, in this frame or an earlier one, or "" when there was none or the
	// last one was empty.
	ID string
	// Type is the value of the frame's event field; "" means the default type "message".
	Type string
	// Data is the frame's data lines joined by "\n".
	Data string
	// Retry is the reconnection time set by a retry field of this frame; it is meaningful
	// only when HasRetry is true. A retry field also counts in frames that dispatch no
	// event (such as "retry: 2000\n\n"); Decoder.Retry reports the stream's current value.
	Retry time.Duration
	// HasRetry reports whether the frame had a valid retry field.
	HasRetry bool
}

// Option configures a Decoder.
type Option func(*Decoder)

// WithMaxFrameSize bounds the bytes of one frame: its lines (after UTF-8 repair, without
// line terminators) from one blank line to the next, comments and unknown fields
// included. Decoder memory stays proportional to n whatever the peer sends. n ≤ 0 selects
// DefaultMaxFrameSize.
func WithMaxFrameSize(n int) Option {
	return func(d *Decoder) {
		if n <= 0 {
			n = DefaultMaxFrameSize
		}
		d.max = n
	}
}

// WithComments calls fn with the text of every comment line (after the ':' and one
// optional space), for example to notice keep-alives. fn runs synchronously inside Next.
func WithComments(fn func(text string)) Option {
	return func(d *Decoder) { d.onComment = fn }
}

// Decoder reads events from an event stream. It is not safe for concurrent use.
type Decoder struct {
	r         *bufio.Reader
	max       int
	onComment func(string)

	started bool  // the byte order mark check has run
	skipLF  bool  // the last line ended with CR, so a LF right after it completes that ending
	err     error // sticky: a stream is unusable after its first error

	line  []byte // a line that spans several reads
	fixed []byte // a line after UTF-8 repair
	frame int    // bytes of the current frame's lines so far

	// The parser state of the standard: data, event type and last event ID buffers.
	data   []byte
	typ    []byte
	typStr string // the last dispatched type, reused so repeated types do not allocate
	idBuf  string

	lastID string // the "last event ID string": idBuf as of the last blank line

	frameRetry    time.Duration
	frameHasRetry bool
	retry         time.Duration
	hasRetry      bool
}

// NewDecoder returns a Decoder reading from r. It buffers r itself, in a buffer that
// Release gives back for the next decoder.
func NewDecoder(r io.Reader, opts ...Option) *Decoder {
	d := &Decoder{max: DefaultMaxFrameSize}
	for _, opt := range opts {
		opt(d)
	}
	d.r = readBuffers.Get().(*bufio.Reader)
	d.r.Reset(r)
	return d
}

// readBuffers holds the read buffers of released decoders.
var readBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBuffer) }}

// errReleased is what a released Decoder returns.
var errReleased = errors.New("sse: decoder released")

// Release gives the decoder's read buffer back for a later decoder to use, and forgets
// its reader; the decoder returns an error from then on. A decoder that is never
// released is simply collected, buffer and all: Release only spares the allocation
// when decoders come and go often, as one per provider call does.
func (d *Decoder) Release() {
	if d.r == nil {
		return
	}
	d.r.Reset(nil)
	readBuffers.Put(d.r)
	d.r, d.err = nil, errReleased
}

// readBuffer is the size of a Decoder's read buffer. Frames are usually far smaller; a
// longer line is gathered across reads (readLine). A decoder is made per provider call
// and per followed stream, so a larger buffer would be allocated, and collected, that
// often: at 32 KiB it was most of the bytes the runtime allocated per execution.
const readBuffer = 4 << 10

// LastEventID returns the stream's last event ID: the id in effect at the most recent
// blank line, which persists across events until another id field changes it. An id in an
// incomplete frame cut off by the end of the stream does not count, so a client resuming
// from LastEventID never skips an event it did not receive.
func (d *Decoder) LastEventID() string { return d.lastID }

// Retry returns the stream's reconnection time from the most recent valid retry field,
// and whether there was one.
func (d *Decoder) Retry() (time.Duration, bool) { return d.retry, d.hasRetry }

// Next returns the next dispatched event. At the end of the stream it returns io.EOF and
// discards an incomplete final frame. It returns ErrFrameTooLarge for a frame over the
// size bound, and the reader's error if reading fails; every error is permanent.
func (d *Decoder) Next() (Event, error) {
	ev, data, err := d.NextData()
	if err == nil {
		ev.Data = string(data)
	}
	return ev, err
}

// NextData is Next without the copy of the event's data: ev.Data is left empty and data
// holds it, in the decoder's own buffer, valid until the next call. It is for callers
// that decode the data at once, as provider adapters do with a chunk per token.
func (d *Decoder) NextData() (ev Event, data []byte, err error) {
	if d.err != nil {
		return Event{}, nil, d.err
	}
	if !d.started {
		d.started = true
		d.skipBOM()
	}
	for {
		line, err := d.readLine()
		if err != nil {
			d.data, d.typ = d.data[:0], d.typ[:0]
			d.err = err
			return Event{}, nil, err
		}
		if len(line) == 0 {
			if ev, data, ok := d.dispatch(); ok {
				return ev, data, nil
			}
			continue
		}
		if !utf8.Valid(line) {
			d.fixed = appendValidUTF8(d.fixed[:0], line)
			line = d.fixed
		}
		d.frame += len(line)
		if d.frame > d.max {
			d.err = ErrFrameTooLarge
			return Event{}, nil, d.err
		}
		d.processLine(line)
	}
}

// skipBOM drops one leading byte order mark. It peeks one byte at a time so that a stream
// that does not start with one is never made to wait for bytes it has not sent yet.
func (d *Decoder) skipBOM() {
	for n := 1; n <= len(utf8BOM); n++ {
		b, _ := d.r.Peek(n)
		if len(b) < n || b[n-1] != utf8BOM[n-1] {
			return // a read error resurfaces from readLine
		}
	}
	// Discarding bytes that Peek has already buffered cannot fail, here and in readLine.
	_, _ = d.r.Discard(len(utf8BOM))
}

// readLine returns the next line without its terminator. The result aliases the reader's
// buffer or d.line and is valid until the next call. Bytes of a line are accounted against
// the frame bound while they arrive, so a line with no end cannot exhaust memory.
func (d *Decoder) readLine() ([]byte, error) {
	d.line = d.line[:0]
	for {
		if _, err := d.r.Peek(1); err != nil {
			return nil, err
		}
		buf, _ := d.r.Peek(d.r.Buffered())
		if d.skipLF {
			d.skipLF = false
			if buf[0] == '\n' {
				_, _ = d.r.Discard(1)
				continue
			}
		}
		// Two IndexByte scans use the vectorised search; the CR scan only needs to cover
		// the bytes before the first LF.
		end := bytes.IndexByte(buf, '\n')
		crScope := buf
		if end >= 0 {
			crScope = buf[:end]
		}
		if cr := bytes.IndexByte(crScope, '\r'); cr >= 0 {
			end = cr
		}
		if end < 0 {
			if d.frame+len(d.line)+len(buf) > d.max {
				return nil, ErrFrameTooLarge
			}
			d.line = append(d.line, buf...)
			_, _ = d.r.Discard(len(buf))
			continue
		}
		if d.frame+len(d.line)+end > d.max {
			return nil, ErrFrameTooLarge
		}
		line := buf[:end]
		if len(d.line) > 0 {
			d.line = append(d.line, line...)
			line = d.line
		}
		// A CR may be the first half of a CRLF whose LF has not arrived yet; remember it
		// instead of waiting for the next byte, which could block a live stream.
		d.skipLF = buf[end] == '\r'
		_, _ = d.r.Discard(end + 1)
		return line, nil
	}
}

// processLine applies one non-blank line to the parser state.
func (d *Decoder) processLine(line []byte) {
	if line[0] == ':' {
		if d.onComment != nil {
			d.onComment(string(trimSpace(line[1:])))
		}
		return
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], trimSpace(line[i+1:])
	}
	switch string(field) {
	case "data":
		d.data = append(d.data, value...)
		d.data = append(d.data, '\n')
	case "event":
		d.typ = append(d.typ[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) < 0 && string(value) != d.idBuf {
			d.idBuf = string(value)
		}
	case "retry":
		if ms, ok := parseRetry(value); ok {
			r := time.Duration(ms) * time.Millisecond
			d.frameRetry, d.frameHasRetry = r, true
			d.retry, d.hasRetry = r, true
		}
	}
}

// dispatch runs the standard's dispatch steps at a blank line: the event, without its
// Data, and the data, which stays valid until the next frame's first data line. ok is
// false when the frame had no data: such a frame still commits its id (and any retry)
// but yields no event.
func (d *Decoder) dispatch() (ev Event, data []byte, ok bool) {
	d.lastID = d.idBuf
	d.frame = 0
	retry, hasRetry := d.frameRetry, d.frameHasRetry
	d.frameRetry, d.frameHasRetry = 0, false
	if len(d.data) == 0 {
		d.typ = d.typ[:0]
		return Event{}, nil, false
	}
	if string(d.typ) != d.typStr {
		d.typStr = string(d.typ)
	}
	ev = Event{ID: d.lastID, Type: d.typStr, Retry: retry, HasRetry: hasRetry}
	data = d.data[:len(d.data)-1]
	d.typ = d.typ[:0]
	if cap(d.data) > retainBuffer {
		d.data = nil
	} else {
		d.data = d.data[:0]
	}
	return ev, data, true
}

// trimSpace removes the one leading space the format allows after a field's colon.
func trimSpace(v []byte) []byte {
	if len(v) > 0 && v[0] == ' ' {
		return v[1:]
	}
	return v
}

// parseRetry parses a retry value: ASCII digits only, anything else is ignored. Values too
// large for a time.Duration saturate rather than wrap around.
func parseRetry(v []byte) (ms int64, ok bool) {
	if len(v) == 0 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		digit := int64(c - '0')
		if ms > (maxRetryMs-digit)/10 {
			ms = maxRetryMs
			continue
		}
		ms = ms*10 + digit
	}
	return ms, true
}
