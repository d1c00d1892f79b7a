package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// OpenAI's Responses API (spec/compat.md, "OpenAI Responses"): each POST /v1/responses
// is an execution whose id is the response's id, answered at once (background), when it
// ends, or as a stream of Responses events projected from its log (respProjection). The
// response is read back, streamed again from any sequence number, cancelled and deleted
// through the execution; nothing is kept beside it.

// Errors of the Responses endpoints. Messages are fixed: they never echo the request.
var (
	errRespUnknownModel = protocol.NewError(protocol.CodeNotFound, "model: no such model, or the caller may not use it")
	errRespInternal     = protocol.NewError(protocol.CodeInternal, "internal error")
)

// respCancelWait bounds how long a cancel waits for the execution to end, so that its
// answer says cancelled, as OpenAI's does; an execution still stopping then is answered
// as it is (in_progress), and ends shortly after.
const respCancelWait = 10 * time.Second

// respCoalesce bounds the frames written to a stream in one write.
const respCoalesce = 64 << 10

// responsesDoor serves the Responses endpoints through kit.
type responsesDoor struct {
	kit compat.Kit
}

// responsesRoutes returns the Responses endpoints.
func responsesRoutes(k compat.Kit) []compat.Route {
	h := &responsesDoor{kit: k}
	return []compat.Route{
		{Pattern: "POST /v1/responses", Handle: h.create, WriteError: writeError},
		{Pattern: "GET /v1/responses/{id}", Handle: h.get, WriteError: writeError},
		{Pattern: "DELETE /v1/responses/{id}", Handle: h.remove, WriteError: writeError},
		{Pattern: "POST /v1/responses/{id}/cancel", Handle: h.cancel, WriteError: writeError},
	}
}

// create is POST /v1/responses: decode and translate, resolve the model, submit, and
// answer by the request's mode.
func (h *responsesDoor) create(w http.ResponseWriter, r *http.Request) error {
	body, err := h.kit.ReadBody(w, r)
	if err != nil {
		return err
	}
	req, err := decodeResponsesRequest(body)
	if err != nil {
		return err
	}
	m, ok, err := h.kit.Model(r.Context(), req.model)
	if err != nil {
		return err
	}
	if !ok {
		return errRespUnknownModel
	}
	req.native.Ability = m.Ability
	if m.Deployment != "" {
		req.native.Routing = &protocol.Routing{Only: []string{m.Deployment}}
	}
	native, err := json.Marshal(&req.native)
	if err != nil {
		return errRespInternal // only our own types are encoded
	}
	sub, err := h.kit.Submit(w, r, native, body)
	if err != nil {
		return err
	}
	w.Header().Set(compat.ExecutionHeader, sub.ID)
	if sub.Replayed {
		// A replay may name an execution removed since (deleted, or past its
		// retention): that is answered before any stream opens.
		if _, err := h.kit.Status(r.Context(), sub.ID); err != nil {
			return err
		}
		w.Header().Set("Idempotent-Replayed", "true")
	}
	out := h.kit.NewStream(w)
	// The answer may come long after the body was read: lift the server's read
	// deadline, whose end would otherwise end the request's context.
	if err := out.Open(); err != nil {
		return err
	}
	// Without background, a caller that leaves stops the execution unless it may come
	// back for it with its Idempotency-Key (spec/compat.md, "OpenAI Responses":
	// "Disconnects").
	cancelOnLeave := !req.background && !sub.Keyed
	view := respView{id: sub.ID, createdAt: sub.CreatedAt, metadata: req.native.Metadata}
	switch {
	case req.stream:
		h.stream(w, r, out, newRespProjection(view, -1), cancelOnLeave)
		return nil
	case req.background:
		v, err := h.view(r.Context(), sub.ID)
		if err != nil {
			return err
		}
		return h.answer(w, out, v)
	}
	err = h.kit.Follow(r.Context(), sub.ID, 0, func([]protocol.Event) error { return nil }, nil)
	if err != nil {
		if r.Context().Err() != nil && cancelOnLeave {
			h.leave(r, sub.ID)
		}
		return err
	}
	v, err := h.view(r.Context(), sub.ID)
	if err != nil {
		return err
	}
	if status, pe, ok := respFailure(v); ok {
		return h.writeError(w, out, status, pe)
	}
	return h.answer(w, out, v)
}

