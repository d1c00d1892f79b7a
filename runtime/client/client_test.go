package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// frame is one SSE frame of envelope seq of execution id, with the given line ending.
func frame(id string, seq uint64, typ protocol.EventType, eol string) string {
	data := `{"index":0,"type":"text","text":"t` + strconv.FormatUint(seq, 10) + `"}`
	switch typ {
	case protocol.EventCompleted:
		data = `{"finish_reason":"stop"}`
	case protocol.EventAccepted:
		data = `{"ability":"chat","deadline_at":"2026-12-02T13:05:00Z"}`
	}
	env := fmt.Sprintf(`{"execution_id":%q,"sequence":%d,"timestamp":"2026-12-02T13:00:00Z","type":%q,"data":%s}`, id, seq, typ, data)
	return "id: " + strconv.FormatUint(seq, 10) + eol + "event: " + string(typ) + eol + "data: " + env + eol + eol
}

// fakeRuntime serves canned event streams: handler gets the cursor and the attempt
// number and writes the response.
func fakeRuntime(t *testing.T, handler func(w http.ResponseWriter, after uint64, attempt int)) *Client {
	t.Helper()
	var attempts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Accept"); got != "text/event-stream" {
			t.Errorf("Accept %q", got)
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		handler(w, after, int(attempts.Add(1)))
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, WithHTTPClient(srv.Client()), WithBackoff(Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Retries: 3}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sseHead(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

func collect(st *Stream) ([]uint64, error) {
	var seqs []uint64
	for st.Next() {
		seqs = append(seqs, st.Event().Sequence)
	}
	return seqs, st.Err()
}

func TestStreamDecoding(t *testing.T) {
	for _, eol := range []string{"\n", "\r", "\r\n"} {
		t.Run(strconv.Quote(eol), func(t *testing.T) {
			c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
				sseHead(w)
				io.WriteString(w, "\xEF\xBB\xBFretry: 2000"+eol+eol+": keep-alive"+eol+eol)
				io.WriteString(w, frame("exe_1", 1, protocol.EventAccepted, eol))
				io.WriteString(w, ": comment inside"+eol)
				io.WriteString(w, frame("exe_1", 2, protocol.EventOutputDelta, eol))
				io.WriteString(w, frame("exe_1", 3, protocol.EventCompleted, eol))
			})
			st, err := c.Events(context.Background(), "exe_1", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			seqs, err := collect(st)
			if err != nil || !cmp.Equal(seqs, []uint64{1, 2, 3}) {
				t.Fatalf("got %v, %v", seqs, err)
			}
			if st.Next() {
				t.Fatal("Next after the terminal event")
			}
		})
	}
}

func TestStreamTruncated(t *testing.T) {
	for name, tail := range map[string]string{
		"clean end":           "",
		"incomplete frame":    "id: 3\nevent: output.delta\ndata: {\"execution_id\":\"exe_1\",\"sequence\":3",
		"frame without blank": strings.TrimSuffix(frame("exe_1", 3, protocol.EventCompleted, "\n"), "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
				sseHead(w)
				io.WriteString(w, frame("exe_1", 1, protocol.EventAccepted, "\n"))
				io.WriteString(w, frame("exe_1", 2, protocol.EventOutputDelta, "\n"))
				io.WriteString(w, tail)
			})
			st, err := c.Events(context.Background(), "exe_1", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			seqs, err := collect(st)
			var trunc *TruncatedError
			if !errors.As(err, &trunc) || trunc.LastSequence != 2 || !cmp.Equal(seqs, []uint64{1, 2}) {
				t.Fatalf("got %v, %v", seqs, err)
			}
			if st.LastSequence() != 2 {
				t.Errorf("LastSequence %d", st.LastSequence())
			}
		})
	}
}

func TestStreamProtocolViolations(t *testing.T) {
	for name, body := range map[string]string{
		"gap":               frame("exe_1", 1, protocol.EventAccepted, "\n") + frame("exe_1", 3, protocol.EventOutputDelta, "\n"),
		"duplicate":         frame("exe_1", 1, protocol.EventAccepted, "\n") + frame("exe_1", 1, protocol.EventAccepted, "\n"),
		"foreign execution": frame("exe_2", 1, protocol.EventAccepted, "\n"),
		"not json":          "data: {nope\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
				sseHead(w)
				io.WriteString(w, body)
			})
			st, err := c.Events(context.Background(), "exe_1", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			_, err = collect(st)
			var trunc *TruncatedError
			if err == nil || errors.As(err, &trunc) {
				t.Fatalf("got %v, want a protocol error", err)
			}
			// Follow does not retry what a reconnection cannot fix.
			if ferr := c.Follow(context.Background(), "exe_1", 0, func(protocol.Event) error { return nil }); ferr == nil || errors.As(ferr, &trunc) {
				t.Fatalf("Follow: %v", ferr)
			}
		})
	}
}

