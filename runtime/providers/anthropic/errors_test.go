package anthropic_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// ignoreMessage leaves the fixed public message to providerhttp, which owns it.
var ignoreMessage = cmpopts.IgnoreFields(protocol.Error{}, "Message")

func TestHTTPErrors(t *testing.T) {
	pe := func(status int, typ, code, requestID string) *protocol.ProviderError {
		return &protocol.ProviderError{Provider: "anthropic", HTTPStatus: status, Type: typ, Code: code, RequestID: requestID}
	}
	for _, tc := range []struct {
		name   string
		status int
		file   string
		header []string
		want   protocol.Error
	}{
		{name: "400 invalid_request_error", status: 400, file: "errors/400.json",
			want: protocol.Error{Code: protocol.CodeInvalidRequest, ProviderError: pe(400, "invalid_request_error", "", "req_01SwbdError400000000001")}},
		{name: "401 authentication_error", status: 401, file: "errors/401.json",
			want: protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: pe(401, "authentication_error", "", "req_01SwbdError401000000001")}},
		{name: "402 billing_error", status: 402, file: "errors/402.json",
			want: protocol.Error{Code: protocol.CodeQuotaExhausted, ProviderError: pe(402, "billing_error", "", "req_01SwbdError402000000001")}},
		{name: "403 permission_error", status: 403, file: "errors/403.json",
			want: protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: pe(403, "permission_error", "", "req_01SwbdError403000000001")}},
		{name: "404 not_found_error", status: 404, file: "errors/404.json",
			want: protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: pe(404, "not_found_error", "", "req_01SwbdError404000000001")}},
		{name: "413 request_too_large", status: 413, file: "errors/413.json",
			want: protocol.Error{Code: protocol.CodeInvalidRequest, ProviderError: pe(413, "request_too_large", "", "req_01SwbdError413000000001")}},
		{name: "429 rate_limit_error with retry-after", status: 429, file: "errors/429.json", header: []string{"retry-after", "17"},
			want: protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 17000, ProviderError: pe(429, "rate_limit_error", "", "req_01SwbdError429000000001")}},
		{name: "429 monthly spend limit", status: 429, file: "errors/429_spend_limit.json",
			want: protocol.Error{Code: protocol.CodeQuotaExhausted, ProviderError: pe(429, "rate_limit_error", "enforced_spend_limit_reached", "req_01SwbdError429000000002")}},
		{name: "500 api_error", status: 500, file: "errors/500.json",
			want: protocol.Error{Code: protocol.CodeProviderUnavailable, Retryable: true, ProviderError: pe(500, "api_error", "", "req_01SwbdError500000000001")}},
		{name: "504 timeout_error", status: 504, file: "errors/504.json",
			want: protocol.Error{Code: protocol.CodeProviderUnavailable, Retryable: true, ProviderError: pe(504, "timeout_error", "", "req_01SwbdError504000000001")}},
		// The request-id header is the documented source; it wins over the body's copy.
		{name: "529 overloaded_error", status: 529, file: "errors/529.json", header: []string{"request-id", "req_01SwbdHeader0000000001"},
			want: protocol.Error{Code: protocol.CodeProviderUnavailable, Retryable: true, ProviderError: pe(529, "overloaded_error", "", "req_01SwbdHeader0000000001")}},
		{name: "529 without a body", status: 529,
			want: protocol.Error{Code: protocol.CodeProviderUnavailable, Retryable: true, ProviderError: pe(529, "", "", "")}},
		// A proxy in front of the API (the 413 comes from one) may answer with another body.
		{name: "413 with a body that is not the error JSON", status: 413, file: "stream_text.sse",
			want: protocol.Error{Code: protocol.CodeInvalidRequest, ProviderError: pe(413, "", "", "")}},
		// A redirect is not followed (it would carry x-api-key elsewhere).
		{name: "307 redirect", status: 307, header: []string{"Location", "http://127.0.0.1:1/v1/messages"},
			want: protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: pe(307, "", "", "")}},
	} {
		for _, mode := range []struct {
			name string
			opts []func(*routing.Deployment)
		}{{name: "streaming", opts: []func(*routing.Deployment){streaming}}, {name: "non-streaming"}} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				up := newUpstream(t, tc.status, tc.file, tc.header...)
				res := run(t, deployment(up.URL, mode.opts...), hello(t))
				diffEvents(t, res.events, nil)
				got := asError(t, res.err)
				if d := cmp.Diff(&tc.want, got, ignoreMessage); d != "" {
					t.Errorf("error mismatch (-want +got):\n%s", d)
				}
				if got.Message == "" {
					t.Error("error has no message")
				}
				if len(up.requests()) != 1 {
					t.Errorf("upstream received %d requests, want 1", len(up.requests()))
				}
			})
		}
	}
}

