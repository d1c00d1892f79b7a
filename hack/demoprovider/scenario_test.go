package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// providerCase sends one request of a provider's wire format for a model.
type providerCase struct {
	name string
	send func(t *testing.T, ts *testServer, model string, kv ...string) *http.Response
}

var providerCases = []providerCase{
	{"openai", func(t *testing.T, ts *testServer, model string, kv ...string) *http.Response {
		return ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody(model, true, nil), kv...)
	}},
	{"anthropic", func(t *testing.T, ts *testServer, model string, kv ...string) *http.Response {
		return ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody(model, true, nil), append(kv, anthropicVersion...)...)
	}},
	{"replicate", func(t *testing.T, ts *testServer, model string, kv ...string) *http.Response {
		return ts.do(t, "POST", "/replicate/v1/models/acme/"+model+"/predictions", replicateInput, kv...)
	}},
}

// errorIdentity extracts the provider's error type (or Replicate's title) and code from
// a documented error body, failing if the body does not have the provider's shape.
func errorIdentity(t *testing.T, provider string, resp *http.Response) (typ, code string) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	switch provider {
	case "openai":
		var e struct {
			Error *struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" {
			t.Fatalf("not an OpenAI error body: %s", b)
		}
		if e.Error.Code != nil {
			code = *e.Error.Code
		}
		return e.Error.Type, code
	case "anthropic":
		var e struct {
			Type  string `json:"type"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error == nil || e.Error.Message == "" {
			t.Fatalf("not an Anthropic error body: %s", b)
		}
		return e.Error.Type, ""
	default:
		var e struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
			Status int    `json:"status"`
		}
		if json.Unmarshal(b, &e) != nil || e.Detail == "" || e.Status != resp.StatusCode {
			t.Fatalf("not a Replicate problem body: %s", b)
		}
		return e.Title, ""
	}
}

func TestScriptedErrors(t *testing.T) {
	want := map[string]map[int][2]string{
		"openai": {
			503: {"server_error", ""},
			429: {"requests", "rate_limit_exceeded"},
			401: {"invalid_request_error", "invalid_api_key"},
		},
		"anthropic": {
			503: {"api_error", ""},
			429: {"rate_limit_error", ""},
			401: {"authentication_error", ""},
		},
		"replicate": {
			503: {"Service unavailable", ""},
			429: {"Request was throttled", ""},
			401: {"Unauthenticated", ""},
		},
	}
	ts := startServer(t, config{})
	for _, pc := range providerCases {
		for _, status := range []int{503, 429, 401} {
			model := "demo-error-" + strconv.Itoa(status)
			t.Run(pc.name+"/"+model, func(t *testing.T) {
				resp := pc.send(t, ts, model)
				if resp.StatusCode != status {
					t.Fatalf("status %d, want %d", resp.StatusCode, status)
				}
				if ra := resp.Header.Get("Retry-After"); (status == 429) != (ra == "1") {
					t.Errorf("retry-after = %q", ra)
				}
				typ, code := errorIdentity(t, pc.name, resp)
				if w := want[pc.name][status]; typ != w[0] || code != w[1] {
					t.Errorf("error type/code = %q/%q, want %q/%q", typ, code, w[0], w[1])
				}
			})
		}
	}
}

func TestAPIKeyEnforcement(t *testing.T) {
	const key = "sk-demo-secret"
	ts := startServer(t, config{APIKey: key})
	creds := map[string]struct{ good, wrongPlace []string }{
		"openai":    {[]string{"Authorization", "Bearer " + key}, []string{"x-api-key", key}},
		"anthropic": {[]string{"x-api-key", key}, []string{"Authorization", "Bearer " + key}},
		"replicate": {[]string{"Authorization", "Token " + key}, []string{"x-api-key", key}},
	}
	for _, pc := range providerCases {
		c := creds[pc.name]
		for name, kv := range map[string][]string{
			"missing":     nil,
			"wrong key":   {c.good[0], strings.Replace(c.good[1], key, "sk-wrong", 1)},
			"wrong place": c.wrongPlace,
			"no scheme":   {"Authorization", key},
		} {
			t.Run(pc.name+"/"+name, func(t *testing.T) {
				resp := pc.send(t, ts, "demo", kv...)
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401", resp.StatusCode)
				}
				if typ, _ := errorIdentity(t, pc.name, resp); typ == "" {
					t.Error("401 body has no error type")
				}
			})
		}
		t.Run(pc.name+"/good", func(t *testing.T) {
			resp := pc.send(t, ts, "demo", c.good...)
			if resp.StatusCode/100 != 2 {
				t.Fatalf("status %d with the right key", resp.StatusCode)
			}
		})
	}
	// Replicate also accepts the Bearer scheme, on every prediction endpoint.
	var p predictionJSON
	auth := []string{"Authorization", "Bearer " + key}
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/models/acme/demo/predictions", replicateInput, auth...), http.StatusCreated, &p)
	if resp := ts.do(t, "GET", "/replicate/v1/predictions/"+p.ID, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("get without key: status %d", resp.StatusCode)
	}
	if resp := ts.do(t, "POST", "/replicate/v1/predictions/"+p.ID+"/cancel", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cancel without key: status %d", resp.StatusCode)
	}
	if resp := ts.do(t, "GET", "/replicate/v1/predictions/"+p.ID, nil, auth...); resp.StatusCode != http.StatusOK {
		t.Errorf("get with key: status %d", resp.StatusCode)
	}
}

func TestTruncateOmitsTerminalFrames(t *testing.T) {
	ts := startServer(t, config{})
	resp := ts.do(t, "POST", "/openai/v1/chat/completions",
		openAIBody("gpt-truncate", true, map[string]any{"stream_options": map[string]any{"include_usage": true}}))
	frames, complete := readFrames(t, resp.Body)
	if !complete {
		t.Fatal("stream ended inside a frame")
	}
	equalLines(t, describeOpenAI(t, frames), []string{
		`role=assistant content="" `,
		`content="Hel" `, `content="lo," `, `content=" wo" `, `content="rl" `, `content="d!" `,
	})

	resp = ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-truncate", true, nil), anthropicVersion...)
	frames, _ = readFrames(t, resp.Body)
	equalLines(t, describeAnthropic(t, frames), []string{
		`message_start id=true role=assistant model=claude-truncate in=4`,
		`content_block_start 0 text id=false name=""`,
		`ping`,
		`content_block_delta 0 text "Hel"`,
		`content_block_delta 0 text "lo,"`,
		`content_block_delta 0 text " wo"`,
		`content_block_delta 0 text "rl"`,
		`content_block_delta 0 text "d!"`,
	})

	// Non-streaming: half a JSON body, then the end.
	resp = ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-truncate", false, nil))
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || json.Valid(b) || !strings.HasPrefix(string(b), `{"id":`) {
		t.Errorf("truncated body: status %d, %s", resp.StatusCode, b)
	}
}

func TestStallHoldsUntilClientLeaves(t *testing.T) {
	tests := []struct {
		name      string
		send      func(t *testing.T, ts *testServer) *http.Response
		lastFrame string // the stream stalls after the line containing this
	}{
		{"openai", func(t *testing.T, ts *testServer) *http.Response {
			return ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-stall", true, nil))
		}, `"content":"Hel"`},
		{"anthropic", func(t *testing.T, ts *testServer) *http.Response {
			return ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-stall", true, nil), anthropicVersion...)
		}, `"text":"Hel"`},
		{"gemini", func(t *testing.T, ts *testServer) *http.Response {
			return ts.do(t, "POST", geminiPath("gemini-stall", "streamGenerateContent")+"?alt=sse", geminiBody(nil))
		}, `"text":"Hel"`},
		{"bedrock", func(t *testing.T, ts *testServer) *http.Response {
			return ts.do(t, "POST", "/model/demo-stall/converse-stream", bedrockBody(nil))
		}, `"text":"Hel"`},
		{"openai non-streaming", func(t *testing.T, ts *testServer) *http.Response {
			return ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-stall", false, nil))
		}, `{"id":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, config{})
			resp := tt.send(t, ts)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			// Read whatever arrives (a non-streaming body has no newline to wait for)
			// until the expected last piece has been seen.
			br := bufio.NewReader(resp.Body)
			var seen []byte
			buf := make([]byte, 512)
			for !strings.Contains(string(seen), tt.lastFrame) {
				n, err := br.Read(buf)
				seen = append(seen, buf[:n]...)
				if err != nil {
					t.Fatalf("stream ended before %s: %v", tt.lastFrame, err)
				}
			}
			// Nothing more arrives while the client waits...
			more := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(br)
				more <- strings.TrimSpace(string(b))
			}()
			select {
			case b := <-more:
				t.Fatalf("stream continued with %q", b)
			case <-ts.returned:
				t.Fatal("handler returned while the client was still there")
			case <-time.After(150 * time.Millisecond):
			}
			// ...and the handler returns once the client goes away.
			resp.Body.Close()
			ts.waitReturned(t)
			<-more
		})
	}
}

