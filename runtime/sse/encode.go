package sse

import (
	"io"
	"strconv"
	"strings"
	"time"
)

// AppendEvent appends one event frame to dst and returns the extended slice:
//
//	id: <id>
//	event: <typ>
//	data: <first line of data>
//	data: <next line of data>
//
// followed by a blank line. The id and event lines are left out when id or typ is empty,
// so an empty id cannot be sent (the reader keeps its previous last event ID). data is
// split at every LF, CR or CRLF into data lines; a reader joins them with LF, so data
// round-trips exactly when it uses LF line endings (CR and CRLF come back as LF). Empty
// data still yields one data line, so the frame is always dispatched.
//
// A line ending inside id or typ would end the field early and let the rest inject other
// fields or frames, and a reader ignores an id containing U+0000. Rather than fail,
// AppendEvent sanitises: every CR and LF in id and typ, and every U+0000 in id, is written
// as U+FFFD. Callers that must not alter values check them first. Bytes that are not valid
// UTF-8 are written as they are; a conforming reader replaces them with U+FFFD.
func AppendEvent(dst []byte, id, typ string, data []byte) []byte {
	if id != "" {
		dst = append(dst, "id: "...)
		dst = appendSanitized(dst, id, "\r\n\x00")
		dst = append(dst, '\n')
	}
	if typ != "" {
		dst = append(dst, "event: "...)
		dst = appendSanitized(dst, typ, "\r\n")
		dst = append(dst, '\n')
	}
	for {
		line, rest, more := cutLine(data)
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			break
		}
		data = rest
	}
	return append(dst, '\n')
}

// AppendComment appends a comment frame ": <text>" and a blank line to dst, for example
// ": keep-alive". A text with line breaks becomes several comment lines. The blank line
// makes the comment a frame of its own, so it never merges with a following event.
func AppendComment(dst []byte, text string) []byte {
	for {
		line, rest, more := cutLine(text)
		dst = append(dst, ": "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if !more {
			break
		}
		text = rest
	}
	return append(dst, '\n')
}

// AppendRetry appends a frame "retry: <ms>" and a blank line to dst, telling the reader to
// wait d (in whole milliseconds; negative counts as 0) before reconnecting. The frame has
// no data, so it dispatches no event.
func AppendRetry(dst []byte, d time.Duration) []byte {
	ms := max(d.Milliseconds(), 0)
	dst = append(dst, "retry: "...)
	dst = strconv.AppendInt(dst, ms, 10)
	return append(dst, "\n\n"...)
}

// cutLine splits p at its first LF, CR or CRLF. more reports whether a line break was
// found; rest is what follows it.
func cutLine[T string | []byte](p T) (line, rest T, more bool) {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '\r' || c == '\n' {
			line, rest = p[:i], p[i+1:]
			if c == '\r' && len(rest) > 0 && rest[0] == '\n' {
				rest = rest[1:]
			}
			return line, rest, true
		}
	}
	return p, rest, false
}

// appendSanitized appends s with every byte of bad written as U+FFFD.
func appendSanitized(dst []byte, s, bad string) []byte {
	for {
		i := strings.IndexAny(s, bad)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, replacementChar...)
		s = s[i+1:]
	}
}

// Encoder writes frames to an io.Writer, one Write call per frame, so that a server can
// flush after every frame and a frame is never split across writes by the encoder. It
// reuses one buffer and is not safe for concurrent use.
type Encoder struct {
	w   io.Writer
	buf []byte
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// WriteEvent writes the frame AppendEvent builds.
func (e *Encoder) WriteEvent(id, typ string, data []byte) error {
	e.buf = AppendEvent(e.buf[:0], id, typ, data)
	return e.flush()
}

// WriteComment writes the frame AppendComment builds.
func (e *Encoder) WriteComment(text string) error {
	e.buf = AppendComment(e.buf[:0], text)
	return e.flush()
}

// WriteRetry writes the frame AppendRetry builds.
func (e *Encoder) WriteRetry(d time.Duration) error {
	e.buf = AppendRetry(e.buf[:0], d)
	return e.flush()
}

func (e *Encoder) flush() error {
	_, err := e.w.Write(e.buf)
	if cap(e.buf) > retainBuffer {
		e.buf = nil
	}
	return err
}
