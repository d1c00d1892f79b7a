package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Paths of the Gemini API and of Vertex AI for model m.
func geminiPath(m, method string) string { return "/v1beta/models/" + m + ":" + method }

func vertexPath(m, method string) string {
	return "/v1/projects/demo-project/locations/us-central1/publishers/google/models/" + m + ":" + method
}

// geminiBody is a GenerateContentRequest with a system instruction and one user turn.
func geminiBody(extra map[string]any) map[string]any {
	b := map[string]any{
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "Be brief."}}},
		"contents":          []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": testText}}}},
		"generationConfig":  map[string]any{"maxOutputTokens": 64, "temperature": 0},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// geminiTools declares get_weather (first) and other.
var geminiTools = []any{map[string]any{"functionDeclarations": []any{
	map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}},
	map[string]any{"name": "other"},
}}}

// geminiResponseView is what the tests read from a GenerateContentResponse.
type geminiResponseView struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         *string `json:"text"`
				FunctionCall *struct {
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
		Index        *int   `json:"index"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
		TotalTokenCount      int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
	ResponseID   string `json:"responseId"`
}

// describe reduces r to one comparable line, checking the shape every response shares.
func (r geminiResponseView) describe(t *testing.T) string {
	t.Helper()
	if len(r.Candidates) != 1 || r.Candidates[0].Index == nil || *r.Candidates[0].Index != 0 ||
		r.Candidates[0].Content.Role != "model" || r.UsageMetadata == nil || r.ResponseID == "" {
		t.Fatalf("response shape: %+v", r)
	}
	c := r.Candidates[0]
	var line string
	for _, p := range c.Content.Parts {
		switch {
		case p.Text != nil:
			line += fmt.Sprintf("text %q ", *p.Text)
		case p.FunctionCall != nil:
			line += fmt.Sprintf("call %s(%s) ", p.FunctionCall.Name, p.FunctionCall.Args)
		}
	}
	if c.FinishReason != "" {
		line += c.FinishReason + " "
	}
	u := r.UsageMetadata
	return line + fmt.Sprintf("usage %d+%d=%d", u.PromptTokenCount, u.CandidatesTokenCount, u.TotalTokenCount)
}

// readGeminiStream reads a whole alt=sse stream, checking that frames are separated by
// CRLF CRLF as Google's are, and that it ends after a complete frame.
func readGeminiStream(t *testing.T, resp *http.Response) []geminiResponseView {
	t.Helper()
	checkSSEHeaders(t, resp)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(string(b), "\r\n\r\n")
	if frames[len(frames)-1] != "" {
		t.Fatalf("stream does not end with CRLF CRLF: %q", b)
	}
	var out []geminiResponseView
	for _, f := range frames[:len(frames)-1] {
		data, ok := strings.CutPrefix(f, "data: ")
		if !ok || strings.ContainsAny(data, "\r\n") {
			t.Fatalf("frame %q is not one data line", f)
		}
		var r geminiResponseView
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		out = append(out, r)
	}
	return out
}

// describeGemini describes every chunk, checking they share one response id.
func describeGemini(t *testing.T, chunks []geminiResponseView) []string {
	t.Helper()
	var lines []string
	for _, c := range chunks {
		if c.ResponseID != chunks[0].ResponseID {
			t.Fatalf("response ids %q and %q in one stream", chunks[0].ResponseID, c.ResponseID)
		}
		lines = append(lines, c.describe(t))
	}
	return lines
}

func TestGeminiStream(t *testing.T) {
	ts := startServer(t, config{})
	chunks := readGeminiStream(t, ts.do(t, "POST", geminiPath("gemini-demo", "streamGenerateContent")+"?alt=sse", geminiBody(nil)))
	// Chunks before the last carry only the prompt count; the last one the whole usage.
	equalLines(t, describeGemini(t, chunks), []string{
		`text "Hel" usage 4+0=4`,
		`text "lo," usage 4+0=4`,
		`text " wo" usage 4+0=4`,
		`text "rl" usage 4+0=4`,
		`text "d!" usage 4+0=4`,
		`text "" STOP usage 4+5=9`,
	})
	var text string
	for _, c := range chunks {
		text += *c.Candidates[0].Content.Parts[0].Text
		if c.ModelVersion != "gemini-demo" {
			t.Errorf("modelVersion = %q", c.ModelVersion)
		}
	}
	if text != testText {
		t.Errorf("joined text %q, want %q", text, testText)
	}
}

func TestGeminiStreamToolCall(t *testing.T) {
	ts := startServer(t, config{})
	chunks := readGeminiStream(t, ts.do(t, "POST", geminiPath("gemini-demo", "streamGenerateContent")+"?alt=sse",
		geminiBody(map[string]any{"tools": geminiTools})))
	// Gemini sends a function call whole, in the chunk that ends the answer.
	equalLines(t, describeGemini(t, chunks), []string{
		`call get_weather({"city":"Paris"}) STOP usage 4+5=9`,
	})
}

func TestGeminiFunctionResponseIsEchoed(t *testing.T) {
	ts := startServer(t, config{Chunks: 1})
	call := map[string]any{"functionCall": map[string]any{"name": "get_weather", "args": map[string]any{"city": "Paris"}}}
	turns := func(response any) map[string]any {
		return geminiBody(map[string]any{"tools": geminiTools, "contents": []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Weather?"}}},
			map[string]any{"role": "model", "parts": []any{call}},
			map[string]any{"role": "user", "parts": []any{map[string]any{
				"functionResponse": map[string]any{"name": "get_weather", "response": response},
			}}},
		}})
	}
	// Prompt tokens count text parts ("Be brief.", "Weather?"), not the function response.
	for _, tt := range []struct {
		response any
		want     string
	}{
		{map[string]any{"output": "Sunny, 21C"}, `text "Sunny, 21C" STOP usage 3+1=4`},
		{map[string]any{"output": map[string]any{"temp": 21}}, `text "{\"temp\":21}" STOP usage 3+1=4`},
		{map[string]any{"temp": 21}, `text "{\"temp\":21}" STOP usage 3+1=4`},
	} {
		var got geminiResponseView
		decodeJSON(t, ts.do(t, "POST", geminiPath("gemini-demo", "generateContent"), turns(tt.response)), http.StatusOK, &got)
		if line := got.describe(t); line != tt.want {
			t.Errorf("response %v: got %s, want %s", tt.response, line, tt.want)
		}
	}
}

func TestGeminiNonStreaming(t *testing.T) {
	ts := startServer(t, config{})
	for _, tt := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"text", nil, `text "Hello, world!" STOP usage 4+5=9`},
		{"tool", map[string]any{"tools": geminiTools}, `call get_weather({"city":"Paris"}) STOP usage 4+5=9`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got geminiResponseView
			decodeJSON(t, ts.do(t, "POST", geminiPath("gemini-demo", "generateContent"), geminiBody(tt.extra)), http.StatusOK, &got)
			if line := got.describe(t); line != tt.want {
				t.Errorf("got %s, want %s", line, tt.want)
			}
		})
	}
}

func TestVertexPaths(t *testing.T) {
	const key = "sk-demo"
	ts := startServer(t, config{Chunks: 2, APIKey: key})
	// Vertex takes an OAuth access token the demo cannot check: any Bearer token passes.
	token := []string{"Authorization", "Bearer ya29.demo-access-token"}
	chunks := readGeminiStream(t, ts.do(t, "POST", vertexPath("gemini-2.5-flash", "streamGenerateContent")+"?alt=sse", geminiBody(nil), token...))
	equalLines(t, describeGemini(t, chunks), []string{
		`text "Hello, " usage 4+0=4`,
		`text "world!" usage 4+0=4`,
		`text "" STOP usage 4+2=6`,
	})
	var got geminiResponseView
	decodeJSON(t, ts.do(t, "POST", vertexPath("gemini-2.5-flash", "generateContent"), geminiBody(nil), token...), http.StatusOK, &got)
	if line := got.describe(t); line != `text "Hello, world!" STOP usage 4+2=6` || got.ModelVersion != "gemini-2.5-flash" {
		t.Errorf("got %s (model %q)", line, got.ModelVersion)
	}

	for name, kv := range map[string][]string{
		"no token":     nil,
		"empty bearer": {"Authorization", "Bearer "},
		"api key":      {"x-goog-api-key", key},
	} {
		t.Run(name, func(t *testing.T) {
			status, code, _ := googleErrorOf(t, ts.do(t, "POST", vertexPath("gemini-demo", "generateContent"), geminiBody(nil), kv...))
			if status != http.StatusUnauthorized || code != "UNAUTHENTICATED" {
				t.Errorf("got %d %s, want 401 UNAUTHENTICATED", status, code)
			}
		})
	}
}

// googleErrorOf decodes a google.rpc.Status body, failing unless it has that shape and
// its code repeats the HTTP status. reason is the first ErrorInfo reason, if any.
func googleErrorOf(t *testing.T, resp *http.Response) (status int, code, reason string) {
	t.Helper()
	var e struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []struct {
				Type       string `json:"@type"`
				Reason     string `json:"reason"`
				RetryDelay string `json:"retryDelay"`
			} `json:"details"`
		} `json:"error"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Code != resp.StatusCode {
		t.Fatalf("not a google.rpc.Status body (status %d): %s", resp.StatusCode, b)
	}
	for _, d := range e.Error.Details {
		switch d.Type {
		case "type.googleapis.com/google.rpc.ErrorInfo":
			if reason == "" {
				reason = d.Reason
			}
		case "type.googleapis.com/google.rpc.RetryInfo":
			if d.RetryDelay != "1s" {
				t.Errorf("retryDelay = %q", d.RetryDelay)
			}
		}
	}
	return resp.StatusCode, e.Error.Status, reason
}

