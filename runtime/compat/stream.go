package compat

import (
	"errors"
	"net/http"
	"time"
)

// Stream writes whole frames to an event stream: one Write per frame, then a flush,
// under a fresh write deadline, so that a reader that stops reading is dropped after
// the timeout instead of holding the handler forever.
type Stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// NewStream returns a Stream writing to w, each frame within timeout.
func NewStream(w http.ResponseWriter, timeout time.Duration) *Stream {
	return &Stream{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// Open prepares w's response for a stream that lasts as long as its execution: the
// read deadline the server set for the request is lifted (the body has been read).
// Call it before writing the head.
func (s *Stream) Open() error {
	if err := s.rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// Write writes frame and flushes it.
func (s *Stream) Write(frame []byte) error {
	// A writer without deadlines (a recorder in tests) still streams; only the bound on
	// stalled readers is lost, and real servers support it.
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	return s.rc.Flush()
}
