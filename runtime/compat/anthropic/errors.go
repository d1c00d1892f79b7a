package anthropic

import (
	"net/http"
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Anthropic's error types (spec/compat.md, "Anthropic Messages", "Errors"): the nearest
// one for each HTTP status the runtime answers with.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typeOverloaded     = "overloaded_error"
	typeAPI            = "api_error"
)

// errorType is Anthropic's error type for an error answered with status.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return typeAuthentication
	case status == http.StatusForbidden:
		return typePermission
	case status == http.StatusNotFound:
		return typeNotFound
	case status == http.StatusTooManyRequests:
		return typeRateLimit
	case status == http.StatusServiceUnavailable:
		return typeOverloaded
	case status >= 500:
		return typeAPI
	default: // 400, 405, 409, 413, 415, 422
		return typeInvalidRequest
	}
}

// appendError appends e in Anthropic's error shape,
// {"type":"error","error":{"type","message","switchboard":{…}}}, as status answers it:
// the body of an error response, and the data of a stream's error event. The
// switchboard member carries what Anthropic's shape has no field for: the portable
// code, whether resubmitting is sensible, and the retry delay. Every value is one of
// ours (a fixed message, a code of the closed set), never caller content.
func appendError(dst []byte, status int, e *protocol.Error) []byte {
	dst = append(dst, `{"type":"error","error":{"type":"`...)
	dst = append(dst, errorType(status)...)
	dst = append(dst, `","message":`...)
	dst = protocol.AppendJSONString(dst, e.Message)
	dst = append(dst, `,"switchboard":{"code":`...)
	dst = protocol.AppendJSONString(dst, string(e.Code))
	dst = append(dst, `,"retryable":`...)
	dst = strconv.AppendBool(dst, e.Retryable)
	if e.RetryAfterMs > 0 {
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, e.RetryAfterMs, 10)
	}
	return append(dst, "}}}"...)
}

// writeError answers e in Anthropic's shape with status (compat.Route.WriteError).
func writeError(w http.ResponseWriter, status int, e *protocol.Error) {
	body := errorResponse(w, status, e)
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client is gone
}

// errorResponse sets the headers of e's answer with status and returns its body. The
// x-should-retry header, which the Anthropic SDKs obey before their own status rules,
// carries e's retryable flag, so an SDK retries what the runtime calls retryable — a 503
// of a provider outage — and not what it does not — a deadline already spent, or a
// failure after output.
func errorResponse(w http.ResponseWriter, status int, e *protocol.Error) []byte {
	body := appendError(make([]byte, 0, 192), status, e)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Should-Retry", strconv.FormatBool(e.Retryable))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return body
}
