// Package anthropic is the Anthropic-compatible front door (spec/compat.md, "Anthropic
// Messages"): POST /v1/messages, each call an execution. It translates a Messages
// request into a protocol request, submits it through compat.Kit, and projects the
// execution's events back into a message or Anthropic's named stream events; nothing
// below the API layer knows of it.
package anthropic

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Door is the Anthropic front door. Its zero value is ready to use.
type Door struct{}

// Routes returns the endpoint of the door. Anthropic's SDKs send the caller's key in
// x-api-key, which the server reads as the bearer token when Authorization is absent.
func (Door) Routes(k compat.Kit) []compat.Route {
	h := &handler{kit: k}
	return []compat.Route{{
		Pattern:      "POST /v1/messages",
		Handle:       h.messages,
		WriteError:   writeError,
		APIKeyHeader: "x-api-key",
	}}
}

// Versions are the published values of the anthropic-version header, one of which
// every request must carry, as Anthropic's API requires: 2023-06-01, what SDKs sent
// until their 2026 majors; 2023-01-01, the first; and 2026-10-21, what the current
// SDKs send. The door speaks the same Messages wire format under each (spec/compat.md,
// "Anthropic Messages", lists what the versions change at Anthropic and why the door
// does not follow).
var Versions = []string{"2023-06-01", "2023-01-01", "2026-10-21"}

// Fixed errors of the door.
var (
	errVersionMissing = protocol.NewError(protocol.CodeInvalidRequest, "anthropic-version: header is required")
	errVersionUnknown = protocol.NewError(protocol.CodeInvalidRequest, "anthropic-version: must be a published API version ("+strings.Join(Versions, ", ")+")")
	errVersionTwice   = protocol.NewError(protocol.CodeInvalidRequest, "anthropic-version: must be sent once")
	errModelNotFound  = protocol.NewError(protocol.CodeNotFound, "model: no such model, or the caller may not use it")
	errUnreadable     = errors.New("anthropic: an event of the log cannot be read")
)

// handler serves POST /v1/messages.
type handler struct {
	kit compat.Kit
}

// messages checks, translates and submits the request, then answers the execution:
// as one message, or as its event stream.
func (h *handler) messages(w http.ResponseWriter, r *http.Request) error {
	if err := checkVersion(r.Header); err != nil {
		return err
	}
	body, err := h.kit.ReadBody(w, r)
	if err != nil {
		return err
	}
	req, perr := decodeRequest(body)
	if perr != nil {
		return perr
	}
	m, ok, err := h.kit.Model(r.Context(), req.model)
	if err != nil {
		return err
	}
	if !ok {
		return errModelNotFound
	}
	native, err := req.nativeJSON(m)
	if err != nil {
		return err
	}
	sub, err := h.kit.Submit(w, r, native, body)
	if err != nil {
		return err
	}
	w.Header().Set(compat.ExecutionHeader, sub.ID)
	w.Header().Set("Request-Id", sub.ID) // what Anthropic's SDKs report as the request id
	model := m.ProviderModel
	if model == "" {
		model = m.ID
	}
	st := h.kit.NewStream(w)
	// The call lasts as long as its execution, past the server's read timeout, which
	// would otherwise end the request's context; the body has been read.
	if err := st.Open(); err != nil {
		h.kit.Logger().V(1).Info("Cannot lift the read deadline of a front-door call", "execution", sub.ID)
	}
	if req.stream {
		h.stream(w, r, st, sub, newProjection(sub.ID, model, true))
		return nil
	}
	return h.whole(w, r, st, sub, newProjection(sub.ID, model, false))
}

// checkVersion requires one anthropic-version header naming a published version. The
// anthropic-beta header is read nowhere: no beta feature is supported.
func checkVersion(h http.Header) *protocol.Error {
	values := h.Values("Anthropic-Version")
	switch {
	case len(values) == 0:
		return errVersionMissing
	case len(values) > 1:
		return errVersionTwice
	}
	if !contains(Versions, values[0]) {
		return errVersionUnknown
	}
	return nil
}

// nativeJSON is the native request for model m: its ability, and the deployment it
// names pinned with routing.only.
func (r *request) nativeJSON(m compat.Model) ([]byte, error) {
	n := r.native
	n.Ability = m.Ability
	if m.Deployment != "" {
		n.Routing = &protocol.Routing{Only: []string{m.Deployment}}
	}
	return json.Marshal(&n)
}

