package protocol

import (
	"errors"
	"net/http"
)

// Code is a portable error code from the closed set of spec/http-api.md, "Errors".
type Code string

const (
	CodeInvalidRequest        Code = "invalid_request"
	CodeRequestTooLarge       Code = "request_too_large"
	CodeUnsupportedCapability Code = "unsupported_capability"
	CodeIdempotencyKeyReused  Code = "idempotency_key_reused"
	CodeNotFound              Code = "not_found"
	CodeUnauthenticated       Code = "unauthenticated"
	CodePermissionDenied      Code = "permission_denied"
	CodeConflict              Code = "conflict"
	CodeRateLimited           Code = "rate_limited"
	CodeQuotaExhausted        Code = "quota_exhausted"
	CodeProviderUnavailable   Code = "provider_unavailable"
	CodeProviderTimeout       Code = "provider_timeout"
	CodeProviderRejected      Code = "provider_rejected"
	CodeDeadlineExceeded      Code = "deadline_exceeded"
	CodeOutputTooLarge        Code = "output_too_large"
	CodeCancelled             Code = "cancelled"
	CodeContentFiltered       Code = "content_filtered"
	CodeInternal              Code = "internal"
)

type codeInfo struct {
	status    int // 0: asynchronous only
	retryable bool
}

var codes = map[Code]codeInfo{
	CodeInvalidRequest:        {http.StatusBadRequest, false},
	CodeRequestTooLarge:       {http.StatusRequestEntityTooLarge, false},
	CodeUnsupportedCapability: {http.StatusUnprocessableEntity, false},
	CodeIdempotencyKeyReused:  {http.StatusUnprocessableEntity, false},
	CodeNotFound:              {http.StatusNotFound, false},
	CodeUnauthenticated:       {http.StatusUnauthorized, false},
	CodePermissionDenied:      {http.StatusForbidden, false},
	CodeConflict:              {http.StatusConflict, true},
	CodeRateLimited:           {http.StatusTooManyRequests, true},
	CodeQuotaExhausted:        {http.StatusTooManyRequests, false},
	CodeProviderUnavailable:   {http.StatusServiceUnavailable, true},
	CodeProviderTimeout:       {http.StatusGatewayTimeout, true},
	CodeProviderRejected:      {http.StatusBadGateway, false},
	CodeDeadlineExceeded:      {http.StatusGatewayTimeout, false},
	CodeOutputTooLarge:        {0, false},
	CodeCancelled:             {0, false},
	CodeContentFiltered:       {0, false},
	CodeInternal:              {http.StatusInternalServerError, false},
}

// Known reports whether c is in the closed set.
func (c Code) Known() bool { _, ok := codes[c]; return ok }

// HTTPStatus is the status a synchronous error with this code is answered with. Codes
// that only occur asynchronously (output_too_large, cancelled, content_filtered) and
// unknown codes map to 500.
func (c Code) HTTPStatus() int {
	if info, ok := codes[c]; ok && info.status != 0 {
		return info.status
	}
	return http.StatusInternalServerError
}

// Retryable is the contract's default retryability of c.
func (c Code) Retryable() bool { return codes[c].retryable }

// ProviderError is diagnostic evidence from the provider. It is the only place where a
// provider's own codes appear.
type ProviderError struct {
	Provider   string `json:"provider"`
	HTTPStatus int    `json:"http_status,omitempty"`
	Type       string `json:"type,omitempty"`
	Code       string `json:"code,omitempty"`
	RequestID  string `json:"request_id,omitempty"`
}

// Error is the portable error of spec/http-api.md, "Errors": the "error" member of an
// error body, of route.attempt_failed and execution.failed, and of an execution's status.
// Message is a fixed template: it never holds caller content, credentials or dependency
// error text.
type Error struct {
	Code          Code           `json:"code"`
	Message       string         `json:"message"`
	Retryable     bool           `json:"retryable"`
	RetryAfterMs  int64          `json:"retry_after_ms,omitempty"`
	ProviderError *ProviderError `json:"provider_error,omitempty"`
}

// NewError returns an Error with the code's default retryability.
func NewError(code Code, message string) *Error {
	return &Error{Code: code, Message: message, Retryable: code.Retryable()}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Clone returns a deep copy of e (nil for nil), so that whoever keeps or changes one
// cannot change the other.
func (e *Error) Clone() *Error {
	if e == nil {
		return nil
	}
	c := *e
	if e.ProviderError != nil {
		p := *e.ProviderError
		c.ProviderError = &p
	}
	return &c
}

// AsError returns the portable error in err's chain, or an internal error with a fixed
// message when there is none (so dependency error text never reaches a caller).
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return NewError(CodeInternal, "internal error")
}

// ErrorBody is the JSON body of a synchronous error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}
