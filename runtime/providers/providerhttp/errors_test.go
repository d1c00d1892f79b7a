package providerhttp

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestFailureError(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name      string
		f         Failure
		code      protocol.Code
		retryable bool
		afterMs   int64
	}{
		{"400", Failure{Status: 400}, protocol.CodeInvalidRequest, false, 0},
		{"413", Failure{Status: 413}, protocol.CodeInvalidRequest, false, 0},
		{"422", Failure{Status: 422}, protocol.CodeInvalidRequest, false, 0},
		{"401", Failure{Status: 401}, protocol.CodeProviderRejected, false, 0},
		{"403", Failure{Status: 403}, protocol.CodeProviderRejected, false, 0},
		{"404", Failure{Status: 404}, protocol.CodeProviderRejected, false, 0},
		{"408", Failure{Status: 408}, protocol.CodeProviderTimeout, true, 0},
		{"429 rate limit with retry-after-ms", Failure{Status: 429, Header: hdr("retry-after-ms", "1500")}, protocol.CodeRateLimited, true, 1500},
		{"429 rate limit with retry-after seconds", Failure{Status: 429, Header: hdr("retry-after", "2")}, protocol.CodeRateLimited, true, 2000},
		{"429 quota", Failure{Status: 429, QuotaExhausted: true, Header: hdr("retry-after", "2")}, protocol.CodeQuotaExhausted, false, 0},
		{"500", Failure{Status: 500}, protocol.CodeProviderUnavailable, true, 0},
		{"503", Failure{Status: 503}, protocol.CodeProviderUnavailable, true, 0},
		{"529", Failure{Status: 529}, protocol.CodeProviderUnavailable, true, 0},
		{"in-stream overload", Failure{Overloaded: true}, protocol.CodeProviderUnavailable, true, 0},
		{"x-should-retry false", Failure{Status: 503, Header: hdr("x-should-retry", "false")}, protocol.CodeProviderUnavailable, false, 0},
		// A hint never raises retryable above the code's table value.
		{"x-should-retry true on 409", Failure{Status: 409, Header: hdr("x-should-retry", "true")}, protocol.CodeProviderRejected, false, 0},
		{"x-should-retry true on 401", Failure{Status: 401, Header: hdr("x-should-retry", "true")}, protocol.CodeProviderRejected, false, 0},
		{"x-should-retry false drops the hint", Failure{Status: 429, Header: hdr("x-should-retry", "false", "retry-after", "3")}, protocol.CodeRateLimited, false, 0},
		{"refusal", Failure{Status: 400, ContentFiltered: true}, protocol.CodeContentFiltered, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.Provider = "openai"
			e := tt.f.Error()
			if e.Code != tt.code || e.Retryable != tt.retryable || e.RetryAfterMs != tt.afterMs {
				t.Errorf("got %s retryable=%v after=%d, want %s %v %d", e.Code, e.Retryable, e.RetryAfterMs, tt.code, tt.retryable, tt.afterMs)
			}
			if e.ProviderError == nil || e.ProviderError.Provider != "openai" || e.ProviderError.HTTPStatus != tt.f.Status {
				t.Errorf("provider_error = %+v", e.ProviderError)
			}
		})
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	h := http.Header{"Retry-After": {now.Add(3 * time.Second).Format(http.TimeFormat)}}
	if d, ok := RetryAfter(h, now); !ok || d != 3*time.Second {
		t.Errorf("RetryAfter = %s %v, want 3s", d, ok)
	}
	for _, bad := range []string{"soon", "-1", "1e20"} {
		if _, ok := RetryAfter(http.Header{"Retry-After": {bad}}, now); ok {
			t.Errorf("RetryAfter(%q) accepted", bad)
		}
	}
}

func TestIdentifierDropsFreeText(t *testing.T) {
	for in, want := range map[string]string{
		"rate_limit_exceeded":          "rate_limit_exceeded",
		"req_011CSHoEeqs5C35K2UUqR7Fy": "req_011CSHoEeqs5C35K2UUqR7Fy",
		"Incorrect API key sk-abc":     "",
		"https://api.example.com/?k=v": "",
	} {
		if got := identifier(in); got != want {
			t.Errorf("identifier(%q) = %q, want %q", in, got, want)
		}
	}
}

// Identifiers and tool names that hold a part of the credential, anywhere, are dropped;
// so are tool names outside the protocol's grammar.
func TestScreeningDropsEchoedCredentials(t *testing.T) {
	secrets := []string{"", "sk-canary-7f3a", "AKIACANARY0001"}
	for _, tt := range []struct{ in, id, tool string }{
		{"get_weather", "get_weather", "get_weather"},
		{"call_abc.1:2", "call_abc.1:2", ""},
		{"sk-canary-7f3a", "", ""},
		{"call_sk-canary-7f3a_0", "", ""},
		{"AKIACANARY0001", "", ""},
		{"tool-AKIACANARY0001", "", ""},
		{"", "", ""},
		{strings.Repeat("a", 65), strings.Repeat("a", 65), ""},
		{strings.Repeat("a", 129), "", ""},
	} {
		if got := Identifier(tt.in, secrets...); got != tt.id {
			t.Errorf("Identifier(%q) = %q, want %q", tt.in, got, tt.id)
		}
		if got := ToolName(tt.in, secrets...); got != tt.tool {
			t.Errorf("ToolName(%q) = %q, want %q", tt.in, got, tt.tool)
		}
	}
}

// A documented throttling type maps to rate_limited whatever its status; an error inside
// a 200 stream keeps no http_status; after output nothing is retryable or hinted.
func TestFailureFlags(t *testing.T) {
	hint := http.Header{"Retry-After": {"2"}}
	for name, tt := range map[string]struct {
		f         Failure
		code      protocol.Code
		retryable bool
		status    int
		afterMs   int64
	}{
		"throttling as a 400":            {Failure{Status: 400, RateLimited: true, Header: hint}, protocol.CodeRateLimited, true, 400, 2000},
		"in-stream throttling":           {Failure{Status: 429, InStream: true, Header: hint}, protocol.CodeRateLimited, true, 0, 2000},
		"in-stream throttling after out": {Failure{Status: 429, InStream: true, AfterOutput: true, Header: hint}, protocol.CodeRateLimited, false, 0, 0},
		"in-stream of no type":           {Failure{InStream: true}, protocol.CodeProviderUnavailable, true, 0, 0},
		"a refused key as a 400":         {Failure{Status: 400, Rejected: true}, protocol.CodeProviderRejected, false, 400, 0},
		"a body's retry hint":            {Failure{Status: 429, RetryAfter: 1500 * time.Millisecond}, protocol.CodeRateLimited, true, 429, 1500},
		"a header hint wins":             {Failure{Status: 429, RetryAfter: 1500 * time.Millisecond, Header: hint}, protocol.CodeRateLimited, true, 429, 2000},
		"no hint on a final error":       {Failure{Status: 401, RetryAfter: time.Second}, protocol.CodeProviderRejected, false, 401, 0},
	} {
		e := tt.f.Error()
		if e.Code != tt.code || e.Retryable != tt.retryable || e.ProviderError.HTTPStatus != tt.status || e.RetryAfterMs != tt.afterMs {
			t.Errorf("%s: got %s retryable=%v http_status=%d after=%d", name, e.Code, e.Retryable, e.ProviderError.HTTPStatus, e.RetryAfterMs)
		}
	}
}
