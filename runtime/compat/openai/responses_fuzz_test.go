package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The seeds put marker (chat_request_test.go) wherever a caller's text could be echoed.

// FuzzResponsesRequest drives POST /v1/responses — the door's decoder and translation,
// model resolution and the native decoder behind Kit.Submit — over a fake Kit whose
// executions complete at once, and asserts for every body:
//
//   - no 5xx: every bad body gets a specific 4xx;
//   - every refusal is OpenAI's error shape with a known code matching the status, and
//     a 400 of the door's own names a location and rule of its closed sets;
//   - a refused request is never submitted (the Kit's count of created executions does
//     not move), an accepted one exactly once;
//   - no answer, headers included, holds the caller's marker.
//
// The seeds run in every `go test`; `make fuzz` fuzzes it for a bounded time.
func FuzzResponsesRequest(f *testing.F) {
	m := strings.ToLower(marker)
	for _, seed := range []string{
		`{"model":"chat","input":"hi"}`,
		`{"model":"chat","input":"hi","stream":true}`,
		`{"model":"chat","input":"hi","background":true,"store":false}`,
		`{"model":"e2e/echo","instructions":"be brief","input":[{"role":"user","content":"hi"}]}`,
		`{"model":"` + marker + `","input":"hi"}`,
		`{"model":"e2e/` + m + `","input":"hi"}`,
		`{"model":"chat","input":"hi","` + marker + `":1}`,
		`{"model":"chat","input":"hi","previous_response_id":"` + marker + `"}`,
		`{"model":"chat","input":[{"role":"` + marker + `","content":"x"}]}`,
		`{"model":"chat","input":[{"type":"` + marker + `"}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"` + marker + `"}]}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"input_text","text":"x","` + marker + `":1}]}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://` + marker + `/a"}]}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://` + m + `.example/a.png"}]}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,aGk="}]}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"input_file","filename":"` + marker + `.pdf","file_data":"aGk="}]}]}`,
		`{"model":"chat","input":[{"role":"user","content":[{"type":"input_file","file_id":"` + marker + `"}]}]}`,
		`{"model":"chat","input":[{"type":"function_call","call_id":"` + marker + `","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"` + marker + `","output":"` + marker + `"}]}`,
		`{"model":"chat","input":[{"type":"function_call","call_id":"c","name":"` + marker + ` x","arguments":"{}"}]}`,
		`{"model":"chat","input":"x","tools":[{"type":"function","name":"` + marker + `","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"` + marker + `"}}`,
		`{"model":"chat","input":"x","tools":[{"type":"` + marker + `"}]}`,
		`{"model":"chat","input":"x","tool_choice":"` + marker + `"}`,
		`{"model":"chat","input":"x","max_output_tokens":16,"temperature":0.5,"top_p":0.9}`,
		`{"model":"chat","input":"x","text":{"format":{"type":"json_schema","name":"` + marker + `","schema":{"` + marker + `":1}}}}`,
		`{"model":"chat","input":"x","metadata":{"` + m + `":"` + marker + `"}}`,
		`{"model":"chat","input":"x","metadata":{"` + marker + `":"v"}}`,
		`{"model":"chat","input":[` + strings.Repeat(`"x",`, 3) + `"x"]}`,
		`{"model":"chat","model":"chat","input":"x"}`,
		`{"model":"chat","input":[]}`,
		`[` + marker + `]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	k := newFakeKit()
	h := serveDoor(k)
	f.Fuzz(func(t *testing.T, body []byte) {
		k.mu.Lock()
		before := k.accepted
		k.mu.Unlock()
		req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		k.mu.Lock()
		created := k.accepted - before
		k.mu.Unlock()

		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		for name, vals := range rec.Header() {
			for _, v := range vals {
				if strings.Contains(strings.ToLower(name+v), m) {
					t.Fatalf("header %s: %s holds the caller's marker", name, v)
				}
			}
		}
		// A response echoes its metadata, as OpenAI's does; nothing else of the caller's
		// (the fake's output is its own).
		if strings.Contains(strings.ToLower(withoutMetadata(t, rec)), m) {
			t.Fatalf("answer %d holds the caller's marker: %s", rec.Code, rec.Body)
		}
		if rec.Code == http.StatusOK {
			if created != 1 {
				t.Fatalf("an accepted request created %d executions", created)
			}
			return
		}
		if created != 0 {
			t.Fatalf("a refused request (%d) was submitted", rec.Code)
		}
		var e errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || !e.Error.Code.Known() || e.Error.Code.HTTPStatus() != rec.Code {
			t.Fatalf("status %d without OpenAI's error shape and a matching code: %s", rec.Code, rec.Body)
		}
		if e.Error.Type != errorType(rec.Code, e.Error.Code) {
			t.Fatalf("error type %s for status %d", e.Error.Type, rec.Code)
		}
		if rec.Code == http.StatusBadRequest && !respMessageKnown(e.Error.Message) && !nativeMessage(e.Error.Message) {
			t.Fatalf("400 message %q is in neither closed set", e.Error.Message)
		}
	})
}

// nativeMessage reports whether msg is one of the native decoder's, which start with a
// native schema location the door's translation can reach (spec/http-api.md); their
// closed set is protocol's, checked by its own fuzz target.
func nativeMessage(msg string) bool {
	for _, prefix := range []string{"input: ", "input[]", "metadata", "extensions", "requirements", "routing"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// withoutMetadata is the answer with the metadata of every response it holds removed:
// the JSON object, or each event of a stream.
func withoutMetadata(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if rec.Code != http.StatusOK {
		return rec.Body.String()
	}
	strip := func(data string) string {
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("answer is not JSON: %s", data)
		}
		delete(v, "metadata")
		if r, ok := v["response"].(map[string]any); ok {
			delete(r, "metadata")
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	if rec.Header().Get("Content-Type") != "text/event-stream" {
		return strip(rec.Body.String())
	}
	var out strings.Builder
	for _, f := range frames(t, rec.Body.Bytes()) {
		out.WriteString(f.event + strip(f.data))
	}
	return out.String()
}