func TestGeminiScriptedErrors(t *testing.T) {
	ts := startServer(t, config{})
	tests := []struct {
		path, model string
		status      int
		code        string
		reason      string
	}{
		{"gemini", "gemini-error-503", 503, "UNAVAILABLE", ""},
		{"gemini", "gemini-error-429", 429, "RESOURCE_EXHAUSTED", ""},
		// The Gemini API rejects a key with a 400 whose reason says so.
		{"gemini", "gemini-error-401", 400, "INVALID_ARGUMENT", "API_KEY_INVALID"},
		{"vertex", "gemini-error-503", 503, "UNAVAILABLE", ""},
		{"vertex", "gemini-error-401", 401, "UNAUTHENTICATED", ""},
	}
	for _, tt := range tests {
		for _, method := range []string{"streamGenerateContent?alt=sse", "generateContent"} {
			t.Run(tt.path+"/"+tt.model+"/"+method, func(t *testing.T) {
				path := geminiPath(tt.model, method)
				if tt.path == "vertex" {
					path = vertexPath(tt.model, method)
				}
				resp := ts.do(t, "POST", path, geminiBody(nil))
				if ra := resp.Header.Get("Retry-After"); (tt.status == 429) != (ra == "1") {
					t.Errorf("retry-after = %q", ra)
				}
				status, code, reason := googleErrorOf(t, resp)
				if status != tt.status || code != tt.code || reason != tt.reason {
					t.Errorf("got %d %s %q, want %d %s %q", status, code, reason, tt.status, tt.code, tt.reason)
				}
			})
		}
	}
}

