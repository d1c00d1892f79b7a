package anthropic

import (
	"encoding/json"
	"net/http"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// Error types and codes with a mapping of their own (Anthropic's errors reference).
const (
	errTypeOverloaded = "overloaded_error"
	errTypeBilling    = "billing_error"
	// errCodeSpendLimit is error.details.error_code of a 429 for the usage tier's monthly
	// spend cap: a rate_limit_error that retrying does not clear.
	errCodeSpendLimit = "enforced_spend_limit_reached"
	statusOverloaded  = 529
)

// apiError is the error object of an error body or an in-stream error event. Its message
// is never read: it is free text that may echo request content or the credential.
type apiError struct {
	Type    string `json:"type"`
	Details *struct {
		ErrorCode string `json:"error_code"`
	} `json:"details"`
}

// errorBody is the body of a failed response:
// {"type":"error","error":{"type":…,"message":…},"request_id":…}.
type errorBody struct {
	Error     apiError `json:"error"`
	RequestID string   `json:"request_id"`
}

// httpFailure maps a non-2xx response. Only identifiers are read from the body (error
// type, details.error_code, request_id); a body that is not the documented JSON (for
// example a proxy's HTML page) leaves the mapping to the status alone.
func (r *reader) httpFailure(resp *http.Response, raw []byte) *protocol.Error {
	r.requestID = r.clean(resp.Header.Get("request-id"))
	var body errorBody
	_ = json.Unmarshal(raw, &body) // best effort: see above
	f := r.failure(resp.StatusCode, &body.Error, resp.Header)
	if f.RequestID == "" {
		f.RequestID = r.clean(body.RequestID)
	}
	r.log.Info("Provider answered with an error", "status", f.Status, "type", f.Type, "code", f.Code, "requestID", f.RequestID)
	return f.Error()
}

// failure builds the portable failure for an error object; status is 0 for an error event
// inside a stream that started with 200. Every provider identifier that echoes the
// credential is dropped before it can reach provider_error.
func (r *reader) failure(status int, e *apiError, h http.Header) providerhttp.Failure {
	f := providerhttp.Failure{
		Provider:  Provider,
		Status:    status,
		Type:      r.clean(e.Type),
		RequestID: r.requestID,
		Header:    h,
	}
	if e.Details != nil {
		f.Code = r.clean(e.Details.ErrorCode)
	}
	switch {
	case e.Type == errTypeOverloaded || status == statusOverloaded:
		f.Overloaded = true
	case e.Type == errTypeBilling || f.Code == errCodeSpendLimit:
		// billing_error (402) and the monthly spend cap (429) do not clear by retrying:
		// the account must change.
		f.QuotaExhausted = true
	}
	return f
}

// malformed is the error for an answer that cannot be read as the documented format
// (providerhttp.Unreadable).
func (r *reader) malformed(what string) error {
	r.log.Info("Provider sent an unreadable response", "part", what, "requestID", r.requestID)
	return providerhttp.Unreadable(Provider, r.requestID, r.Output())
}