// respFailure is the HTTP error a failed execution is answered with when it was waited
// for (neither background nor streamed): its code's status, so that the SDKs raise
// their typed errors and retry what is retryable. The codes without an HTTP status —
// cancelled (by a cancel request), output_too_large and content_filtered, which only
// end executions — are answered with the response object and its error instead.
func respFailure(v *respView) (int, *protocol.Error, bool) {
	if v.status != respFailed || v.err == nil {
		return 0, nil, false
	}
	switch v.err.Code {
	case protocol.CodeOutputTooLarge, protocol.CodeContentFiltered, protocol.CodeCancelled:
		return 0, nil, false
	}
	return v.err.Code.HTTPStatus(), v.err, true
}

// get is GET /v1/responses/{id}: the response as it is now or, with stream=true (in
// the query, or in the body as openai-go sends it), its events after starting_after.
func (h *responsesDoor) get(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	q, err := parseGetQuery(r.URL.Query())
	if err != nil {
		return err
	}
	inBody, err := decodeGetBody(r.Body)
	if err != nil {
		return err
	}
	// A HEAD gets the head of the object's answer: a stream's would last until the end.
	stream := (q.stream || inBody) && r.Method != http.MethodHead
	if q.startingAfter >= 0 && !stream && r.Method != http.MethodHead {
		return respInvalid(rpStartingAfter, rrNeedsStream)
	}
	st, err := h.kit.Status(r.Context(), id)
	if err != nil {
		return err
	}
	out := h.kit.NewStream(w)
	if err := out.Open(); err != nil {
		return err
	}
	w.Header().Set(compat.ExecutionHeader, id)
	if !stream {
		snap, err := h.kit.Snapshot(r.Context(), id)
		if err != nil {
			return err
		}
		return h.answer(w, out, responseFromStatus(st, &snap))
	}
	es := engine.StatusOf(st)
	view := respView{id: id, createdAt: es.CreatedAt, metadata: es.Metadata}
	h.stream(w, r, out, newRespProjection(view, q.startingAfter), false)
	return nil
}

// cancel is POST /v1/responses/{id}/cancel: idempotent, answered with the response,
// cancelled once the execution has ended (within respCancelWait).
func (h *responsesDoor) cancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	out := h.kit.NewStream(w)
	if err := out.Open(); err != nil {
		return err
	}
	c, err := h.kit.Cancel(r.Context(), id)
	if err != nil {
		return err
	}
	if !c.AlreadyTerminal && !c.Terminal {
		ctx, stop := context.WithTimeout(r.Context(), respCancelWait)
		// Ending without the terminal event only means an answer of in_progress.
		_ = h.kit.Follow(ctx, id, c.LastSequence, func([]protocol.Event) error { return nil }, nil)
		stop()
	}
	w.Header().Set(compat.ExecutionHeader, id)
	v, err := h.view(r.Context(), id)
	if err != nil {
		return err
	}
	return h.answer(w, out, v)
}

// remove is DELETE /v1/responses/{id}: the execution is removed from every read, native
// ones included, as when its retention ends; a running one is cancelled first.
func (h *responsesDoor) remove(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	out := h.kit.NewStream(w)
	if err := out.Open(); err != nil {
		return err
	}
	if err := h.kit.Remove(r.Context(), id); err != nil {
		return err
	}
	w.Header().Set(compat.ExecutionHeader, id)
	return h.writeJSON(w, out, http.StatusOK, deletedBody(id))
}

// view reads the response of execution id: its status, then its result snapshot.
func (h *responsesDoor) view(ctx context.Context, id string) (*respView, error) {
	st, err := h.kit.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	snap, err := h.kit.Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	return responseFromStatus(st, &snap), nil
}

