package bedrock_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// ignoreMessage leaves the fixed public message to providerhttp, which owns it.
var ignoreMessage = cmpopts.IgnoreFields(protocol.Error{}, "Message")

// errorTypeHeader is x-amzn-ErrorType as Bedrock sends it: the type, then the namespace.
func errorTypeHeader(typ string) string {
	return typ + ":http://internal.amazon.com/coral/com.amazon.bedrock/"
}

func TestHTTPErrors(t *testing.T) {
	const rid = "0c9e5a9e-6b0c-4a57-9a1d-5e4b3c2a1f00"
	pe := func(status int, typ string) *protocol.ProviderError {
		return &protocol.ProviderError{Provider: "bedrock", HTTPStatus: status, Type: typ, RequestID: rid}
	}
	errorCase := func(status int, typ string, code protocol.Code, retryable bool) struct {
		name   string
		status int
		file   string
		header []string
		want   protocol.Error
	} {
		return struct {
			name   string
			status int
			file   string
			header []string
			want   protocol.Error
		}{name: typ, status: status, file: "errors/" + itoa(status) + "_" + typ + ".json", header: []string{"x-amzn-ErrorType", errorTypeHeader(typ)},
			want: protocol.Error{Code: code, Retryable: retryable, ProviderError: pe(status, typ)}}
	}
	cases := []struct {
		name   string
		status int
		file   string
		header []string
		want   protocol.Error
	}{
		errorCase(400, "ValidationException", protocol.CodeInvalidRequest, false),
		errorCase(403, "AccessDeniedException", protocol.CodeProviderRejected, false),
		errorCase(404, "ResourceNotFoundException", protocol.CodeProviderRejected, false),
		errorCase(408, "ModelTimeoutException", protocol.CodeProviderTimeout, true),
		errorCase(424, "ModelErrorException", protocol.CodeProviderUnavailable, true),
		errorCase(429, "ThrottlingException", protocol.CodeRateLimited, true),
		errorCase(429, "ModelNotReadyException", protocol.CodeProviderUnavailable, true),
		errorCase(400, "ServiceQuotaExceededException", protocol.CodeRateLimited, true),
		errorCase(500, "InternalServerException", protocol.CodeProviderUnavailable, true),
		errorCase(503, "ServiceUnavailableException", protocol.CodeProviderUnavailable, true),
		{name: "429 with retry-after", status: 429, file: "errors/429_ThrottlingException.json",
			header: []string{"x-amzn-ErrorType", "ThrottlingException", "Retry-After", "3"},
			want:   protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 3000, ProviderError: pe(429, "ThrottlingException")}},
		{name: "type in the body's __type", status: 403, file: "",
			want: protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: pe(403, "UnrecognizedClientException")}},
		{name: "502 with a body that is not the error JSON", status: 502, file: "converse_text.json",
			want: protocol.Error{Code: protocol.CodeProviderUnavailable, Retryable: true, ProviderError: pe(502, "")}},
		{name: "307 redirect", status: 307, file: "converse_text.json", header: []string{"Location", "http://127.0.0.1:1/model/x/converse"},
			want: protocol.Error{Code: protocol.CodeProviderRejected, ProviderError: pe(307, "")}},
	}
	for _, tc := range cases {
		for _, mode := range []struct {
			name string
			opts []func(*routing.Deployment)
		}{{name: "streaming", opts: []func(*routing.Deployment){streaming}}, {name: "non-streaming"}} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				body := []byte(`{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}`)
				if tc.file != "" {
					body = testdata(t, tc.file)
				}
				up := newUpstream(t, jsonReply(tc.status, body, append([]string{"x-amzn-RequestId", rid}, tc.header...)...))
				res := run(t, deployment(up.URL, mode.opts...), hello(t))
				diffEvents(t, res.events, nil)
				got := asError(t, res.err)
				if d := cmp.Diff(&tc.want, got, ignoreMessage); d != "" {
					t.Errorf("error mismatch (-want +got):\n%s", d)
				}
				var echoed struct{ Message string }
				_ = json.Unmarshal(body, &echoed)
				if got.Message == "" || (echoed.Message != "" && strings.Contains(got.Message, echoed.Message)) {
					t.Errorf("message %q", got.Message)
				}
				if len(up.requests()) != 1 {
					t.Errorf("upstream received %d requests, want 1", len(up.requests()))
				}
			})
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestCredentialEchoedByUpstream: an upstream that echoes the deployment's secrets — in
// the error body, the request id, the error type, inside a stream's exception and as a
// stop reason — gets none of them into the returned error, an event or a log line (run
// checks). For access keys the secrets are the secret access key and the session token
// (which the upstream only ever saw in X-Amz-Security-Token); for an API key, the key.
func TestCredentialEchoedByUpstream(t *testing.T) {
	for _, cred := range []struct {
		name, value string
		secrets     []string
	}{
		{"access keys", keysJSON(true), []string{secretCanary, tokenCanary}},
		{"API key", apiKeyCanary, []string{apiKeyCanary}},
	} {
		first, last := cred.secrets[0], cred.secrets[len(cred.secrets)-1]
		echo := strings.Join(cred.secrets, " ")
		t.Run(cred.name, func(t *testing.T) {
			t.Run("401 body and headers", func(t *testing.T) {
				body, _ := json.Marshal(map[string]string{"message": echo, "__type": last})
				up := newUpstream(t, jsonReply(http.StatusUnauthorized, body,
					"x-amzn-RequestId", first, "x-amzn-ErrorType", last+":"+first))
				res := run(t, deployment(up.URL, withCredential(cred.value)), hello(t))
				got := asError(t, res.err)
				if got.Code != protocol.CodeProviderRejected || got.ProviderError.RequestID != "" || got.ProviderError.Type != "" {
					t.Errorf("error %+v %+v", got, got.ProviderError)
				}
				checkPlacement(t, up.only(t))
			})
			t.Run("stream exception", func(t *testing.T) {
				up := newUpstream(t, streamReply(frames(t,
					bedrock.Exception(first, `{"message":"`+echo+`"}`)), "x-amzn-RequestId", last))
				res := run(t, deployment(up.URL, streaming, withCredential(cred.value)), hello(t))
				if got := asError(t, res.err); got.ProviderError.Type != "" || got.ProviderError.RequestID != "" {
					t.Errorf("provider_error %+v", got.ProviderError)
				}
			})
			t.Run("stop reason", func(t *testing.T) {
				up := newUpstream(t, streamReply(frames(t,
					bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hi"}}`),
					bedrock.Event("messageStop", `{"stopReason":"`+first+`"}`))))
				res := run(t, deployment(up.URL, streaming, withCredential(cred.value)), hello(t))
				if res.err != nil || res.outcome.FinishReason != "" {
					t.Errorf("Execute = %+v, %v", res.outcome, res.err)
				}
			})
		})
	}
}
