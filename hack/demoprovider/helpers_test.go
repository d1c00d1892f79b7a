package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// testText is echoed in most tests; with 5 chunks it splits into
// "Hel", "lo,", " wo", "rl", "d!".
const testText = "Hello, world!"

// testPieces is testText split into 5 pieces.
var testPieces = []string{"Hel", "lo,", " wo", "rl", "d!"}

// fakeClock is a settable clock for Replicate progress.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testServer runs newServer(cfg) behind httptest. returned receives one value each time
// a handler returns, so tests can prove that no request outlives its client.
type testServer struct {
	*httptest.Server
	returned chan struct{}
}

// startServer starts a server with 5 chunks and no pacing unless cfg says otherwise.
func startServer(t *testing.T, cfg config) *testServer {
	t.Helper()
	if cfg.Chunks == 0 {
		cfg.Chunks = 5
	}
	h := newServer(cfg)
	returned := make(chan struct{}, 64)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		select {
		case returned <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(ts.Close)
	return &testServer{Server: ts, returned: returned}
}

// do sends method path with a JSON body (nil for none) and headers as key/value pairs.
func (ts *testServer) do(t *testing.T, method, path string, body any, kv ...string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseFrame is one parsed event-stream frame.
type sseFrame struct {
	event, data string
}

// readFrames reads a whole event stream with a plain line reader: "event:" and "data:"
// lines accumulate until a blank line ends the frame. complete reports whether the
// stream ended right after a frame (no partial frame left over).
func readFrames(t *testing.T, r io.Reader) (frames []sseFrame, complete bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	var cur sseFrame
	pending := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if pending {
				frames = append(frames, cur)
			}
			cur, pending = sseFrame{}, false
		case strings.HasPrefix(line, "event: "):
			cur.event, pending = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			cur.data, pending = strings.TrimPrefix(line, "data: "), true
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return frames, !pending
}

// checkSSEHeaders asserts a 200 event stream.
func checkSSEHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
}

// decodeJSON decodes resp's body into v after checking the status.
func decodeJSON(t *testing.T, resp *http.Response, status int, v any) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// equalLines fails with both lists when got differs from want.
func equalLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames differ\ngot:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// waitReturned waits until a handler has returned, failing after a generous bound.
func (ts *testServer) waitReturned(t *testing.T) {
	t.Helper()
	select {
	case <-ts.returned:
	case <-time.After(5 * time.Second):
		t.Fatal("handler did not return after the client went away")
	}
}

// openAIBody is a chat request with one user message.
func openAIBody(model string, stream bool, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":    model,
		"stream":   stream,
		"messages": []any{map[string]any{"role": "system", "content": "Be brief."}, map[string]any{"role": "user", "content": testText}},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// anthropicBody is a Messages request with one user message.
func anthropicBody(model string, stream bool, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":      model,
		"max_tokens": 64,
		"stream":     stream,
		"system":     "Be brief.",
		"messages":   []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": testText}}}},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// anthropicVersion is the header pair every Anthropic request needs.
var anthropicVersion = []string{"anthropic-version", "2023-06-01"}
