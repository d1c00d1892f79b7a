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
