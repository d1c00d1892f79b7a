package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// upstream answers a Chat Completions stream of pieces, then usage and [DONE]; with
// status other than 200 it answers that status instead.
func upstream(t *testing.T, status int, pieces ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "wrong path or key", http.StatusUnauthorized)
			return
		}
		if status != http.StatusOK {
			http.Error(w, `{"error":{"message":"down"}}`, status)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, p := range pieces {
			b, _ := json.Marshal(p)
			_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":`+string(b)+`}}]}`+"\n\n")
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// startRelay runs the relay in front of up and returns its base URL.
func startRelay(t *testing.T, up string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--upstream", up + "/v1", "--model", "m", "--api-key", "k"}, pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no ready line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "relay listening on ")
	if !ok {
		t.Fatalf("ready line %q", line)
	}
	return addr
}

// follow submits a text request and returns the execution's events.
func follow(t *testing.T, base string) []protocol.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := cl.Submit(ctx, &protocol.Request{Ability: "chat", Input: []protocol.Part{{Type: protocol.PartText, Text: "hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := cl.Events(ctx, acc.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var evs []protocol.Event
	for ev, err := range st.All() {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestRelayStreamsTheAnswer(t *testing.T) {
	base := startRelay(t, upstream(t, http.StatusOK, "hel", "lo").URL)
	evs := follow(t, base)
	var types []string
	var text bytes.Buffer
	for _, ev := range evs {
		types = append(types, string(ev.Type))
		if ev.Type == protocol.EventOutputDelta {
			var d protocol.OutputDeltaData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			text.WriteString(d.Text)
		}
	}
	want := "execution.accepted route.selected output.delta output.delta usage.reported execution.completed"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if text.String() != "hello" {
		t.Errorf("text %q, want hello", text.String())
	}
	if last := evs[len(evs)-1]; string(last.Data) != `{"finish_reason":"stop"}` {
		t.Errorf("completed with %s", last.Data)
	}
}

func TestRelayFailsWhenUpstreamFails(t *testing.T) {
	base := startRelay(t, upstream(t, http.StatusServiceUnavailable).URL)
	evs := follow(t, base)
	last := evs[len(evs)-1]
	if last.Type != protocol.EventFailed {
		t.Fatalf("ended with %s, want execution.failed", last.Type)
	}
	var d protocol.FailedData
	if err := json.Unmarshal(last.Data, &d); err != nil || d.Error == nil || d.Error.Code != protocol.CodeProviderUnavailable {
		t.Errorf("failed with %s (%v)", last.Data, err)
	}
}

func TestRelayRefusesBadInput(t *testing.T) {
	base := startRelay(t, upstream(t, http.StatusOK).URL)
	resp, err := http.Post(base+"/v1/executions", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad JSON: %s, want 400", resp.Status)
	}
	resp, err = http.Get(base + "/v1/executions/exe_nope/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown execution: %s, want 404", resp.Status)
	}
	if err := run(context.Background(), nil, io.Discard, io.Discard); err == nil {
		t.Error("no --upstream was accepted")
	}
}

// chat posts a Chat Completions request to the relay and returns the response with
// its data frames, read to the end of the body.
func chat(t *testing.T, base, body string) (*http.Response, []string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp, []string{string(raw)}
	}
	var frames []string
	for line := range strings.Lines(string(raw)) {
		if d, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: "); ok {
			frames = append(frames, d)
		}
	}
	return resp, frames
}

const chatBody = `{"model":"chat","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}`

func TestChatCompletionsTranslatesTheStream(t *testing.T) {
	base := startRelay(t, upstream(t, http.StatusOK, "hel", "lo").URL)
	resp, frames := chat(t, base, chatBody)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%s %q: %v", resp.Status, resp.Header.Get("Content-Type"), frames)
	}
	if len(frames) != 5 || frames[len(frames)-1] != "[DONE]" {
		t.Fatalf("frames %q, want 3 choices, usage and [DONE]", frames)
	}
	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	var text strings.Builder
	var got []chunk
	for _, f := range frames[:len(frames)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(f), &c); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		if c.Object != "chat.completion.chunk" || c.Model != "m" || c.ID == "" || len(got) > 0 && c.ID != got[0].ID {
			t.Errorf("frame %q: want a chat.completion.chunk of model m with the call's id", f)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
		got = append(got, c)
	}
	if text.String() != "hello" {
		t.Errorf("text %q, want hello", text.String())
	}
	if d := got[0].Choices[0].Delta; d.Role != "assistant" {
		t.Errorf("first delta %+v, want the role", d)
	}
	if d := got[1].Choices[0].Delta; d.Role != "" {
		t.Errorf("second delta %+v carries a role", d)
	}
	if f := got[2].Choices[0].FinishReason; f == nil || *f != "stop" {
		t.Errorf("third chunk %q, want finish_reason stop", frames[2])
	}
	if !strings.Contains(frames[3], `"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`) {
		t.Errorf("usage chunk %q", frames[3])
	}

	// Without include_usage, no usage chunk.
	_, frames = chat(t, base, `{"model":"chat","messages":[{"role":"user","content":"hello"}],"stream":true}`)
	if len(frames) != 4 || strings.Contains(strings.Join(frames, ""), "usage") {
		t.Errorf("frames %q, want no usage", frames)
	}
}

func TestChatCompletionsFailures(t *testing.T) {
	down := startRelay(t, upstream(t, http.StatusServiceUnavailable).URL)
	resp, frames := chat(t, down, chatBody)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(frames[0], `"type":"server_error"`) {
		t.Errorf("upstream down: %s %q, want 502 server_error", resp.Status, frames)
	}

	// A stream cut after it started ends with an error frame and no [DONE].
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hel"}}]}`+"\n\n")
	}))
	t.Cleanup(cut.Close)
	resp, frames = chat(t, startRelay(t, cut.URL), chatBody)
	if resp.StatusCode != http.StatusOK || len(frames) != 2 || !strings.HasPrefix(frames[1], `{"error":{`) {
		t.Errorf("cut stream: %s %q, want one chunk and an error frame", resp.Status, frames)
	}

	base := startRelay(t, upstream(t, http.StatusOK, "x").URL)
	for name, body := range map[string]string{
		"not JSON":        "{",
		"no model":        `{"messages":[{"role":"user","content":"x"}],"stream":true}`,
		"no messages":     `{"model":"chat","messages":[],"stream":true}`,
		"not streamed":    `{"model":"chat","messages":[{"role":"user","content":"x"}]}`,
		"content parts":   `{"model":"chat","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"stream":true}`,
		"body over limit": `{"model":"` + strings.Repeat("x", maxBody) + `"}`,
	} {
		resp, frames := chat(t, base, body)
		want := http.StatusBadRequest
		if name == "body over limit" {
			want = http.StatusRequestEntityTooLarge
		}
		if resp.StatusCode != want || !strings.Contains(frames[0], `"type":"invalid_request_error"`) {
			t.Errorf("%s: %s %.200q, want %d invalid_request_error", name, resp.Status, frames, want)
		}
	}
}
