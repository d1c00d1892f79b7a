package bedrock

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// Response headers of the AWS JSON protocol.
const (
	headerRequestID = "x-amzn-RequestId"
	headerErrorType = "x-amzn-ErrorType"
)

// exceptions are the error types Bedrock Runtime documents for Converse and
// ConverseStream (HTTP errors and stream exception frames), by lower-cased name, with the
// HTTP status AWS documents for each. An exception frame arrives inside a 200, so its
// documented status is what decides its code, exactly as for the same error answered
// as an HTTP status; provider_error.http_status stays the response's real status.
var exceptions = map[string]exception{
	"validationexception":           {status: http.StatusBadRequest},
	"accessdeniedexception":         {status: http.StatusForbidden},
	"resourcenotfoundexception":     {status: http.StatusNotFound},
	"modeltimeoutexception":         {status: http.StatusRequestTimeout},
	"throttlingexception":           {status: http.StatusTooManyRequests},
	"internalserverexception":       {status: http.StatusInternalServerError},
	"serviceunavailableexception":   {status: http.StatusServiceUnavailable},
	"modelerrorexception":           {status: http.StatusFailedDependency, unavailable: true},
	"modelstreamerrorexception":     {status: http.StatusFailedDependency, unavailable: true},
	"modelnotreadyexception":        {status: http.StatusTooManyRequests, unavailable: true},
	"servicequotaexceededexception": {status: http.StatusBadRequest, limited: true},
}

// exception is how one documented error type maps.
type exception struct {
	// status is the HTTP status AWS documents for it.
	status int
	// unavailable: the model (not the request or the account) failed or is not ready —
	// ModelErrorException and ModelStreamErrorException (424), ModelNotReadyException
	// (429) — so the failure is provider_unavailable: retryable, another deployment may
	// serve the request.
	unavailable bool
	// limited: ServiceQuotaExceededException comes with 400, but AWS documents it as an
	// account quota the request may be resubmitted against later — a limit that clears by
	// itself, which is rate_limited, not invalid_request (nothing is wrong with the
	// request) nor quota_exhausted (which retrying does not clear).
	limited bool
}

// errorBody is the body of a failed response: {"message": …}. The message is never read
// (it is free text that may echo request content); some front ends name the type in
// the body instead of the header.
type errorBody struct {
	Type string `json:"__type"`
	Code string `json:"code"`
}

// httpFailure maps a non-2xx response. Only identifiers are read: the error type (the
// x-amzn-ErrorType header, else the body's __type or code) and the request id; a body
// that is not the documented JSON (a proxy's HTML page) leaves the mapping to the status.
func (r *reader) httpFailure(resp *http.Response, raw []byte) *protocol.Error {
	r.requestID = r.clean(resp.Header.Get(headerRequestID))
	typ := resp.Header.Get(headerErrorType)
	if typ == "" {
		var body errorBody
		_ = json.Unmarshal(raw, &body) // best effort: see above
		typ = body.Type
		if typ == "" {
			typ = body.Code
		}
	}
	f := r.failure(resp.StatusCode, errorType(typ), resp.Header)
	r.log.Info("Provider answered with an error", "status", resp.StatusCode, "type", f.Type, "requestID", f.RequestID)
	return f.Error()
}

// errorType reduces an AWS error type to its name: x-amzn-ErrorType carries
// "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", a body
// __type may carry a namespace before '#'.
func errorType(s string) string {
	s, _, _ = strings.Cut(s, ":")
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// failure builds the portable failure for an error of type typ with the given status
// (the response's, or for an exception frame the one Bedrock documents for its type).
// Any identifier that echoes a secret is dropped before it can reach provider_error.
func (r *reader) failure(status int, typ string, h http.Header) providerhttp.Failure {
	ex := exceptions[strings.ToLower(typ)]
	if status == http.StatusFailedDependency {
		ex.unavailable = true // a 424 of any type is the model's dependency failing
	}
	return providerhttp.Failure{
		Provider:    Provider,
		Status:      status,
		Type:        r.clean(typ),
		RequestID:   r.requestID,
		Header:      h,
		RateLimited: ex.limited,
		Overloaded:  ex.unavailable,
	}
}

// exceptionFailure maps a stream's exception frame (:exception-type) or error frame
// (:error-code) to its portable error: by the type's documented status, and
// provider_unavailable for a type Bedrock does not document. After output nothing is
// retryable (spec/http-api.md, "Retryable").
func (r *reader) exceptionFailure(typ string) error {
	status := 0 // providerhttp: an in-stream error of no documented type is provider_unavailable
	if ex, ok := exceptions[strings.ToLower(typ)]; ok {
		status = ex.status
	}
	f := r.failure(status, typ, nil)
	f.InStream, f.AfterOutput = true, r.Output()
	r.log.Info("Provider stream reported an exception", "type", f.Type, "requestID", f.RequestID, "output", r.Output())
	return f.Error()
}

// malformed is the error for an answer that cannot be read as the documented format (a
// frame with a bad checksum, an oversized frame, JSON that does not parse):
// providerhttp.Unreadable.
func (r *reader) malformed(what string) error {
	r.log.Info("Provider sent an unreadable response", "part", what, "requestID", r.requestID)
	return providerhttp.Unreadable(Provider, r.requestID, r.Output())
}
