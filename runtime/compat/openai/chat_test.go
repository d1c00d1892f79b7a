package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// completion is the part of a chat.completion (or chunk) the tests read.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message *struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Delta *struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *openAIError `json:"error"`
}

type openAIError struct {
	Message     string  `json:"message"`
	Type        string  `json:"type"`
	Param       *string `json:"param"`
	Code        string  `json:"code"`
	Switchboard struct {
		Retryable    bool  `json:"retryable"`
		RetryAfterMs int64 `json:"retry_after_ms"`
	} `json:"switchboard"`
}

func decodeCompletion(t *testing.T, s string) completion {
	t.Helper()
	var c completion
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("not a chat.completion: %v: %s", err, s)
	}
	return c
}

const hello = `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`

func TestChatCompletion(t *testing.T) {
	e := newEnv(t)
	e.setScript(reply("Hel", "lo"))
	resp := e.post(t, context.Background(), hello)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	c := decodeCompletion(t, body)
	id := resp.Header.Get(compat.ExecutionHeader)
	if id == "" || c.ID != id || c.Object != "chat.completion" || c.Model != "small-model" || c.Created == 0 {
		t.Errorf("completion %s (header id %q)", body, id)
	}
	if len(c.Choices) != 1 || c.Choices[0].Message == nil || c.Choices[0].Message.Content == nil ||
		*c.Choices[0].Message.Content != "Hello" || c.Choices[0].Message.Role != "assistant" || *c.Choices[0].FinishReason != "stop" {
		t.Errorf("choices: %s", body)
	}
	if c.Usage == nil || c.Usage.PromptTokens != 7 || c.Usage.CompletionTokens != 2 || c.Usage.TotalTokens != 9 {
		t.Errorf("usage: %s", body)
	}
	// The same execution, natively.
	st := e.waitStatus(t, id, protocol.StatusCompleted)
	if st.Ability != "chat" || st.Route == nil || st.Route.Model != "small-model" {
		t.Errorf("status %+v", st)
	}
	if got := e.lastRequest(t).Input; !cmp.Equal(got, []protocol.Part{{Type: protocol.PartText, Text: "hi"}}) {
		t.Errorf("input %+v", got)
	}
}

