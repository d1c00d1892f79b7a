package openai_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// marker is what the seeds put wherever a caller's text could be echoed: the model,
// unknown member names, metadata keys and values, tool names, URLs, media data. Nothing
// the door writes contains it, so an answer holding it leaks caller content.
const marker = "ZQXCANARY"

// FuzzChatCompletionsRequest drives POST /v1/chat/completions end to end — the body
// limit, the door's decoder and translation, the model names, the native decoder,
// routing with adapter admission, the execution and its projection, streamed or not —
// with a recording adapter behind it, and asserts for every body:
//
//   - no 5xx: every bad body gets a specific 4xx;
//   - every error is OpenAI's error shape with a portable code and the type its status
//     maps to;
//   - a refused body reaches no adapter (the adapter's call count does not move), and an
//     answered one reaches it exactly once;
//   - no answer, headers included, holds the caller's marker.
//
// The seeds below run in every `go test`; `make fuzz` fuzzes it for a bounded time.
func FuzzChatCompletionsRequest(f *testing.F) {
	user := `{"role":"user","content":"hi"}`
	body := func(fields string) string {
		return `{"model":"chat","messages":[` + user + `]` + fields + `}`
	}
	for _, s := range []string{
		body(``),
		body(`,"stream":true,"stream_options":{"include_usage":true}`),
		body(`,"` + marker + `":1`),
		body(`,"metadata":{"` + strings.ToLower(marker) + `":"` + marker + `"}`),
		body(`,"user":"` + marker + `"`),
		body(`,"temperature":0.2,"top_p":0.9,"max_tokens":10,"stop":["` + marker + `"],"seed":1`),
		body(`,"response_format":{"type":"json_schema","json_schema":{"name":"` + marker + `","schema":{"type":"object","description":"` + marker + `"}}}`),
		body(`,"tools":[{"type":"function","function":{"name":"` + marker + `","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"` + marker + `"}}`),
		`{"model":"` + marker + `","messages":[` + user + `]}`,
		`{"model":"ai/` + strings.ToLower(marker) + `","messages":[` + user + `]}`,
		`{"model":"ai/vision","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://` + marker + `/a.png"}}]}]}`,
		`{"model":"chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + marker + `"}}]}]}`,
		`{"model":"chat","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"iVBORw0KGgo=","format":"` + marker + `"}}]}]}`,
		`{"model":"chat","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"iVBORw0KGgo=","filename":"` + marker + `.pdf"}}]}]}`,
		`{"model":"chat","messages":[{"role":"assistant","tool_calls":[{"id":"` + marker + `","type":"function","function":{"name":"f","arguments":"` + marker + `"}}]},{"role":"tool","tool_call_id":"` + marker + `","content":"` + marker + `"}]}`,
		`{"model":"chat","messages":[{"role":"` + marker + `","content":"x"}]}`,
		`{"model":"chat","messages":[]}`,
		`{"model":"chat","model":"chat","messages":[` + user + `]}`,
		`[` + marker + `]`,
		``,
	} {
		f.Add([]byte(s))
	}

	vision := chatModel("vision", protocol.CapInputImage, protocol.CapInputAudio, protocol.CapInputFile)
	e := newEnv(f, withDeployments(chatModel("small"), vision))
	var answered int64

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)

		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		for name, vals := range rec.Header() {
			for _, v := range vals {
				if strings.Contains(strings.ToLower(name+v), strings.ToLower(marker)) {
					t.Fatalf("header %s: %s holds the caller's marker", name, v)
				}
			}
		}
		if strings.Contains(strings.ToLower(rec.Body.String()), strings.ToLower(marker)) {
			t.Fatalf("answer %d holds the caller's marker: %s", rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK {
			var eb struct {
				Error *struct {
					Type string        `json:"type"`
					Code protocol.Code `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == nil || !eb.Error.Code.Known() {
				t.Fatalf("status %d without an OpenAI error: %s", rec.Code, rec.Body)
			}
			if want := wantType(rec.Code, eb.Error.Code); eb.Error.Type != want {
				t.Fatalf("status %d, code %s: type %q, want %q", rec.Code, eb.Error.Code, eb.Error.Type, want)
			}
			if n := e.calls.Load(); n != answered {
				t.Fatalf("a refused request reached the adapter: %d calls for %d answers", n, answered)
			}
			return
		}
		answered++
		if n := e.calls.Load(); n != answered {
			t.Fatalf("%d adapter calls for %d answers", n, answered)
		}
		if ct := rec.Header().Get("Content-Type"); ct == "text/event-stream" {
			if !strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") {
				t.Fatalf("a stream that completed ends without [DONE]: %s", rec.Body)
			}
		} else if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("200 without a JSON body: %s", rec.Body)
		}
	})
}

// wantType is OpenAI's error type for status and code (spec/compat.md, "Errors").
func wantType(status int, code protocol.Code) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429 && code == protocol.CodeQuotaExhausted:
		return "insufficient_quota"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}