func TestSlowPacesEveryPiece(t *testing.T) {
	const slow = 40 * time.Millisecond
	ts := startServer(t, config{Chunks: 3, SlowDelay: slow})
	start := time.Now()
	resp := ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-slow", true, nil))
	frames, _ := readFrames(t, resp.Body)
	if elapsed := time.Since(start); elapsed < 3*slow {
		t.Errorf("slow stream took %s, want at least %s", elapsed, 3*slow)
	}
	if len(frames) != 6 || frames[len(frames)-1].data != "[DONE]" {
		t.Errorf("slow stream frames = %v", frames)
	}

	start = time.Now()
	resp = ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-slow", false, nil), anthropicVersion...)
	_, _ = io.Copy(io.Discard, resp.Body)
	if elapsed := time.Since(start); elapsed < 3*slow || resp.StatusCode != http.StatusOK {
		t.Errorf("slow non-streaming answer: status %d after %s, want ≥ %s", resp.StatusCode, elapsed, 3*slow)
	}
}

func TestClientDisconnectStopsPacedStream(t *testing.T) {
	ts := startServer(t, config{Chunks: 5, Delay: time.Hour})
	resp := ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("gpt-demo", true, nil))
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"role":"assistant"`) {
		t.Fatalf("first line %q, %v", line, err)
	}
	resp.Body.Close()
	ts.waitReturned(t)
}
