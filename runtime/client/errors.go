package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Error is an error answered by the server: its HTTP status and the portable error of the
// body (spec/http-api.md, "Errors"). errors.As(err, &*protocol.Error) finds the portable
// error too.
type Error struct {
	// StatusCode is the HTTP status of the response.
	StatusCode int
	// Protocol is the portable error: code, fixed message, retryability.
	Protocol *protocol.Error
	// RetryAfter is the server's hint from retry_after_ms or the Retry-After header; 0
	// when there was none.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("switchboard: HTTP %d: %s: %s", e.StatusCode, e.Protocol.Code, e.Protocol.Message)
}

// Unwrap returns the portable error.
func (e *Error) Unwrap() error { return e.Protocol }

// Code is the portable error code.
func (e *Error) Code() protocol.Code { return e.Protocol.Code }

// Retryable reports whether repeating the same call later may succeed.
func (e *Error) Retryable() bool { return e.Protocol.Retryable }

// readError turns a response with an unexpected status into an *Error. A body that is not
// a Switchboard error (say, a proxy's HTML page) gets a code derived from the status, so
// callers can always switch on Code.
func readError(resp *http.Response) *Error {
	e := &Error{StatusCode: resp.StatusCode}
	var body protocol.ErrorBody
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		e.Protocol = body.Error
	} else {
		e.Protocol = &protocol.Error{
			Code:      codeForStatus(resp.StatusCode),
			Message:   "unexpected response: HTTP " + strconv.Itoa(resp.StatusCode),
			Retryable: retryableStatus(resp.StatusCode),
		}
	}
	if e.Protocol.RetryAfterMs > 0 {
		e.RetryAfter = time.Duration(e.Protocol.RetryAfterMs) * time.Millisecond
	} else if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// codeForStatus maps a status without a Switchboard body to the closest portable code.
func codeForStatus(status int) protocol.Code {
	switch status {
	case http.StatusBadRequest:
		return protocol.CodeInvalidRequest
	case http.StatusUnauthorized:
		return protocol.CodeUnauthenticated
	case http.StatusForbidden:
		return protocol.CodePermissionDenied
	case http.StatusNotFound:
		return protocol.CodeNotFound
	case http.StatusConflict:
		return protocol.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return protocol.CodeRequestTooLarge
	case http.StatusTooManyRequests:
		return protocol.CodeRateLimited
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return protocol.CodeProviderUnavailable
	case http.StatusGatewayTimeout:
		return protocol.CodeProviderTimeout
	}
	return protocol.CodeInternal
}

// retryableStatus reports whether a status without a Switchboard body is worth retrying:
// overload and gateway failures usually pass.
func retryableStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// TruncatedError reports an event stream that ended before its terminal event: the
// connection was closed (by the server, a proxy or the network) after LastSequence. No
// event was lost: reading again after LastSequence continues without gaps, which is what
// Follow does.
type TruncatedError struct {
	// LastSequence is the sequence of the last event received, or the cursor the stream
	// started after when it delivered none.
	LastSequence uint64
	// Err is the read error that ended the stream; nil for a clean end of stream.
	Err error
}

func (e *TruncatedError) Error() string {
	msg := "switchboard: event stream ended before the terminal event, after sequence " +
		strconv.FormatUint(e.LastSequence, 10)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the read error, if any.
func (e *TruncatedError) Unwrap() error { return e.Err }