func TestEventsStatuses(t *testing.T) {
	c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
		switch after {
		case 10:
			w.WriteHeader(http.StatusNoContent)
		case 20:
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>bad gateway</html>")
		case 30:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"execution not found","retryable":false}}`)
		case 40:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"events":[]}`)
		}
	})
	st, err := c.Events(context.Background(), "exe_1", 10)
	if err != nil || st.Next() || st.Err() != nil || st.Close() != nil {
		t.Fatalf("204: %v", err)
	}

	_, err = c.Events(context.Background(), "exe_1", 20)
	var ce *Error
	if !errors.As(err, &ce) || ce.StatusCode != 502 || ce.Code() != protocol.CodeProviderUnavailable || !ce.Retryable() || ce.RetryAfter != 3*time.Second {
		t.Fatalf("502: %#v", err)
	}
	if strings.Contains(ce.Error(), "html") {
		t.Errorf("error repeats the body: %v", ce)
	}

	_, err = c.Events(context.Background(), "exe_1", 30)
	var pe *protocol.Error
	if !errors.As(err, &ce) || ce.Code() != protocol.CodeNotFound || !errors.As(err, &pe) || pe.Message != "execution not found" {
		t.Fatalf("404: %v", err)
	}

	if _, err = c.Events(context.Background(), "exe_1", 40); err == nil {
		t.Fatal("a JSON 200 was taken for a stream")
	}
}

func TestFollowResumes(t *testing.T) {
	const last = 9
	var (
		mu      sync.Mutex
		cursors []uint64
	)
	c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, attempt int) {
		mu.Lock()
		cursors = append(cursors, after)
		mu.Unlock()
		switch attempt {
		case 2:
			// A retryable refusal between two cuts.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":"provider_unavailable","message":"x","retryable":true}}`)
			return
		}
		sseHead(w)
		// Three events per connection, then a cut in the middle of the next frame.
		for seq := after + 1; seq <= min(after+3, last); seq++ {
			typ := protocol.EventOutputDelta
			if seq == 1 {
				typ = protocol.EventAccepted
			}
			if seq == last {
				typ = protocol.EventCompleted
			}
			io.WriteString(w, frame("exe_1", seq, typ, "\n"))
		}
		io.WriteString(w, "id: 99\ndata: {")
	})
	var seqs []uint64
	snap := protocol.NewSnapshot("exe_1")
	err := c.Follow(context.Background(), "exe_1", 0, func(ev protocol.Event) error {
		seqs = append(seqs, ev.Sequence)
		return snap.Apply(ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(seqs, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("sequences %v", seqs)
	}
	if !cmp.Equal(cursors, []uint64{0, 3, 3, 6}) {
		t.Fatalf("cursors %v", cursors)
	}
	if snap.Status != protocol.StatusCompleted || snap.Output[0].Text != "t2t3t4t5t6t7t8" {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestFollowGivesUp(t *testing.T) {
	var calls atomic.Int64
	c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
		calls.Add(1)
		sseHead(w) // a stream that ends at once, forever
	})
	err := c.Follow(context.Background(), "exe_1", 4, func(protocol.Event) error { return nil })
	var trunc *TruncatedError
	if !errors.As(err, &trunc) || trunc.LastSequence != 4 {
		t.Fatalf("got %v", err)
	}
	if n := calls.Load(); n != 4 { // the first try and three retries
		t.Fatalf("%d connections", n)
	}
}

func TestFollowStops(t *testing.T) {
	c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
		sseHead(w)
		io.WriteString(w, frame("exe_1", after+1, protocol.EventOutputDelta, "\n"))
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
	})
	stop := errors.New("stop")
	if err := c.Follow(context.Background(), "exe_1", 0, func(protocol.Event) error { return stop }); err != stop { //nolint:errorlint // Follow returns fn's error itself, unwrapped
		t.Fatalf("fn error: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Follow(ctx, "exe_1", 0, func(protocol.Event) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("context end: %v", err)
	}
}

func TestStreamAll(t *testing.T) {
	c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
		sseHead(w)
		io.WriteString(w, frame("exe_1", 1, protocol.EventAccepted, "\n"))
		io.WriteString(w, frame("exe_1", 2, protocol.EventOutputDelta, "\n"))
	})
	st, err := c.Events(context.Background(), "exe_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var last error
	for ev, err := range st.All() {
		if err != nil {
			last = err
			continue
		}
		seqs = append(seqs, ev.Sequence)
	}
	var trunc *TruncatedError
	if !cmp.Equal(seqs, []uint64{1, 2}) || !errors.As(last, &trunc) {
		t.Fatalf("got %v, %v", seqs, last)
	}
}