func TestGeminiTruncateOmitsFinalChunk(t *testing.T) {
	ts := startServer(t, config{Chunks: 2})
	chunks := readGeminiStream(t, ts.do(t, "POST", geminiPath("gemini-truncate", "streamGenerateContent")+"?alt=sse", geminiBody(nil)))
	equalLines(t, describeGemini(t, chunks), []string{
		`text "Hello, " usage 4+0=4`,
		`text "world!" usage 4+0=4`,
	})
}

func TestGeminiAPIKey(t *testing.T) {
	const key = "AIza-demo"
	ts := startServer(t, config{APIKey: key})
	path := geminiPath("gemini-demo", "generateContent")
	tests := []struct {
		name   string
		path   string
		kv     []string
		status int
		code   string
		reason string
	}{
		{"missing", path, nil, 403, "PERMISSION_DENIED", ""},
		{"wrong", path, []string{"x-goog-api-key", "AIza-wrong"}, 400, "INVALID_ARGUMENT", "API_KEY_INVALID"},
		{"bearer", path, []string{"Authorization", "Bearer " + key}, 403, "PERMISSION_DENIED", ""},
		// The API also takes ?key=; the demo refuses it, so keys stay out of URLs.
		{"query", path + "?key=" + key, nil, 403, "PERMISSION_DENIED", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code, reason := googleErrorOf(t, ts.do(t, "POST", tt.path, geminiBody(nil), tt.kv...))
			if status != tt.status || code != tt.code || reason != tt.reason {
				t.Errorf("got %d %s %q, want %d %s %q", status, code, reason, tt.status, tt.code, tt.reason)
			}
		})
	}
	var got geminiResponseView
	decodeJSON(t, ts.do(t, "POST", path, geminiBody(nil), "x-goog-api-key", key), http.StatusOK, &got)
}

func TestGeminiBadRequests(t *testing.T) {
	ts := startServer(t, config{})
	tests := []struct {
		name   string
		path   string
		body   any
		status int
	}{
		{"stream without alt=sse", geminiPath("gemini-demo", "streamGenerateContent"), geminiBody(nil), 400},
		{"unknown method", geminiPath("gemini-demo", "countTokens"), geminiBody(nil), 404},
		{"no method", "/v1beta/models/gemini-demo", geminiBody(nil), 404},
		{"no contents", geminiPath("gemini-demo", "generateContent"), map[string]any{"contents": []any{}}, 400},
		{"not an object", geminiPath("gemini-demo", "generateContent"), []int{1}, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, _, _ := googleErrorOf(t, ts.do(t, "POST", tt.path, tt.body)); status != tt.status {
				t.Errorf("status %d, want %d", status, tt.status)
			}
		})
	}
}