// TestCredentialEchoedByUpstream: an upstream that echoes the credential back — in the
// error message, in identifier fields and in the request-id header — must not get it
// into the returned error, events or logs. run checks events and logs on every attempt;
// this test checks that the identifiers carrying it are dropped.
func TestCredentialEchoedByUpstream(t *testing.T) {
	echo := `{"type":"error","error":{"type":"` + canary + `","message":"invalid x-api-key: ` + canary +
		`","details":{"error_code":"` + canary + `"}},"request_id":"` + canary + `"}`
	up := newUpstream(t, http.StatusUnauthorized, "", "request-id", canary)
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("request-id", "req_"+r.Header.Get("x-api-key"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(echo))
	}
	res := run(t, deployment(up.URL), hello(t))
	got := asError(t, res.err)
	want := &protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: &protocol.ProviderError{Provider: "anthropic", HTTPStatus: 401}}
	if d := cmp.Diff(want, got, ignoreMessage); d != "" {
		t.Errorf("error mismatch (-want +got):\n%s", d)
	}
	checkCredentialPlacement(t, up.only(t))

	t.Run("in-stream error", func(t *testing.T) {
		up := newUpstream(t, http.StatusOK, "")
		up.handler = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("request-id", r.Header.Get("x-api-key"))
			_, _ = w.Write([]byte("event: error\ndata: " + echo + "\n\n"))
		}
		res := run(t, deployment(up.URL, streaming), hello(t))
		got := asError(t, res.err)
		want := &protocol.Error{Code: protocol.CodeProviderUnavailable, Retryable: true, ProviderError: &protocol.ProviderError{Provider: "anthropic"}}
		if d := cmp.Diff(want, got, ignoreMessage); d != "" {
			t.Errorf("error mismatch (-want +got):\n%s", d)
		}
	})
}

func TestTransportError(t *testing.T) {
	up := newUpstream(t, http.StatusOK, "")
	url := up.URL + "/?token=secret-query"
	up.Close() // nothing listens there any more
	res := run(t, deployment(url), hello(t))
	got := asError(t, res.err)
	if got.Code != protocol.CodeProviderUnavailable || !got.Retryable {
		t.Errorf("error = %s retryable %v, want provider_unavailable retryable", got.Code, got.Retryable)
	}
	if strings.Contains(got.Message, "secret-query") || strings.Contains(res.logs, "secret-query") {
		t.Errorf("the endpoint's query string leaked: message %q, logs:\n%s", got.Message, res.logs)
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *routing.Deployment
	}{
		{name: "nil deployment"},
		{name: "other provider", d: deployment("", func(d *routing.Deployment) { d.Provider = "openai" })},
		{name: "no model", d: deployment("", func(d *routing.Deployment) { d.Model = "" })},
		{name: "no credential", d: deployment("", func(d *routing.Deployment) { d.Credential = routing.Credential{} })},
		{name: "relative endpoint", d: deployment("/v1")},
		{name: "endpoint without host", d: deployment("https://")},
		{name: "endpoint scheme", d: deployment("ftp://api.example.com")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ad, err := anthropic.New(tc.d)
			if ad != nil {
				t.Errorf("New returned an adapter")
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeProviderRejected {
				t.Errorf("New error = %v, want provider_rejected", err)
			}
		})
	}

	t.Run("default endpoint", func(t *testing.T) {
		if _, err := anthropic.Factory(deployment("")); err != nil {
			t.Errorf("Factory: %v", err)
		}
	})

	t.Run("endpoint with a path", func(t *testing.T) {
		up := newUpstream(t, http.StatusOK, "message_text.json")
		res := run(t, deployment(up.URL+"/anthropic/"), hello(t))
		if res.err != nil {
			t.Fatalf("Execute: %v", res.err)
		}
		if got := up.only(t).Path; got != "/anthropic/v1/messages" {
			t.Errorf("path = %q, want /anthropic/v1/messages", got)
		}
	})
}

// Factory has the engine's factory type.
var _ engine.Factory = anthropic.Factory
