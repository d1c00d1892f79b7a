package anthropic_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// marker is what the seeds put wherever a caller's text could be echoed: the model,
// unknown keys, block types, tool names, URLs, stop sequences, the version header.
// Nothing the door writes contains it, so an answer holding it leaks caller content.
const marker = "ZQXCANARY"

// FuzzMessagesRequest drives POST /v1/messages end to end — version header, body, the
// Messages decoder, model resolution, the native decoder, submission and the answer,
// streamed or not — with a recording adapter behind it, and asserts for every input:
//
//   - no 5xx: every bad input gets a specific 4xx;
//   - every error is Anthropic's error shape with the type its status maps to, and a
//     refusal names a location of the Messages request, never one of the native
//     request the door translated it into;
//   - a request that is refused reaches no adapter (the call count does not move), and
//     an accepted one reaches it once;
//   - no answer, headers included, holds the caller's marker (the adapter answers a
//     fixed text).
//
// The seeds run in every `go test`; `make fuzz` fuzzes it for a bounded time.
func FuzzMessagesRequest(f *testing.F) {
	m := strings.ToLower(marker)
	for _, s := range []struct{ body, version string }{
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"ai/small","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, "2023-01-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, marker},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, ""},
		{`{"model":"` + marker + `","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"ai/` + m + `","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"` + marker + `":1,"messages":[{"role":"user","content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","` + marker + `":1,"content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"` + marker + `","content":"Hello"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"` + marker + `"}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"a","` + marker + `":[1]}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"ftp://` + marker + `"}}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/` + m + `","data":"` + marker + `"}}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","title":"` + marker + `","source":{"type":"base64","media_type":"application/pdf","data":"aGk="}}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"` + marker + `","name":"` + marker + `!","input":{"` + marker + `":1}}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x","cache_control":{"type":"` + marker + `"}}]}]}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"tools":[{"name":"t","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"` + marker + `"},"messages":[{"role":"user","content":"Hi"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"tools":[{"name":"t","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"1h"}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"Hi"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"stop_sequences":["` + marker + `"],"temperature":0.2,"top_p":0.5,"top_k":3,"metadata":{"user_id":"` + marker + `"},"messages":[{"role":"user","content":"Hi"}]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":64,"metadata":{"` + marker + `":"x"},"messages":[{"role":"user","content":"Hi"}]}`, "2023-06-01"},
		{`{"model":"chat","model":"chat","max_tokens":64,"messages":[]}`, "2023-06-01"},
		{`{"model":"chat","max_tokens":1e400,"messages":[{"role":"user","content":"Hi"}]}`, "2023-06-01"},
		{`["` + marker + `"]`, "2023-06-01"},
		{``, "2023-06-01"},
	} {
		f.Add([]byte(s.body), s.version)
	}
	e := newEnv(f, 0)
	var accepted int64 // executions created so far, each of which ran the adapter once

	f.Fuzz(func(t *testing.T, body []byte, version string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		if version != "" {
			req.Header["Anthropic-Version"] = []string{version}
		}
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)
		res := rec.Result()
		answer := rec.Body.String()
		for name, values := range res.Header {
			answer += "\n" + name + ": " + strings.Join(values, ", ")
		}
		if strings.Contains(strings.ToLower(answer), m) {
			t.Fatalf("the answer echoes the caller:\n%s", answer)
		}
		if res.StatusCode >= 500 {
			t.Fatalf("%d for %q: %s", res.StatusCode, body, rec.Body)
		}
		if res.StatusCode == http.StatusOK {
			accepted++
			if got := e.calls.Load(); got != accepted {
				t.Fatalf("the adapter ran %d times for %d accepted requests", got, accepted)
			}
			return
		}
		if got := e.calls.Load(); got != accepted {
			t.Fatalf("a refused request (%d) reached the adapter", res.StatusCode)
		}
		var eb struct {
			Type  string `json:"type"`
			Error struct {
				Type        string `json:"type"`
				Message     string `json:"message"`
				Switchboard struct {
					Code protocol.Code `json:"code"`
				} `json:"switchboard"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Type != "error" || eb.Error.Message == "" {
			t.Fatalf("%d with a body not in Anthropic's shape: %s", res.StatusCode, rec.Body)
		}
		for _, native := range []string{"input", "extensions", "ability", "routing", "requirements", "deadline_ms", "metadata{}"} {
			if strings.HasPrefix(eb.Error.Message, native) {
				t.Fatalf("a refusal names the native request, not the Messages one: %s", eb.Error.Message)
			}
		}
		want := map[int]string{400: "invalid_request_error", 404: "not_found_error", 413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error"}[res.StatusCode]
		if want == "" || eb.Error.Type != want || !eb.Error.Switchboard.Code.Known() || eb.Error.Switchboard.Code.HTTPStatus() != res.StatusCode {
			t.Fatalf("%d answered with type %s and code %s", res.StatusCode, eb.Error.Type, eb.Error.Switchboard.Code)
		}
	})
}
