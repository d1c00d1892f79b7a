package openai

import (
	"encoding/json"
	"net/http"
	"strconv"

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

// newErrorBody is e in OpenAI's shape, answered with status.
func newErrorBody(status int, e *protocol.Error) errorBody {
	return errorBody{Error: errorObject{
		Message:     e.Message,
		Type:        errorType(status, e.Code),
		Code:        e.Code,
		Switchboard: switchboardInfo{Retryable: e.Retryable, RetryAfterMs: e.RetryAfterMs},
	}}
}

// writeError answers e in OpenAI's shape with status (compat.Route.WriteError).
func writeError(w http.ResponseWriter, status int, e *protocol.Error) {
	body, err := json.Marshal(newErrorBody(status, e))
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal","switchboard":{"retryable":false}}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
