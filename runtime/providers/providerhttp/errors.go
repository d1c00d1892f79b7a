// Package providerhttp holds what every provider adapter shares, so that an adapter
// package holds only its wire format: the one call path (Do: build, send, the status
// check, body bounds, transport errors), the client and its endpoint fence (Fence,
// NewClient; spec/modeldeployments.md, "Endpoint"), mapping a provider's HTTP failure
// (status, error type/code, retry headers) to a portable protocol.Error
// (spec/http-api.md, "Errors") with fixed, content-free messages, recording an answer's
// events (Events), registering an adapter with the engine (Register, Factory,
// CheckEncode), and the one screening rule for what adapters copy from an answer
// (Identifier, ToolName). Adapters add only their provider-specific rules (which error
// types mean quota, which mean a refusal).
package providerhttp

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Failure describes one failed provider response, as an adapter parsed it. Only
// identifiers are kept — never a message, body, URL or credential.
type Failure struct {
	// Provider is the provider name, for provider_error.provider.
	Provider string
	// Status is the HTTP status, 0 for in-stream errors after a 200.
	Status int
	// Type and Code are the provider's own error type and code, if any (kept only
	// under provider_error as diagnostic evidence).
	Type string
	Code string
	// RequestID is the provider's request id header, if any.
	RequestID string
	// Header is the response header, for retry hints; may be nil.
	Header http.Header
	// QuotaExhausted marks a 429 that means billing/quota, not a rate limit: the adapter
	// decides from the provider's documented error type or code.
	QuotaExhausted bool
	// ContentFiltered marks a safety refusal.
	ContentFiltered bool
	// Rejected marks an error the provider documents as the deployment's problem whatever
	// its status (Google answers a refused API key with 400), mapped to
	// provider_rejected.
	Rejected bool
	// RetryAfter is a retry hint the provider gave in its error body (Google's
	// RetryInfo), used when no retry header gives one.
	RetryAfter time.Duration
	// RateLimited marks an error the provider documents as throttling whatever its
	// status (Bedrock's ServiceQuotaExceededException is a 400), mapped to rate_limited.
	RateLimited bool
	// Overloaded marks a provider-specific overload signal (e.g. Anthropic 529 or an
	// in-stream overloaded_error), mapped to provider_unavailable.
	Overloaded bool
	// InStream marks an error reported inside a response that began with 200 (an error
	// event or frame): Status, when set, is the status the provider documents for the
	// error's type and decides the code, but provider_error carries no http_status.
	InStream bool
	// AfterOutput marks a failure after the attempt emitted output: it is never
	// retryable and carries no retry hint (spec/http-api.md, "Errors").
	AfterOutput bool
}

// Error maps f to the portable error: 400/413/422 ⇒ invalid_request; 401/403/404 ⇒
// provider_rejected (an operator problem: credential, permission or model id); 408 ⇒
// provider_timeout; 429 ⇒ rate_limited, or quota_exhausted when f says so; 5xx and 529
// ⇒ provider_unavailable. Retry hints (retry-after-ms, retry-after in seconds or as an
// HTTP date, x-should-retry) are honoured.
func (f Failure) Error() *protocol.Error {
	var code protocol.Code
	switch s := f.Status; {
	case f.ContentFiltered:
		code = protocol.CodeContentFiltered
	case f.QuotaExhausted:
		code = protocol.CodeQuotaExhausted
	case f.Overloaded:
		code = protocol.CodeProviderUnavailable
	case f.RateLimited:
		code = protocol.CodeRateLimited
	case f.Rejected:
		code = protocol.CodeProviderRejected
	case s == http.StatusBadRequest, s == http.StatusRequestEntityTooLarge, s == http.StatusUnprocessableEntity:
		code = protocol.CodeInvalidRequest
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusNotFound:
		code = protocol.CodeProviderRejected
	case s == http.StatusRequestTimeout:
		code = protocol.CodeProviderTimeout
	case s == http.StatusTooManyRequests:
		code = protocol.CodeRateLimited
	case s >= 500:
		code = protocol.CodeProviderUnavailable
	case s == 0:
		code = protocol.CodeProviderUnavailable
	default:
		code = protocol.CodeProviderRejected
	}
	e := protocol.NewError(code, messages[code])
	e.ProviderError = &protocol.ProviderError{
		Provider:   f.Provider,
		HTTPStatus: f.Status,
		Type:       identifier(f.Type),
		Code:       identifier(f.Code),
		RequestID:  identifier(f.RequestID),
	}
	if ms, ok := RetryAfter(f.Header, time.Now()); ok && e.Retryable {
		e.RetryAfterMs = ms.Milliseconds()
	} else if f.RetryAfter > 0 && e.Retryable {
		e.RetryAfterMs = f.RetryAfter.Milliseconds()
	}
	// x-should-retry: false lowers the status-based verdict; a hint never raises it for
	// a code the table marks not retryable (spec/http-api.md, "Errors"), so "true" on a
	// 401 cannot trigger a fallback.
	if f.AfterOutput || strings.EqualFold(strings.TrimSpace(f.Header.Get("x-should-retry")), "false") {
		e.Retryable = false
		e.RetryAfterMs = 0
	}
	if f.InStream {
		e.ProviderError.HTTPStatus = 0
	}
	return e
}