func TestCloseAbortsNext(t *testing.T) {
	release := make(chan struct{})
	c := fakeRuntime(t, func(w http.ResponseWriter, after uint64, _ int) {
		sseHead(w)
		w.(http.Flusher).Flush()
		<-release
	})
	defer close(release)
	st, err := c.Events(context.Background(), "exe_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(20*time.Millisecond, func() { st.Close() })
	if st.Next() || st.Err() != nil {
		t.Fatalf("after Close: %v", st.Err())
	}
}

func TestSubmitAndReads(t *testing.T) {
	var gotKey, gotType string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.EscapedPath() {
		case "POST /prefix/v1/executions":
			gotKey, gotType = r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type")
			var req protocol.Request
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Ability != "chat" {
				t.Errorf("request %+v, %v", req, err)
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":"exe_1","status":"accepted","created_at":"2026-12-02T13:00:00Z","links":{"self":"/v1/executions/exe_1","events":"/v1/executions/exe_1/events","result":"/v1/executions/exe_1/result","cancel":"/v1/executions/exe_1/cancel"}}`)
		case "GET /prefix/v1/executions/exe%2F1":
			io.WriteString(w, `{"id":"exe/1","status":"running","route":{"deployment":"ai/m","provider":"openai","model":"m"},"metadata":{},"future_field":1}`)
		case "GET /prefix/v1/executions/exe_1/result":
			io.WriteString(w, `{"id":"exe_1","status":"running","sequence":3,"output":[{"index":0,"type":"text","text":"ab"}],"tool_calls":[],"artifacts":[],"usage":[]}`)
		case "POST /prefix/v1/executions/exe_1/cancel":
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":"exe_1","status":"running"}`)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.EscapedPath())
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/prefix/", WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acc, err := c.Submit(ctx, &protocol.Request{Ability: "chat", Input: []protocol.Part{{Type: protocol.PartText, Text: "hi"}}}, WithIdempotencyKey(`k"1\`))
	if err != nil || acc.ID != "exe_1" || !acc.Replayed || acc.Links.Events != "/v1/executions/exe_1/events" {
		t.Fatalf("Submit: %+v, %v", acc, err)
	}
	if gotKey != `"k\"1\\"` || gotType != "application/json" {
		t.Errorf("Idempotency-Key %q, Content-Type %q", gotKey, gotType)
	}
	st, err := c.Get(ctx, "exe/1")
	if err != nil || st.Status != protocol.StatusRunning || st.Route.Model != "m" {
		t.Fatalf("Get: %+v, %v", st, err)
	}
	res, err := c.Result(ctx, "exe_1")
	if err != nil || res.Sequence != 3 || res.Output[0].Text != "ab" {
		t.Fatalf("Result: %+v, %v", res, err)
	}
	if st, err = c.Cancel(ctx, "exe_1"); err != nil || st.Status != protocol.StatusRunning {
		t.Fatalf("Cancel: %+v, %v", st, err)
	}
}

func TestNewValidatesBaseURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://", "http://x/?q=1", "http://x/#f", "://"} {
		if _, err := New(u); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
	if _, err := New("https://switchboard.ai.svc:8080"); err != nil {
		t.Error(err)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Retries: 10}
	for n := 1; n <= 12; n++ {
		base := min(b.Initial<<(n-1), b.Max)
		for range 50 {
			d := b.delay(n, 0)
			if d < base/2 || d > base {
				t.Fatalf("attempt %d: %v outside [%v, %v]", n, d, base/2, base)
			}
		}
	}
	if d := b.delay(1, 5*time.Second); d != 5*time.Second {
		t.Errorf("hint ignored: %v", d)
	}
	if d := (Backoff{}).delay(3, 0); d != 0 {
		t.Errorf("zero backoff: %v", d)
	}
}
