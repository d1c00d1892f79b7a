package gemini_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		file      string
		status    int
		header    []string
		code      protocol.Code
		retryable bool
		afterMs   int64
		typ       string
		reason    string
	}{
		{"400_invalid_argument.json", 400, nil, protocol.CodeInvalidRequest, false, 0, "INVALID_ARGUMENT", ""},
		{"400_api_key_invalid.json", 400, nil, protocol.CodeProviderRejected, false, 0, "INVALID_ARGUMENT", "API_KEY_INVALID"},
		{"400_failed_precondition.json", 400, nil, protocol.CodeProviderRejected, false, 0, "FAILED_PRECONDITION", ""},
		{"403_permission_denied.json", 403, nil, protocol.CodeProviderRejected, false, 0, "PERMISSION_DENIED", "CONSUMER_INVALID"},
		{"404_not_found.json", 404, nil, protocol.CodeProviderRejected, false, 0, "NOT_FOUND", ""},
		{"429_resource_exhausted.json", 429, nil, protocol.CodeRateLimited, true, 37000, "RESOURCE_EXHAUSTED", ""},
		// A retry header wins over RetryInfo; x-should-retry: false lowers the verdict.
		{"429_resource_exhausted.json", 429, []string{"retry-after", "3"}, protocol.CodeRateLimited, true, 3000, "RESOURCE_EXHAUSTED", ""},
		{"429_resource_exhausted.json", 429, []string{"x-should-retry", "false"}, protocol.CodeRateLimited, false, 0, "RESOURCE_EXHAUSTED", ""},
		{"500_internal.json", 500, nil, protocol.CodeProviderUnavailable, true, 0, "INTERNAL", ""},
		{"503_unavailable.json", 503, nil, protocol.CodeProviderUnavailable, true, 0, "UNAVAILABLE", ""},
		{"504_deadline_exceeded.json", 504, nil, protocol.CodeProviderUnavailable, true, 0, "DEADLINE_EXCEEDED", ""},
	} {
		t.Run(tc.file+" "+strings.Join(tc.header, " "), func(t *testing.T) {
			up := newUpstream(t, tc.status, "errors/"+tc.file, tc.header...)
			for _, stream := range []bool{false, true} {
				d := geminiDeployment(up.URL)
				if stream {
					streaming(d)
				}
				res := run(t, d, hello(t))
				pe := asError(t, res.err)
				if pe.Code != tc.code || pe.Retryable != tc.retryable || pe.RetryAfterMs != tc.afterMs {
					t.Errorf("error %+v, want %s retryable=%v after=%d", pe, tc.code, tc.retryable, tc.afterMs)
				}
				want := protocol.ProviderError{Provider: "gemini", HTTPStatus: tc.status, Type: tc.typ, Code: tc.reason}
				if pe.ProviderError == nil || *pe.ProviderError != want {
					t.Errorf("provider_error %+v, want %+v", pe.ProviderError, want)
				}
				if len(res.events) != 0 {
					t.Errorf("%d events", len(res.events))
				}
				// Provider messages never travel: not in the error, not in the log.
				for _, text := range []string{"not valid", "quota", "overloaded", "internal error", "location", "Permission"} {
					if strings.Contains(pe.Message, text) || strings.Contains(res.logs, text) {
						t.Errorf("provider text %q surfaced: %q / %s", text, pe.Message, res.logs)
					}
				}
			}
		})
	}
}

func TestInStreamErrorMapsByCode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		chunks    string
		code      protocol.Code
		retryable bool
	}{
		{"429 before output", `data: {"error":{"code":429,"message":"Resource exhausted.","status":"RESOURCE_EXHAUSTED"}}` + "\r\n\r\n",
			protocol.CodeRateLimited, true},
		{"503 before output", `data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}` + "\r\n\r\n",
			protocol.CodeProviderUnavailable, true},
		{"400 before output", `data: {"error":{"code":400,"message":"Request contains an invalid argument.","status":"INVALID_ARGUMENT"}}` + "\r\n\r\n",
			protocol.CodeInvalidRequest, false},
		{"no code", `data: {"error":{"message":"?"}}` + "\r\n\r\n", protocol.CodeProviderUnavailable, true},
		{"429 after output", `data: {"candidates":[{"content":{"parts":[{"text":"a"}]},"index":0}]}` + "\r\n\r\n" +
			`data: {"error":{"code":429,"message":"Resource exhausted.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}]}}` + "\r\n\r\n",
			protocol.CodeRateLimited, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, 0, "")
			up.handler = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tc.chunks)
			}
			res := run(t, geminiDeployment(up.URL, streaming), hello(t))
			pe := asError(t, res.err)
			if pe.Code != tc.code || pe.Retryable != tc.retryable {
				t.Errorf("error %+v, want %s retryable=%v", pe, tc.code, tc.retryable)
			}
			if !pe.Retryable && pe.RetryAfterMs != 0 {
				t.Error("a retry hint on a failure that is not retryable")
			}
			if pe.ProviderError == nil || pe.ProviderError.HTTPStatus != 0 {
				t.Errorf("provider_error %+v, want no http_status (the response was 200)", pe.ProviderError)
			}
		})
	}
}

// TestEchoedCredentialNeverSurfaces: an upstream that echoes the API key everywhere —
// message, status, reason, headers, model version, response id, finish reason, call
// name and id — gets none of it into an error, event, outcome or log line (run checks
// all of them).
func TestEchoedCredentialNeverSurfaces(t *testing.T) {
	t.Run("error body", func(t *testing.T) {
		up := newUpstream(t, 0, "")
		up.handler = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("x-goog-request-id", canaryKey)
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"code":400,"message":"API key `+canaryKey+` not valid.","status":"`+canaryKey+`",`+
				`"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID_`+canaryKey+`"},`+
				`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"`+canaryKey+`"}]}}`)
		}
		res := run(t, geminiDeployment(up.URL), hello(t))
		pe := asError(t, res.err)
		// The reason that held the key was dropped, so the 400 stays invalid_request.
		if pe.Code != protocol.CodeInvalidRequest || pe.ProviderError.Type != "" || pe.ProviderError.Code != "" {
			t.Errorf("error %+v %+v", pe, pe.ProviderError)
		}
	})
	t.Run("answer", func(t *testing.T) {
		up := newUpstream(t, 0, "")
		up.handler = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[{"functionCall":{"id":"`+canaryKey+`","name":"f","args":{}}}]},`+
				`"finishReason":"`+canaryKey+`","index":0}],"modelVersion":"`+canaryKey+`","responseId":"`+canaryKey+`"}`+"\n\n")
		}
		res := run(t, geminiDeployment(up.URL, streaming, withCaps(protocol.CapTools)), hello(t))
		if res.err != nil {
			t.Fatal(res.err)
		}
		diffEvents(t, res.events, []enginetest.Emitted{enginetest.ToolStarted(0, "call_0", "f"), enginetest.ArgsDelta("call_0", "{}")})
		if res.outcome.FinishReason != "" || res.outcome.ResponseModel != "" {
			t.Errorf("outcome %+v, want the echoed identifiers dropped", res.outcome)
		}
	})
	t.Run("a call named after the key", func(t *testing.T) {
		up := newUpstream(t, 0, "")
		up.handler = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"`+canaryKey+`","args":{}}}]},"finishReason":"STOP","index":0}]}`+"\n\n")
		}
		res := run(t, geminiDeployment(up.URL, streaming, withCaps(protocol.CapTools)), hello(t))
		if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable {
			t.Errorf("error %+v, want the call refused as unreadable", pe)
		}
	})
}
