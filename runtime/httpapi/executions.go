package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// createExecution is POST /v1/executions. The checks run in the contract's order
// (spec/http-api.md, "Order of checks"): body shape and size here, then, inside
// engine.Submit, the idempotency key (a replay or a mismatch answers there, whatever the
// routing table says now), routing and creation. Nothing reaches a provider before all
// of them pass. The 202 body is rendered from what Submit returns, for a replay too.
func (s *server) createExecution(w http.ResponseWriter, r *http.Request) error {
	if !isJSON(r.Header) {
		return errNotJSON
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	req, err := protocol.DecodeRequest(body)
	if err != nil {
		return err
	}
	p := principal(r.Context())
	idem, err := s.idempotency(r.Header, p, body)
	if err != nil {
		return err
	}
	// Submit does not stop when the caller leaves: a key it reserved always gets its
	// execution or its release.
	acc, replayed, err := s.engine.Submit(r.Context(), engine.Principal{Name: p.Name, UID: p.UID, Groups: p.Groups, Visible: s.visibility(r.Context(), p)}, req, idem)
	if err != nil {
		return err
	}
	if replayed {
		s.obs.IdempotencyReplay()
	}
	token, err := s.streamToken(r.Context(), acc.ID, p, acc.CreatedAt)
	if err != nil {
		// The execution exists: an error now would make a retry without a key create a
		// second one. Its links work with the caller's own credentials; only the signed
		// token for browsers is missing.
		s.log.Error(err, "Cannot sign the stream links of an accepted execution; answering without them", "execution", acc.ID)
		token = ""
	}
	writeAccepted(w, acc.ID, appendAccepted(make([]byte, 0, acceptedSize), acc.ID, acc.CreatedAt, token), replayed)
	return nil
}

// readBody reads the request body up to the size limit.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.maxRequestBytes {
		return nil, protocol.RequestTooLarge() // refuse without reading what we would drop
	}
	body := http.MaxBytesReader(w, r.Body, s.maxRequestBytes)
	var (
		data []byte
		err  error
	)
	if r.ContentLength >= 0 {
		// The length is known and within the limit: read into one exact buffer.
		data = make([]byte, r.ContentLength)
		_, err = io.ReadFull(body, data)
	} else {
		data, err = io.ReadAll(body)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, protocol.RequestTooLarge()
		}
		return nil, errBodyUnreadable
	}
	return data, nil
}

// acceptedSize is the usual length of a 202 body, so that it is built in one allocation.
const acceptedSize = 448

// appendAccepted appends the 202 body of a new execution (spec/http-api.md, "Response"):
// {"id","status":"accepted","created_at","links":{"self","events","result","cancel"}}.
// A non-empty token (a signed stream token: URL-safe) is added to the events and result
// links as ?token=. It is built by hand because it is on every submission's path and
// its shape is fixed.
func appendAccepted(dst []byte, id string, createdAt time.Time, token string) []byte {
	query := ""
	if token != "" {
		query = "?token=" + token
	}
	escaped := url.PathEscape(id) // returns id itself, without allocating, for our ids
	dst = append(dst, `{"id":`...)
	dst = protocol.AppendJSONString(dst, id)
	dst = append(dst, `,"status":"accepted","created_at":"`...)
	dst = createdAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","links":{"self":`...)
	dst = appendLink(dst, escaped, "")
	dst = append(dst, `,"events":`...)
	dst = appendLink(dst, escaped, "/events"+query)
	dst = append(dst, `,"result":`...)
	dst = appendLink(dst, escaped, "/result"+query)
	dst = append(dst, `,"cancel":`...)
	dst = appendLink(dst, escaped, "/cancel")
	return append(dst, "}}"...)
}

// appendLink appends the JSON string "/v1/executions/<escapedID><suffix>".
func appendLink(dst []byte, escapedID, suffix string) []byte {
	dst = append(dst, `"/v1/executions/`...)
	dst = protocol.AppendJSONStringContent(dst, escapedID)
	dst = append(dst, suffix...)
	return append(dst, '"')
}

// writeAccepted answers 202 with body; a replay's is the original one again, byte for
// byte (see streamToken).
func writeAccepted(w http.ResponseWriter, id string, body []byte, replayed bool) {
	note(w).execution = id
	h := w.Header()
	h["Location"] = []string{"/v1/executions/" + url.PathEscape(id)}
	if replayed {
		h["Idempotent-Replayed"] = hvTrue
	}
	writeJSONBytes(w, http.StatusAccepted, body)
}

// getExecution is GET /v1/executions/{id}. Its status is built from one store read: the
// store folds the events as it records them, so the cost does not grow with their
// number (spec/http-api.md, "Status").
func (s *server) getExecution(w http.ResponseWriter, r *http.Request) error {
	st, err := s.accessible(r.Context(), r.PathValue("id"), auth.VerbGet)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, engine.StatusOf(st))
	return nil
}

// accessible reads execution id's status, answering not_found when the caller may not
// do verb to it (mayAccess).
func (s *server) accessible(ctx context.Context, id, verb string) (eventstore.Status, error) {
	st, granted := grantedStatus(ctx, id)
	if !granted {
		var err error
		if st, err = s.store.Get(ctx, id); err != nil {
			return eventstore.Status{}, err
		}
	}
	if err := s.mayAccess(ctx, st, verb); err != nil {
		return eventstore.Status{}, err
	}
	return st, nil
}

// getResult is GET /v1/executions/{id}/result: the snapshot of the events so far, as
// protocol.Materialize (the Go client's fold) makes it, kept up to date by the store as
// it records them, so a read costs the size of the output, not the number of events
// (spec/http-api.md, "Result").
func (s *server) getResult(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if s.auth != nil {
		if _, err := s.accessible(r.Context(), id, auth.VerbGet); err != nil {
			return err
		}
	}
	snap, err := s.store.Snapshot(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snap)
	return nil
}

// cancelExecution is POST /v1/executions/{id}/cancel: 202 with the status when the
// execution was running, 200 with the status when it was already terminal (a no-op).
// Which one it was is decided by the store when the cancel is requested (engine.Cancel's
// AlreadyTerminal), so it cannot race with the execution ending. The body is the status
// as it is after the request; cancellation itself completes asynchronously
// (execution.failed, cancelled).
func (s *server) cancelExecution(w http.ResponseWriter, r *http.Request) error {
	// Cancel takes no body; one that comes anyway, or any declared Content-Type, must be
	// JSON, so that a cross-site form post cannot cancel an execution.
	if (r.ContentLength != 0 || len(r.Header.Values("Content-Type")) > 0) && !isJSON(r.Header) {
		return errNotJSON
	}
	id := r.PathValue("id")
	// A cancel that reached the store must not be half done because the caller left.
	ctx := context.WithoutCancel(r.Context())
	if s.auth != nil {
		if _, err := s.accessible(ctx, id, auth.VerbUpdate); err != nil {
			return err
		}
	}
	c, err := s.engine.Cancel(ctx, id)
	if err != nil {
		return err
	}
	code := http.StatusAccepted
	if c.AlreadyTerminal {
		code = http.StatusOK
	}
	writeJSON(w, code, engine.StatusOf(c.Status))
	return nil
}

// isJSON reports whether the request declares exactly one Content-Type, and it is
// application/json (parameters such as charset allowed).
func isJSON(h http.Header) bool {
	vals := h.Values("Content-Type")
	if len(vals) != 1 {
		return false
	}
	mt, _, err := mime.ParseMediaType(vals[0])
	return err == nil && mt == "application/json"
}