func TestChatCompletionStreamed(t *testing.T) {
	e := newEnv(t)
	e.setScript(reply("Hel", "lo", " <world> \"quoted\"\n"))
	resp := e.post(t, context.Background(),
		`{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	id := resp.Header.Get(compat.ExecutionHeader)
	fs := frames(t, resp)
	if len(fs) < 5 || fs[len(fs)-1] != "[DONE]" {
		t.Fatalf("frames: %q", fs)
	}
	var text strings.Builder
	for i, f := range fs[:len(fs)-1] {
		c := decodeCompletion(t, f)
		if c.ID != id || c.Object != "chat.completion.chunk" || c.Model != "small-model" {
			t.Errorf("frame %d: %s", i, f)
		}
		switch {
		case i == 0:
			if len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant" {
				t.Errorf("first frame: %s", f)
			}
		case i == len(fs)-3:
			if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "stop" {
				t.Errorf("finish frame: %s", f)
			}
		case i == len(fs)-2:
			if len(c.Choices) != 0 || c.Usage == nil || c.Usage.TotalTokens != 10 {
				t.Errorf("usage frame: %s", f)
			}
		default:
			if c.Choices[0].Delta.Content == nil || c.Choices[0].FinishReason != nil {
				t.Errorf("content frame: %s", f)
			}
			text.WriteString(*c.Choices[0].Delta.Content)
		}
	}
	if got := text.String(); got != "Hello <world> \"quoted\"\n" {
		t.Errorf("streamed text %q", got)
	}
}

func TestChatToolCalls(t *testing.T) {
	e := newEnv(t)
	e.setScript(func(_ context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		for _, err := range []error{
			emit.ToolStarted(0, "call_1", "get_weather"),
			emit.ToolArgs("call_1", `{"city":`),
			emit.ToolArgs("call_1", `"Paris"}`),
			emit.ToolStarted(1, "call_2", "get_time"),
			emit.ToolArgs("call_2", `{}`),
		} {
			if err != nil {
				return engine.Outcome{}, err
			}
		}
		return engine.Outcome{FinishReason: "tool_use"}, nil
	})
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},{"type":"function","function":{"name":"get_time"}}]`

	t.Run("whole", func(t *testing.T) {
		body := readAll(t, e.post(t, context.Background(),
			`{"model":"chat",`+tools+`,"messages":[{"role":"user","content":"weather?"}]}`))
		c := decodeCompletion(t, body)
		m := c.Choices[0].Message
		if m.Content != nil || len(m.ToolCalls) != 2 || *c.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("completion %s", body)
		}
		if tc := m.ToolCalls[0]; tc.ID != "call_1" || tc.Type != "function" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris"}` {
			t.Errorf("call 0: %+v", tc)
		}
		if tc := m.ToolCalls[1]; tc.ID != "call_2" || tc.Function.Name != "get_time" || tc.Function.Arguments != `{}` {
			t.Errorf("call 1: %+v", tc)
		}
		in := e.lastRequest(t).Input
		if len(in) != 3 || in[1].Type != protocol.PartTool || in[2].Name != "get_time" || string(in[2].Parameters) != `{"type":"object","properties":{}}` {
			t.Errorf("input %+v", in)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		fs := frames(t, e.post(t, context.Background(),
			`{"model":"chat","stream":true,`+tools+`,"messages":[{"role":"user","content":"weather?"}]}`))
		type call struct{ id, name, args string }
		var calls []call
		finish := ""
		for _, f := range fs[:len(fs)-1] {
			c := decodeCompletion(t, f)
			if fr := c.Choices[0].FinishReason; fr != nil {
				finish = *fr
			}
			for _, tc := range c.Choices[0].Delta.ToolCalls {
				if tc.Index == len(calls) {
					if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
						t.Errorf("a call's first chunk lacks its id, type or name: %s", f)
					}
					calls = append(calls, call{id: tc.ID, name: tc.Function.Name})
				} else if tc.ID != "" || tc.Function.Name != "" {
					t.Errorf("a later chunk repeats the id or name: %s", f)
				}
				calls[tc.Index].args += tc.Function.Arguments
			}
		}
		want := []call{{"call_1", "get_weather", `{"city":"Paris"}`}, {"call_2", "get_time", `{}`}}
		if diff := cmp.Diff(want, calls, cmp.AllowUnexported(call{})); diff != "" || finish != "tool_calls" || fs[len(fs)-1] != "[DONE]" {
			t.Errorf("calls (-want +got):\n%s\nfinish %q, frames %q", diff, finish, fs)
		}
	})
}

func TestChatFallback(t *testing.T) {
	flaky := chatModel("flaky")
	flaky.Priority = 10
	e := newEnv(t, withDeployments(flaky, chatModel("small")))
	ok := reply("fine")
	e.setScript(func(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		if a.Deployment.Ref.Name == "flaky" {
			return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "the provider is unavailable")
		}
		return ok(ctx, a, emit)
	})
	c := decodeCompletion(t, readAll(t, e.post(t, context.Background(), hello)))
	if c.Model != "small-model" || *c.Choices[0].Message.Content != "fine" {
		t.Errorf("completion %+v", c)
	}
	if got := e.triedDeployments(); !cmp.Equal(got, []string{"ai/flaky", "ai/small"}) {
		t.Errorf("tried %v", got)
	}

	t.Run("a pinned deployment has no fallback", func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			resp := e.post(t, context.Background(),
				`{"model":"ai/flaky","stream":`+strconv.FormatBool(stream)+`,"messages":[{"role":"user","content":"hi"}]}`)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Should-Retry") != "true" || resp.Header.Get(compat.ExecutionHeader) == "" {
				t.Errorf("stream %v: %d %v %s", stream, resp.StatusCode, resp.Header, body)
			}
			c := decodeCompletion(t, body)
			if c.Error == nil || c.Error.Type != "server_error" || c.Error.Code != "provider_unavailable" || !c.Error.Switchboard.Retryable {
				t.Errorf("stream %v: %s", stream, body)
			}
		}
	})
}

func TestChatPinnedModel(t *testing.T) {
	e := newEnv(t, withDeployments(chatModel("small"), chatModel("large")))
	c := decodeCompletion(t, readAll(t, e.post(t, context.Background(),
		`{"model":"ai/large","messages":[{"role":"user","content":"hi"}]}`)))
	if c.Model != "large-model" {
		t.Errorf("model %q", c.Model)
	}
	r := e.lastRequest(t)
	if r.Ability != "chat" || r.Routing == nil || !cmp.Equal(r.Routing.Only, []string{"ai/large"}) {
		t.Errorf("request ability %q routing %+v", r.Ability, r.Routing)
	}
}

