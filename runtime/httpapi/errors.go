package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// handlerFunc is an endpoint. It returns an error instead of writing one, so that the
// mapping from errors to responses lives in one place (writeError). A handler that has
// already written its response head must not return an error.
type handlerFunc func(http.ResponseWriter, *http.Request) error

// handle adapts an endpoint to http.Handler. The response must be written within the
// write timeout, so a client that stops reading cannot hold the handler; an event
// stream renews the deadline for every frame instead (compat.Stream).
func (s *server) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A writer without deadlines (a test recorder) answers ErrNotSupported: fine.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.writeTimeout))
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// methodNotAllowed answers a known path requested with another method.
func (s *server) methodNotAllowed(allow string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", allow)
		return errMethodNotAllowed
	}
}

// statusError is a portable error answered with a status other than its code's own:
// 405 for a wrong method on a known path (with Allow) and 415 for a body that is not
// JSON. The closed set of codes has none for them, so both carry invalid_request — the
// documented exceptions to that code's status of 400 (spec/http-api.md, "Errors").
type statusError struct {
	status int
	err    *protocol.Error
}

func (e *statusError) Error() string { return e.err.Error() }

// Errors of this package. Messages are fixed: they never echo the request.
var (
	errNoRoute          = protocol.NewError(protocol.CodeNotFound, "no such resource")
	errMethodNotAllowed = &statusError{http.StatusMethodNotAllowed, protocol.NewError(protocol.CodeInvalidRequest, "method not allowed for this resource")}
	errNotFound         = protocol.NewError(protocol.CodeNotFound, "execution not found")
	errInternal         = protocol.NewError(protocol.CodeInternal, "internal error")
	errStoreUnavailable = protocol.NewError(protocol.CodeProviderUnavailable, "the event store cannot be reached; retry later")
	errBodyUnreadable   = protocol.NewError(protocol.CodeInvalidRequest, "body: could not be read")
	errKeyInvalid       = protocol.NewError(protocol.CodeInvalidRequest, "Idempotency-Key: must be one header of 1 to 255 visible ASCII characters, raw or as a quoted string")
	errCursorInvalid    = protocol.NewError(protocol.CodeInvalidRequest, "cursor: after and Last-Event-ID must be one decimal event sequence each")
	// errNotJSON refuses a POST body that is not declared application/json. Besides
	// keeping the API to one media type, it stops cross-site form posts: a browser
	// sends those without asking first, and never with this Content-Type.
	errNotJSON = &statusError{http.StatusUnsupportedMediaType, protocol.NewError(protocol.CodeInvalidRequest, "Content-Type: the body must be application/json")}
)

// writeError answers err as a JSON error body (spec/http-api.md, "Errors"). Portable
// errors are answered as they are; store and size errors are translated; anything else is
// internal, with a fixed message, and only logged.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, pe := s.classify(r, err)
	if pe.RetryAfterMs > 0 {
		// Retry-After is whole seconds; round up so a client never retries early.
		w.Header().Set("Retry-After", strconv.FormatInt((pe.RetryAfterMs+999)/1000, 10))
	}
	writeJSON(w, status, protocol.ErrorBody{Error: pe})
}

// classify returns the status and portable error err is answered with.
func (s *server) classify(r *http.Request, err error) (int, *protocol.Error) {
	var se *statusError
	if errors.As(err, &se) {
		return se.status, se.err
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, protocol.RequestTooLarge()
	}
	if errors.Is(err, eventstore.ErrNotFound) {
		return http.StatusNotFound, errNotFound
	}
	if errors.Is(err, eventstore.ErrUnavailable) {
		// The store's database cannot be reached now (a restart): a retry, a stream's
		// reconnection included, may succeed.
		s.log.Info("Event store unreachable", "method", r.Method, "pattern", r.Pattern)
		return http.StatusServiceUnavailable, errStoreUnavailable
	}
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code.Known() && pe.Code.HTTPStatus() != http.StatusInternalServerError {
		return pe.Code.HTTPStatus(), pe
	}
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The caller went away; the answer is for nobody and nothing failed.
		s.log.V(1).Info("Request abandoned by the client", "method", r.Method, "pattern", r.Pattern)
	} else {
		s.log.Error(err, "Request failed", "method", r.Method, "pattern", r.Pattern)
	}
	return http.StatusInternalServerError, errInternal
}

// writeJSON writes v as the JSON response body with status. HTML characters are not
// escaped: the body is never HTML (nosniff says so), and escaping them would make the
// result snapshot's raw values differ byte for byte from the same values in events.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own response types are encoded; this cannot happen short of a bug,
		// and the caller still gets a well-formed error.
		status = http.StatusInternalServerError
		buf.Reset()
		_ = enc.Encode(protocol.ErrorBody{Error: errInternal})
	}
	writeJSONBytes(w, status, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// Header values shared by every response. Assigning these slices instead of calling
// Header.Set saves an allocation per header on every response; net/http only reads
// them, and nothing in this package modifies a header value after setting it.
var (
	hvJSON    = []string{"application/json"}
	hvNoStore = []string{"no-store"}
	hvNosniff = []string{"nosniff"}
	hvTrue    = []string{"true"}
)

// writeJSONBytes writes an encoded JSON body with status.
func writeJSONBytes(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = hvJSON
	h["Cache-Control"] = hvNoStore
	h["X-Content-Type-Options"] = hvNosniff
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client is gone
}