// messages are the fixed public messages per code; nothing from the provider is echoed.
var messages = map[protocol.Code]string{
	protocol.CodeInvalidRequest:      "the provider rejected the request as invalid",
	protocol.CodeProviderRejected:    "the provider rejected the deployment's credentials, permissions or model",
	protocol.CodeProviderTimeout:     "the provider timed out",
	protocol.CodeRateLimited:         "the provider is rate limiting requests",
	protocol.CodeQuotaExhausted:      "the provider account's quota is exhausted",
	protocol.CodeProviderUnavailable: "the provider is unavailable",
	protocol.CodeContentFiltered:     "the provider refused the content",
}

// identifier keeps a provider-supplied identifier only if it looks like one (short,
// no spaces or URL characters), so a provider cannot smuggle free text — or an echoed
// credential — into provider_error.
func identifier(s string) string { return Identifier(s) }

// Identifier returns s, a provider-supplied identifier (request or response id, error
// type or code, finish reason, model version, tool call id, job id), if it looks like
// one — 1 to 128 bytes of ASCII letters, digits and '_', '-', '.', ':' — and contains
// none of secrets (every part of the deployment's credential, echoed back by a hostile
// or broken upstream; empty ones are ignored). Otherwise it returns "": provider free
// text, or the credential, never reaches an event, an error or a log line through an
// identifier. It is the one rule every adapter applies to what it copies from an answer.
func Identifier(s string, secrets ...string) string {
	if len(s) == 0 || len(s) > 128 || holdsSecret(s, secrets) {
		return ""
	}
	for _, r := range s {
		ok := r == '_' || r == '-' || r == '.' || r == ':' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return ""
		}
	}
	return s
}

// toolNameRE is the protocol's grammar of a tool call name.
var toolNameRE = regexp.MustCompile(protocol.ToolNamePattern)

// ToolName returns name, a tool call's name from a provider's answer, if it is a tool
// name (protocol.ToolNamePattern) and contains none of secrets, as Identifier; otherwise
// "". A call whose name fails cannot be reported: adapters treat its answer as
// unreadable.
func ToolName(name string, secrets ...string) string {
	if !toolNameRE.MatchString(name) || holdsSecret(name, secrets) {
		return ""
	}
	return name
}

// holdsSecret reports whether s contains one of the non-empty secrets.
func holdsSecret(s string, secrets []string) bool {
	for _, secret := range secrets {
		if secret != "" && strings.Contains(s, secret) {
			return true
		}
	}
	return false
}

// RetryAfter reads the provider's retry hint: retry-after-ms, else retry-after as seconds
// or an HTTP date (relative to now).
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 24*3600*1000 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("retry-after"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 24*3600 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}

// Cause strips the *url.Error wrapper of a transport failure, whose text names the
// request URL (which may carry a query string), leaving the network cause: the only
// form of a transport error an adapter may log.
func Cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// TransportError maps an error from sending the request or reading the response (not an
// HTTP status) to a portable error, with a fixed message: the Go error text may contain
// the endpoint URL and is never surfaced. A dial the Fence refused is Refused. ctx is
// the attempt's context: when it ended, the engine decides between cancelled, deadline
// and attempt timeout, so the error here only needs to be retryable.
func TransportError(ctx context.Context, provider string, err error) *protocol.Error {
	if IsRefused(err) {
		return Refused(provider)
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		e := protocol.NewError(protocol.CodeProviderTimeout, "the provider did not answer in time")
		e.ProviderError = &protocol.ProviderError{Provider: provider}
		return e
	}
	e := protocol.NewError(protocol.CodeProviderUnavailable, "the provider could not be reached")
	e.ProviderError = &protocol.ProviderError{Provider: provider}
	return e
}

// Truncated is the error for a stream that ended without its terminal marker. It is
// retryable only when no output was emitted (after output the engine does not fall back
// anyway, but the flag tells callers the truth).
func Truncated(provider string, emittedOutput bool) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderUnavailable, "the provider's stream ended early")
	e.Retryable = !emittedOutput
	e.ProviderError = &protocol.ProviderError{Provider: provider}
	return e
}

// Unreadable is the error for an answer that is not the provider's documented format
// (JSON that does not parse, a frame with a bad checksum, a chunk larger than its bound,
// a tool call without an id). Like a truncated stream it is the provider's fault:
// provider_unavailable, retryable only when no output was emitted.
func Unreadable(provider, requestID string, emittedOutput bool) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderUnavailable, "the provider's response could not be read")
	e.Retryable = !emittedOutput
	e.ProviderError = &protocol.ProviderError{Provider: provider, RequestID: requestID}
	return e
}
