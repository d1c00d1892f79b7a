package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
)

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// The credential goes to the provider in the Authorization header and nowhere else, and
// never comes back out — not in an event, a returned error or a log line — even when the
// upstream echoes it in every field of its error body and in its request-id header.
func TestCredentialOnlyInAuthorizationHeader(t *testing.T) {
	echo := fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %[1]s.","type":"%[1]s","param":"%[1]s","code":"%[1]s"}}`, canary)
	streamEcho := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: " + echo + "\n\n"
	tests := []struct {
		name   string
		reply  http.HandlerFunc
		stream bool
	}{
		{"success stream", sseReply(testdata(t, "stream_text.sse"), "x-request-id", canary), true},
		{"success completion", jsonReply(200, testdata(t, "completion.json"), "x-request-id", canary), false},
		{"401 echo", jsonReply(401, []byte(echo), "x-request-id", canary), false},
		{"429 echo with retry", jsonReply(429, []byte(echo), "x-request-id", "req_"+canary, "retry-after", "1"), true},
		{"500 echo", jsonReply(500, []byte(echo), "x-request-id", canary), true},
		{"in-stream echo", sseReply([]byte(streamEcho), "x-request-id", canary), true},
		{"truncated", sseReply([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n"), "x-request-id", canary), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := serve(t, tt.reply)
			d := deployment(up.endpoint())
			if tt.stream {
				streaming()(d)
			}
			res := execute(t, context.Background(), d, request(t, hello))

			got := up.only(t)
			if a := got.Header.Get("Authorization"); a != "Bearer "+canary {
				t.Errorf("Authorization = %q, want the bearer credential", a)
			}
			for name, values := range got.Header {
				if name == "Authorization" {
					continue
				}
				if containsAny(strings.Join(values, " "), canary) {
					t.Errorf("credential sent in header %s", name)
				}
			}
			if containsAny(string(got.Body)+got.Path+got.RawQuery, canary) {
				t.Errorf("credential sent in the request line or body")
			}

			for _, e := range res.events {
				if containsAny(string(e.Data), canary) {
					t.Errorf("credential in emitted %s: %s", e.Type, e.Data)
				}
			}
			if res.err != nil {
				b, err := json.Marshal(res.err)
				if err != nil {
					t.Fatal(err)
				}
				if containsAny(string(b)+res.err.Error()+fmt.Sprintf("%+v %#v", res.err, res.err), canary) {
					t.Errorf("credential in returned error: %s", b)
				}
				if pe := protocol.AsError(res.err); pe.ProviderError != nil && containsAny(pe.ProviderError.RequestID+pe.ProviderError.Code+pe.ProviderError.Type, canary) {
					t.Errorf("credential in provider_error: %+v", pe.ProviderError)
				}
			}
			if containsAny(res.snapshot(t), canary) {
				t.Errorf("credential in the snapshot")
			}
			if containsAny(res.logs, canary) {
				t.Errorf("credential in logs:\n%s", res.logs)
			}
		})
	}
}

// Printing an adapter, as a log line or test failure might, does not reveal the credential.
func TestAdapterPrintsNoCredential(t *testing.T) {
	a, err := openai.New(deployment(""))
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", a, a, a, a); containsAny(s, canary) {
		t.Errorf("adapter prints as %s", s)
	}
}

// Provider messages never reach the caller; only fixed templates do.
func TestErrorsHaveNoProviderText(t *testing.T) {
	up := serve(t, jsonReply(400, testdata(t, "error_400.json")))
	res := execute(t, context.Background(), deployment(up.endpoint()), request(t, hello))
	b, _ := json.Marshal(res.err)
	if containsAny(string(b), "maximum context length", "messages", up.srv.URL) {
		t.Errorf("error carries provider text or the endpoint: %s", b)
	}
	if !containsAny(res.logs, "Provider call failed") {
		t.Errorf("failure not logged: %q", res.logs)
	}
}
