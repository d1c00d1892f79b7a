package gemini

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// Error identifiers with a mapping of their own.
const (
	// statusFailedPrecondition is the canonical code of a request the account cannot
	// make as it is configured (the Gemini API: the free tier is not available in the
	// caller's region and billing is not enabled). The request is fine; the deployment is
	// not, so it is provider_rejected, not invalid_request.
	statusFailedPrecondition = "FAILED_PRECONDITION"
	// apiKeyReason prefixes the google.rpc.ErrorInfo reasons of a refused API key
	// (API_KEY_INVALID, which the Gemini API answers with 400 INVALID_ARGUMENT, and its
	// kin): the credential is wrong, so provider_rejected.
	apiKeyReason = "API_KEY_"
	// Detail types read from google.rpc.Status.details.
	typeErrorInfo = "type.googleapis.com/google.rpc.ErrorInfo"
	typeRetryInfo = "type.googleapis.com/google.rpc.RetryInfo"
)

// rpcStatus is a google.rpc.Status, the error of both APIs: the body of a failed response
// ({"error": {…}}) and an error object inside a stream. Its message is never read: it is
// free text that may echo request content or the credential.
type rpcStatus struct {
	Code    int             `json:"code"`
	Status  string          `json:"status"`
	Details []statusDetails `json:"details"`
}

// statusDetails holds the fields read from the details the APIs document: ErrorInfo's
// reason and RetryInfo's retryDelay.
type statusDetails struct {
	Type       string `json:"@type"`
	Reason     string `json:"reason"`
	RetryDelay string `json:"retryDelay"`
}

// httpFailure maps a non-2xx response. Only identifiers are read from the body (status,
// ErrorInfo reason, RetryInfo delay); a body that is not the documented JSON (a proxy's
// HTML page) leaves the mapping to the HTTP status alone.
func (r *reader) httpFailure(resp *http.Response, raw []byte) *protocol.Error {
	var body struct {
		Error *rpcStatus `json:"error"`
	}
	_ = json.Unmarshal(raw, &body) // best effort: see above
	e := r.failure(resp.StatusCode, body.Error, resp.Header).Error()
	pe := e.ProviderError
	r.log.Info("Provider answered with an error", "status", pe.HTTPStatus, "type", pe.Type, "reason", pe.Code, "code", e.Code)
	return e
}

// inStreamFailure maps an error object received after a 200, by its code (the HTTP status
// it stands for) and status. Its retryability follows providerhttp.Truncated: once output
// was emitted the attempt cannot be replaced.
func (r *reader) inStreamFailure(st *rpcStatus) error {
	status := 0
	if st.Code >= 400 && st.Code <= 599 {
		status = st.Code
	}
	f := r.failure(status, st, nil)
	// The HTTP status was 200; the code lives in the error object.
	f.InStream, f.AfterOutput = true, r.Output()
	r.log.Info("Provider stream reported an error", "code", st.Code, "type", f.Type, "reason", f.Code, "output", r.Output())
	return f.Error()
}

// failure describes an HTTP status (0: unknown) and error object (nil: none) for
// providerhttp, with the Google-specific rules: an API key refused or an account
// precondition (both a 400) is provider_rejected; RetryInfo's retryDelay is the retry
// hint when no retry header gives one. Every identifier that contains a secret is
// dropped before it can reach provider_error.
func (r *reader) failure(status int, st *rpcStatus, h http.Header) providerhttp.Failure {
	f := providerhttp.Failure{Provider: r.provider, Status: status, RequestID: r.responseID, Header: h}
	if st == nil {
		return f
	}
	var reason string
	f.Type = r.clean(st.Status)
	for _, d := range st.Details {
		switch d.Type {
		case typeErrorInfo:
			if reason == "" {
				reason = d.Reason
			}
		case typeRetryInfo:
			if delay, ok := retryDelay(d.RetryDelay); ok {
				f.RetryAfter = delay
			}
		}
	}
	f.Code = r.clean(reason)
	// Decided from the cleaned identifiers only, as provider_error shows them.
	f.Rejected = status == http.StatusBadRequest && (f.Type == statusFailedPrecondition || strings.HasPrefix(f.Code, apiKeyReason))
	return f
}

// retryDelay parses a google.protobuf.Duration in its JSON form ("37s", "0.5s").
func retryDelay(s string) (time.Duration, bool) {
	v, ok := strings.CutSuffix(strings.TrimSpace(s), "s")
	if !ok {
		return 0, false
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil || !(secs >= 0 && secs < 24*3600) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}
