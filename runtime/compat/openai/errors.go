package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// errorBody is OpenAI's error shape (spec/compat.md, "Errors"), with the portable
// retry facts in the switchboard member.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message     string          `json:"message"`
	Type        string          `json:"type"`
	Param       *string         `json:"param"`
	Code        protocol.Code   `json:"code"`
	Switchboard switchboardInfo `json:"switchboard"`
}

// switchboardInfo carries what OpenAI's shape has no field for.
type switchboardInfo struct {
	Retryable    bool  `json:"retryable"`
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// errorType is OpenAI's nearest error type for a portable error answered with status.
func errorType(status int, code protocol.Code) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests && code == protocol.CodeQuotaExhausted:
		return "insufficient_quota"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default: // 400, 405, 409, 413, 415, 422
		return "invalid_request_error"
	}
}

// newErrorBody is e in OpenAI's shape, answered with status; param, when not nil, is
// the request location it refuses.
func newErrorBody(status int, e *protocol.Error, param *string) errorBody {
	return errorBody{Error: errorObject{
		Message:     e.Message,
		Type:        errorType(status, e.Code),
		Param:       param,
		Code:        e.Code,
		Switchboard: switchboardInfo{Retryable: e.Retryable, RetryAfterMs: e.RetryAfterMs},
	}}
}

// statusOf is the HTTP status of a failure of an execution, answered as an error: its
// code's (spec/http-api.md, "Errors"), 500 for the codes that have none (cancelled,
// output_too_large).
func statusOf(e *protocol.Error) int { return e.Code.HTTPStatus() }

// writeError answers e in OpenAI's shape with status (compat.Route.WriteError).
func writeError(w http.ResponseWriter, status int, e *protocol.Error) {
	_, _ = w.Write(errorResponse(w, status, e, nil))
}

// errorResponse sets the headers and status of answering e with status and returns the
// body to write. Besides Retry-After, it says x-should-retry: the OpenAI SDKs retry
// 408, 409, 429 and 5xx answers on their own unless told otherwise, and e says whether
// resubmitting is safe and sensible.
func errorResponse(w http.ResponseWriter, status int, e *protocol.Error, param *string) []byte {
	body, err := json.Marshal(newErrorBody(status, e, param))
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal","switchboard":{"retryable":false}}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Should-Retry", strconv.FormatBool(e.Retryable))
	if e.RetryAfterMs > 0 {
		// Whole seconds, rounded up so that a client never retries early.
		h.Set("Retry-After", strconv.FormatInt((e.RetryAfterMs+999)/1000, 10))
	}
	w.WriteHeader(status)
	return body
}

// The Chat Completions decoder reads a body with the front doors' shared walker
// (compat.Walker), which names the OpenAI schema location of every refusal as OpenAI's
// own param does: "messages[2].content[0].type". A member the schema does not know is
// refused at its parent's location ("messages[2]: unknown field"), never with its name,
// which the caller chose.

// refuse is the refusal of location param violating rule, a fixed text.
func refuse(param, rule string) *compat.Refusal { return compat.Refuse(param, rule) }

// withParam serves h, answering a refusal of its request with the refused location as
// the error's param, which OpenAI's SDKs expose; the server answers any other error.
func withParam(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		err := h(w, r)
		var re *compat.Refusal
		if errors.As(err, &re) {
			_, _ = w.Write(errorResponse(w, http.StatusBadRequest, re.Err, &re.Loc))
			return nil
		}
		return err
	}
}
