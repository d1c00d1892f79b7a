package openai_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Every documented error status and body maps to the contract's error, with the
// provider's identifiers kept only under provider_error and its message dropped.
func TestHTTPErrors(t *testing.T) {
	const rid = "req_sbERROR0001"
	pe := func(status int, typ, code string) *protocol.ProviderError {
		return &protocol.ProviderError{Provider: "openai", HTTPStatus: status, Type: typ, Code: code, RequestID: rid}
	}
	tests := []struct {
		name   string
		status int
		file   string
		header []string
		want   *protocol.Error
	}{
		{"400 context too long", 400, "error_400.json", nil, &protocol.Error{
			Code: protocol.CodeInvalidRequest, Message: "the provider rejected the request as invalid",
			ProviderError: pe(400, "invalid_request_error", "context_length_exceeded")}},
		{"401 bad key", 401, "error_401.json", nil, &protocol.Error{
			Code: protocol.CodeProviderRejected, Message: "the provider rejected the deployment's credentials, permissions or model",
			ProviderError: pe(401, "invalid_request_error", "invalid_api_key")}},
		{"403 region", 403, "error_403.json", nil, &protocol.Error{
			Code: protocol.CodeProviderRejected, Message: "the provider rejected the deployment's credentials, permissions or model",
			ProviderError: pe(403, "request_forbidden", "unsupported_country_region_territory")}},
		{"404 model", 404, "error_404.json", nil, &protocol.Error{
			Code: protocol.CodeProviderRejected, Message: "the provider rejected the deployment's credentials, permissions or model",
			ProviderError: pe(404, "invalid_request_error", "model_not_found")}},
		{"429 rate limit, retry-after-ms wins", 429, "error_429_rate_limit.json",
			[]string{"retry-after-ms", "250", "retry-after", "1", "x-ratelimit-remaining-tokens", "0"}, &protocol.Error{
				Code: protocol.CodeRateLimited, Message: "the provider is rate limiting requests", Retryable: true, RetryAfterMs: 250,
				ProviderError: pe(429, "tokens", "rate_limit_exceeded")}},
		{"429 rate limit, retry-after seconds", 429, "error_429_rate_limit.json",
			[]string{"retry-after", "2"}, &protocol.Error{
				Code: protocol.CodeRateLimited, Message: "the provider is rate limiting requests", Retryable: true, RetryAfterMs: 2000,
				ProviderError: pe(429, "tokens", "rate_limit_exceeded")}},
		{"429 insufficient quota", 429, "error_429_quota.json", []string{"retry-after", "20"}, &protocol.Error{
			Code: protocol.CodeQuotaExhausted, Message: "the provider account's quota is exhausted",
			ProviderError: pe(429, "insufficient_quota", "insufficient_quota")}},
		{"500", 500, "error_500.json", nil, &protocol.Error{
			Code: protocol.CodeProviderUnavailable, Message: "the provider is unavailable", Retryable: true,
			ProviderError: pe(500, "server_error", "")}},
		{"503 overloaded", 503, "error_503.json", []string{"retry-after", "1"}, &protocol.Error{
			Code: protocol.CodeProviderUnavailable, Message: "the provider is unavailable", Retryable: true, RetryAfterMs: 1000,
			ProviderError: pe(503, "server_error", "")}},
		{"503, x-should-retry false", 503, "error_503.json", []string{"x-should-retry", "false"}, &protocol.Error{
			Code: protocol.CodeProviderUnavailable, Message: "the provider is unavailable", Retryable: false,
			ProviderError: pe(503, "server_error", "")}},
	}
	for _, tt := range tests {
		for _, mode := range []string{"streaming", "non-streaming"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				header := append([]string{"x-request-id", rid}, tt.header...)
				up := serve(t, jsonReply(tt.status, testdata(t, tt.file), header...))
				d := deployment(up.endpoint())
				if mode == "streaming" {
					streaming()(d)
				}
				res := execute(t, context.Background(), d, request(t, hello))
				if d := cmp.Diff(tt.want, res.protoErr(t)); d != "" {
					t.Errorf("error (-want +got):\n%s", d)
				}
				diffEvents(t, res.events, nil)
			})
		}
	}
}

// Bodies that are not OpenAI's shape still map by status; numeric codes (some
// compatible servers) are kept as text; an Azure content_filter code is a refusal.
func TestHTTPErrorVariants(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		code   protocol.Code
		pcode  string
	}{
		{"empty body", 502, ``, protocol.CodeProviderUnavailable, ""},
		{"html", 504, `<html>gateway timeout</html>`, protocol.CodeProviderUnavailable, ""},
		{"string error", 404, `{"error":"model not found"}`, protocol.CodeProviderRejected, ""},
		{"numeric code", 400, `{"error":{"object":"error","message":"bad","type":"BadRequestError","code":400}}`, protocol.CodeInvalidRequest, "400"},
		{"content filter", 400, `{"error":{"message":"filtered","type":null,"param":"prompt","code":"content_filter","status":400}}`, protocol.CodeContentFiltered, "content_filter"},
		{"408", 408, `{}`, protocol.CodeProviderTimeout, ""},
		{"redirect not followed", 307, ``, protocol.CodeProviderRejected, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply := jsonReply(tt.status, []byte(tt.body))
			if tt.status == 307 {
				reply = func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Location", "https://elsewhere.example/v1/chat/completions")
					w.WriteHeader(http.StatusTemporaryRedirect)
				}
			}
			up := serve(t, reply)
			res := execute(t, context.Background(), deployment(up.endpoint()), request(t, hello))
			pe := res.protoErr(t)
			if pe.Code != tt.code || pe.ProviderError == nil || pe.ProviderError.Code != tt.pcode || pe.ProviderError.HTTPStatus != tt.status {
				t.Errorf("error = %+v (provider_error %+v), want %s with code %q", pe, pe.ProviderError, tt.code, tt.pcode)
			}
			if n := len(up.requests()); n != 1 {
				t.Errorf("upstream saw %d requests, want 1", n)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	up := serve(t, jsonReply(200, nil))
	endpoint := up.endpoint()
	up.srv.Close()
	res := execute(t, context.Background(), deployment(endpoint), request(t, hello))
	want := &protocol.Error{
		Code: protocol.CodeProviderUnavailable, Message: "the provider could not be reached", Retryable: true,
		ProviderError: &protocol.ProviderError{Provider: "openai"},
	}
	if d := cmp.Diff(want, res.protoErr(t)); d != "" {
		t.Errorf("error (-want +got):\n%s", d)
	}
}