func TestChatErrors(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name, body    string
		status        int
		typ, code     string
		param         string // "" for none
		messagePrefix string
	}{
		{"unknown model", `{"model":"gpt-ZQXCANARY","messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error", "not_found", "", "the model"},
		{"unknown field", `{"model":"chat","ZQXCANARY":1,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "invalid_request", "body", "body: unknown field"},
		{"unsupported field", `{"model":"chat","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "invalid_request", "logprobs", "logprobs: not supported"},
		{"message field", `{"model":"chat","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"assistant","content":"x","audio":{"id":"a"}}]}`, 400, "invalid_request_error", "invalid_request", "messages[2].audio", "messages[2].audio: not supported"},
		{"n", `{"model":"chat","n":2,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "invalid_request", "n", "n: only 1"},
		{"image to a text-only model", `{"model":"chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`, 422, "invalid_request_error", "unsupported_capability", "", ""},
		{"not JSON", `{"model":`, 400, "invalid_request_error", "invalid_request", "body", "body: not valid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.calls.Load()
			resp := e.post(t, context.Background(), tc.body)
			body := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			c := decodeCompletion(t, body)
			if c.Error == nil || c.Error.Type != tc.typ || c.Error.Code != tc.code || !strings.HasPrefix(c.Error.Message, tc.messagePrefix) {
				t.Errorf("error %s", body)
			}
			if got := ""; c.Error != nil && c.Error.Param != nil {
				got = *c.Error.Param
				if got != tc.param {
					t.Errorf("param %q, want %q", got, tc.param)
				}
			} else if tc.param != "" {
				t.Errorf("no param, want %q", tc.param)
			}
			if strings.Contains(strings.ToLower(body), "zqxcanary") {
				t.Errorf("the answer echoes the caller: %s", body)
			}
			if resp.Header.Get(compat.ExecutionHeader) != "" || e.calls.Load() != before {
				t.Error("a refused request was submitted")
			}
		})
	}
}

func TestChatFailureAfterOutput(t *testing.T) {
	e := newEnv(t)
	e.setScript(func(_ context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		if err := emit.Text(0, "partial"); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "the provider's stream ended early")
	})

	t.Run("streamed: one error frame and no [DONE]", func(t *testing.T) {
		resp := e.post(t, context.Background(), `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		fs := frames(t, resp)
		last := decodeCompletion(t, fs[len(fs)-1])
		if last.Error == nil || last.Error.Code != "provider_unavailable" || last.Error.Type != "server_error" || last.Error.Switchboard.Retryable {
			t.Errorf("last frame %s", fs[len(fs)-1])
		}
		for _, f := range fs {
			if f == "[DONE]" {
				t.Errorf("a failed stream ends with [DONE]: %q", fs)
			}
		}
		if !strings.Contains(strings.Join(fs, "\n"), `"content":"partial"`) {
			t.Errorf("the output before the failure is missing: %q", fs)
		}
	})
	t.Run("whole: the error", func(t *testing.T) {
		resp := e.post(t, context.Background(), hello)
		body := readAll(t, resp)
		c := decodeCompletion(t, body)
		if resp.StatusCode != http.StatusServiceUnavailable || c.Error == nil || c.Error.Switchboard.Retryable || resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})
}

func TestChatContentFiltered(t *testing.T) {
	e := newEnv(t)
	e.setScript(func(_ context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		if err := emit.Text(0, "I will"); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{}, protocol.NewError(protocol.CodeContentFiltered, "the provider refused the content")
	})
	c := decodeCompletion(t, readAll(t, e.post(t, context.Background(), hello)))
	if c.Error != nil || *c.Choices[0].FinishReason != "content_filter" || *c.Choices[0].Message.Content != "I will" {
		t.Errorf("completion %+v", c)
	}
	fs := frames(t, e.post(t, context.Background(), `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if fs[len(fs)-1] != "[DONE]" || !strings.Contains(fs[len(fs)-2], `"finish_reason":"content_filter"`) {
		t.Errorf("frames %q", fs)
	}
}

// A stream waits for its first output to write its head; after a keep-alive interval
// without any event it writes it and keeps the connection alive.
func TestChatStreamHead(t *testing.T) {
	e := newEnv(t, withKeepAlive(50*time.Millisecond))
	g := newGate()
	e.setScript(g.script)
	resp := e.post(t, context.Background(), `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	// The head came after the interval, before any output.
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	g.send(t, "late")
	close(g.steps)
	fs := frames(t, resp)
	if len(fs) != 4 || !strings.Contains(fs[1], `"late"`) || fs[3] != "[DONE]" {
		t.Errorf("frames %q", fs)
	}
}

// A call that leaves before its execution ends cancels it, unless it carried an
// Idempotency-Key: then the same request re-attaches and replays the whole answer.
func TestChatDisconnect(t *testing.T) {
	stream := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, body string
	}{{"streamed", stream}, {"whole", hello}} {
		t.Run(tc.name+" without a key: cancelled", func(t *testing.T) {
			e := newEnv(t)
			g := newGate()
			e.setScript(g.script)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan *http.Response, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/v1/chat/completions", strings.NewReader(tc.body))
				req.Header.Set("Content-Type", "application/json")
				resp, _ := e.srv.Client().Do(req)
				done <- resp
			}()
			<-g.started
			id := e.lastExecution(t)
			cancel()
			<-done
			st := e.waitStatus(t, id, protocol.StatusFailed)
			if st.Error == nil || st.Error.Code != protocol.CodeCancelled {
				t.Errorf("status %+v", st)
			}
		})
	}

	t.Run("with a key: kept, and re-attached from the start", func(t *testing.T) {
		e := newEnv(t)
		g := newGate()
		e.setScript(g.script)
		ctx, cancel := context.WithCancel(context.Background())
		resp := make(chan *http.Response, 1)
		go func() {
			resp <- e.post(t, ctx, stream, "Idempotency-Key", "k-1")
		}()
		g.send(t, "one ")
		first := <-resp
		id := first.Header.Get(compat.ExecutionHeader)
		buf := make([]byte, 1)
		if _, err := first.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		cancel()
		first.Body.Close()
		g.send(t, "two")
		if st, err := e.client.Get(context.Background(), id); err != nil || st.Status.Terminal() {
			t.Fatalf("the keyed execution ended when its caller left: %+v %v", st, err)
		}
		again := e.post(t, context.Background(), stream, "Idempotency-Key", "k-1")
		if got := again.Header.Get(compat.ExecutionHeader); got != id {
			t.Fatalf("the retry is execution %q, not %q", got, id)
		}
		close(g.steps)
		var text strings.Builder
		fs := frames(t, again)
		for _, f := range fs[:len(fs)-1] {
			c := decodeCompletion(t, f)
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil {
				text.WriteString(*c.Choices[0].Delta.Content)
			}
		}
		if text.String() != "one two" || fs[len(fs)-1] != "[DONE]" {
			t.Errorf("replayed %q: %q", text.String(), fs)
		}
		if n := e.calls.Load(); n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
	})
}

// lastExecution is the execution of the latest attempt.
func (e *env) lastExecution(t *testing.T) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ids) == 0 {
		t.Fatal("no attempt ran")
	}
	return e.ids[len(e.ids)-1]
}

func TestModels(t *testing.T) {
	other := chatModel("summarizer")
	other.Abilities = []string{"summarize"}
	e := newEnv(t, withDeployments(chatModel("small"), other))
	status, body := e.get(t, "/v1/models")
	want := `{"object":"list","data":[` +
		`{"id":"ai/small","object":"model","created":0,"owned_by":"ai"},` +
		`{"id":"ai/summarizer","object":"model","created":0,"owned_by":"ai"},` +
		`{"id":"chat","object":"model","created":0,"owned_by":"switchboard"},` +
		`{"id":"summarize","object":"model","created":0,"owned_by":"switchboard"}]}`
	if status != http.StatusOK || body != want {
		t.Errorf("%d %s\nwant %s", status, body, want)
	}
	for _, path := range []string{"/v1/models/ai/small", "/v1/models/ai%2Fsmall"} {
		status, body := e.get(t, path)
		if status != http.StatusOK || body != `{"id":"ai/small","object":"model","created":0,"owned_by":"ai"}` {
			t.Errorf("%s: %d %s", path, status, body)
		}
	}
	status, body = e.get(t, "/v1/models/chat")
	if status != http.StatusOK || !strings.Contains(body, `"owned_by":"switchboard"`) {
		t.Errorf("chat: %d %s", status, body)
	}
	status, body = e.get(t, "/v1/models/gpt-4o")
	if status != http.StatusNotFound || !strings.Contains(body, `"type":"not_found_error"`) || strings.Contains(body, "gpt-4o") {
		t.Errorf("unknown: %d %s", status, body)
	}
}

// Callers see the model names of the namespaces they may use, and nothing of the
// others; a caller allowed in none is refused as such.
func TestChatAuth(t *testing.T) {
	own := chatModel("own")
	own.Ref.Namespace = "team"
	e := newEnv(t, withDeployments(chatModel("small"), own),
		withTokens("alice-token,alice,ai;team\ncarol-token,carol,team\noutsider-token,outsider,elsewhere\n"))
	bearer := func(token string) []string { return []string{"Authorization", "Bearer " + token} }

	resp := e.post(t, context.Background(), hello)
	body := readAll(t, resp)
	if c := decodeCompletion(t, body); resp.StatusCode != 401 || c.Error == nil || c.Error.Type != "authentication_error" || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %s", resp.StatusCode, body)
	}

	for _, model := range []string{"chat", "ai/small", "gpt-4o"} {
		resp := e.post(t, context.Background(), `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`, bearer("outsider-token")...)
		body := readAll(t, resp)
		if c := decodeCompletion(t, body); resp.StatusCode != 403 || c.Error == nil || c.Error.Type != "permission_error" || c.Error.Code != "permission_denied" {
			t.Errorf("outsider, %s: %d %s", model, resp.StatusCode, body)
		}
	}
	if status, body := e.getAs(t, "outsider-token", "/v1/models/chat"); status != 403 {
		t.Errorf("outsider, GET chat: %d %s", status, body)
	}
	if status, body := e.getAs(t, "outsider-token", "/v1/models"); status != 200 || body != `{"object":"list","data":[]}` {
		t.Errorf("outsider's models: %d %s", status, body)
	}

	// Carol may use team only: ai/small is as unknown to her as a name that names
	// nothing, and chat is served by team/own.
	unknown := ""
	for _, model := range []string{"ai/small", "gpt-4o"} {
		resp := e.post(t, context.Background(), `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`, bearer("carol-token")...)
		body := readAll(t, resp)
		if resp.StatusCode != 404 || (unknown != "" && body != unknown) {
			t.Errorf("carol, %s: %d %s (unknown: %s)", model, resp.StatusCode, body, unknown)
		}
		unknown = body
	}
	c := decodeCompletion(t, readAll(t, e.post(t, context.Background(), hello, bearer("carol-token")...)))
	if c.Model != "own-model" {
		t.Errorf("carol's chat: %+v", c)
	}
	if status, body := e.getAs(t, "carol-token", "/v1/models"); status != 200 || !strings.Contains(body, `"team/own"`) || strings.Contains(body, "ai/small") {
		t.Errorf("carol's models: %d %s", status, body)
	}
	if status, body := e.getAs(t, "alice-token", "/v1/models"); status != 200 || !strings.Contains(body, `"team/own"`) || !strings.Contains(body, `"ai/small"`) {
		t.Errorf("alice's models: %d %s", status, body)
	}
}

// TestChatGenerationOptions checks that the parameters that tune generation reach the
// adapter as the provider-neutral generation.* keys, through the native decoder.
func TestChatGenerationOptions(t *testing.T) {
	e := newEnv(t, withDeployments(chatModel("small", protocol.CapStructuredOutput)))
	resp := e.post(t, context.Background(), `{"model":"chat","messages":[{"role":"user","content":"hi"}],
		"max_tokens":64,"temperature":0.2,"top_p":0.9,"stop":["END"],"seed":7,"tool_choice":"none",
		"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"}}}}`)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := map[string]string{}
	for k, v := range e.lastRequest(t).Extensions {
		got[k] = string(v)
	}
	want := map[string]string{
		"generation.max_output_tokens": `64`, "generation.temperature": `0.2`, "generation.top_p": `0.9`,
		"generation.stop": `["END"]`, "generation.seed": `7`, "generation.tool_choice": `"none"`,
		"generation.response_schema": `{"type":"object"}`, "generation.response_schema_name": `"answer"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("extensions (-want +got):\n%s", diff)
	}
}