// stream writes the projection of execution id's events as an event stream until its
// terminal event. Once the head is written a failure can only end the stream: a store
// failure or shutdown closes it, and a caller that left cancels the execution when
// cancelOnLeave.
func (h *responsesDoor) stream(w http.ResponseWriter, r *http.Request, out *compat.Stream, p *respProjection, cancelOnLeave bool) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // keep reverse proxies (nginx) from buffering frames
	w.WriteHeader(http.StatusOK)
	var left bool // a write failed: the caller is gone or stopped reading
	write := func(b []byte) error {
		err := out.Write(b)
		left = left || err != nil
		return err
	}
	if write(nil) != nil { // the head, so that the caller sees the stream open
		h.leaveIf(r, p.view.id, cancelOnLeave)
		return
	}
	buf := make([]byte, 0, 4<<10)
	err := h.kit.Follow(r.Context(), p.view.id, 0, func(events []protocol.Event) error {
		buf = buf[:0]
		for i := range events {
			buf = p.apply(buf, &events[i])
			if len(buf) >= respCoalesce {
				if err := write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
		if len(buf) == 0 {
			return nil
		}
		return write(buf)
	}, func() error { return write(respKeepAlive) })
	if err == nil {
		return
	}
	if left || r.Context().Err() != nil {
		h.leaveIf(r, p.view.id, cancelOnLeave)
		return
	}
	h.kit.Logger().V(1).Info("Responses stream ended early", "execution", p.view.id, "reason", errReason(err))
}

// leaveIf cancels execution id for a caller that left, when cancel is set.
func (h *responsesDoor) leaveIf(r *http.Request, id string, cancel bool) {
	if cancel {
		h.leave(r, id)
	}
}

// leave cancels execution id because its caller left before it ended.
func (h *responsesDoor) leave(r *http.Request, id string) {
	if _, err := h.kit.Cancel(context.WithoutCancel(r.Context()), id); err != nil {
		h.kit.Logger().Error(err, "Cannot cancel the execution of a caller that left", "execution", id)
	}
}

// errReason names why a stream ended for the log, never with caller content.
func errReason(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "store"
}

// answer writes the response v.
func (h *responsesDoor) answer(w http.ResponseWriter, out *compat.Stream, v *respView) error {
	return h.writeJSON(w, out, http.StatusOK, appendResponse(make([]byte, 0, 1024), v))
}

// writeError writes e in OpenAI's shape with status, after a wait: through out, whose
// write deadline starts now.
func (h *responsesDoor) writeError(w http.ResponseWriter, out *compat.Stream, status int, e *protocol.Error) error {
	if e.RetryAfterMs > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt((e.RetryAfterMs+999)/1000, 10))
	}
	// The OpenAI SDKs retry on their own unless told (errorResponse).
	w.Header().Set("X-Should-Retry", strconv.FormatBool(e.Retryable))
	body, err := json.Marshal(newErrorBody(status, e, nil))
	if err != nil {
		return errRespInternal
	}
	return h.writeJSON(w, out, status, body)
}

// writeJSON writes a JSON body with status through out. A failed write means the
// caller is gone: there is nobody to tell.
func (h *responsesDoor) writeJSON(w http.ResponseWriter, out *compat.Stream, status int, body []byte) error {
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_ = out.Write(body)
	return nil
}

// getQuery is the query of GET /v1/responses/{id}.
type getQuery struct {
	stream        bool
	startingAfter int64 // -1 when absent
}

var (
	rpQuery              = newRespPath("query")
	rpStartingAfter      = newRespPath("starting_after")
	rpInclude            = newRespPath("include")
	rpIncludeObfuscation = newRespPath("include_obfuscation")

	rrQueryBool    = newRespRule("must be true or false")
	rrCursor       = newRespRule("must be a non-negative integer")
	rrNeedsStream  = newRespRule("requires stream=true")
	rrUnknownParam = newRespRule("unknown parameter")
	rrRepeated     = newRespRule("must be given once")
)

// parseGetQuery reads the query parameters the SDKs send: stream, starting_after and
// include_obfuscation (accepted; the door adds no obfuscation). include asks for output
// the door does not produce.
func parseGetQuery(q url.Values) (getQuery, error) {
	g := getQuery{startingAfter: -1}
	for key, vals := range q {
		var at respPath
		switch key {
		case "stream":
			at = rpStream
		case "starting_after":
			at = rpStartingAfter
		case "include_obfuscation":
			at = rpIncludeObfuscation
		case "include", "include[]":
			return g, respInvalid(rpInclude, rrUnsupported)
		default:
			return g, respInvalid(rpQuery, rrUnknownParam)
		}
		if len(vals) != 1 {
			return g, respInvalid(at, rrRepeated)
		}
		v := vals[0]
		switch key {
		case "stream", "include_obfuscation":
			b, err := strconv.ParseBool(v)
			if err != nil || (v != "true" && v != "false") {
				return g, respInvalid(at, rrQueryBool)
			}
			if key == "stream" {
				g.stream = b
			}
		case "starting_after":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || v != strconv.FormatInt(n, 10) {
				return g, respInvalid(at, rrCursor)
			}
			g.startingAfter = n
		}
	}
	return g, nil
}