// whole answers the execution as one message once it has ended.
func (h *handler) whole(w http.ResponseWriter, r *http.Request, st *compat.Stream, sub compat.Submission, p *projection) error {
	err := h.kit.Follow(r.Context(), sub.ID, 0, func(events []protocol.Event) error {
		for i := range events {
			if _, err := p.apply(&events[i], nil); err != nil {
				return errUnreadable
			}
		}
		return nil
	}, nil)
	switch {
	case err != nil:
		h.interrupted(w, r, st, sub, p, false, err)
	case p.failure != nil:
		h.answerError(w, st, failureStatus(p.failure), p.failure)
	default:
		body := p.appendMessage(make([]byte, 0, 512))
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		// Through the stream writer: the answer may come long after the server's
		// write deadline for the request, and it gets a fresh one.
		_ = st.Write(body) // a failed write means the client is gone; the execution ended anyway
	}
	return nil
}

// stream answers the execution as Anthropic's event stream. The head is written with
// the first frame, which the first output (or the end) produces, so that a call failing
// before any output is answered with an HTTP error, which SDKs raise as their typed
// errors; a call that has waited a whole keep-alive interval without output writes its
// head then and pings, and a failure after that is an error event.
func (h *handler) stream(w http.ResponseWriter, r *http.Request, st *compat.Stream, sub compat.Submission, p *projection) {
	head := false
	writeHead := func() {
		if head {
			return
		}
		head = true
		hd := w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Accel-Buffering", "no") // keep reverse proxies from buffering frames
		w.WriteHeader(http.StatusOK)
	}
	var buf []byte
	err := h.kit.Follow(r.Context(), sub.ID, 0, func(events []protocol.Event) error {
		buf = buf[:0]
		for i := range events {
			var err error
			if buf, err = p.apply(&events[i], buf); err != nil {
				return errUnreadable
			}
		}
		if p.failure != nil && head && !p.started {
			// The head went out for a ping, before any message: the failure is this
			// stream's only event.
			buf = appendErrorFrame(buf, failureStatus(p.failure), p.failure)
		}
		if len(buf) == 0 {
			return nil
		}
		writeHead()
		// One write and flush per batch of events.
		return st.Write(buf)
	}, func() error {
		writeHead()
		return st.Write(pingFrame)
	})
	switch {
	case err != nil:
		h.interrupted(w, r, st, sub, p, head, err)
	case p.failure != nil && !head:
		h.answerError(w, st, failureStatus(p.failure), p.failure)
	}
}

// interruption is the error a call ends with when it ends before its execution: this
// replica ends it (its drain), or the client left or stopped reading. A keyed call can
// be retried with its key, which re-attaches to the execution.
func interruption(keyed bool) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderUnavailable, "the call ended before its execution; retry with the same Idempotency-Key, or read the execution by its id")
	e.Retryable = keyed
	return e
}

// interrupted ends a call whose Follow failed with err (spec/compat.md, "Client
// disconnects"). Unless the execution's end was already folded (only writing it
// failed), the execution is cancelled when the call carried no Idempotency-Key, so that
// a dropped call stops spending; with a key it keeps running, and a retry with the key
// re-attaches. A client still there is told: with the interruption, or, for a store
// failure, its classified error — as an HTTP error, or an error event once the stream's
// head is out. For a client that left, the write fails harmlessly.
func (h *handler) interrupted(w http.ResponseWriter, r *http.Request, st *compat.Stream, sub compat.Submission, p *projection, head bool, err error) {
	if p.terminal {
		return
	}
	if !sub.Keyed {
		if _, cerr := h.kit.Cancel(r.Context(), sub.ID); cerr != nil {
			h.kit.Logger().V(1).Info("Cannot cancel the execution of a dropped front-door call", "execution", sub.ID, "reason", cerr.Error())
		}
	}
	pe := interruption(sub.Keyed)
	status := failureStatus(pe)
	if r.Context().Err() == nil && !isWriteError(err) {
		status, pe = h.kit.Classify(r, err)
	}
	if head {
		_ = st.Write(appendErrorFrame(nil, status, pe))
		return
	}
	h.answerError(w, st, status, pe)
}

// isWriteError reports whether err is the failure of a write to the client.
func isWriteError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, http.ErrHandlerTimeout)
}

// appendErrorFrame appends the error event that ends a failed stream.
func appendErrorFrame(out []byte, status int, e *protocol.Error) []byte {
	return appendFrame(out, "error", func(b []byte) []byte { return appendError(b, status, e) })
}

// answerError writes e with status as the server's error path does, Retry-After
// included, through the stream writer: the answer may come long after the server's
// write deadline for the request.
func (h *handler) answerError(w http.ResponseWriter, st *compat.Stream, status int, e *protocol.Error) {
	if e.RetryAfterMs > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt((e.RetryAfterMs+999)/1000, 10))
	}
	body := errorResponse(w, status, e)
	w.WriteHeader(status)
	_ = st.Write(body) // a failed write means the client is gone
}
