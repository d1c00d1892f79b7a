package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Connection hygiene and shutdown of the built binary (spec/http-api.md, "Connections"):
// slow or idle clients cannot hold connections, a browser form cannot submit, and a
// shutdown ends open event streams at once while every running execution still gets its
// terminal event into the store.

// rawRequest writes req on a fresh connection to addr and returns the connection.
func rawRequest(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// closedWithin reads conn until the server closes it and reports how long that took;
// it fails the test if the connection is still open after limit.
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := conn.SetReadDeadline(start.Add(limit)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s", limit)
	}
	return time.Since(start)
}

func TestConnectionHygiene(t *testing.T) {
	e := setup(t, "--read-timeout", "1s", "--idle-timeout", "1s", "--sse-keepalive", "300ms")

	t.Run("a stalled request body is closed after the read timeout", func(t *testing.T) {
		conn := rawRequest(t, e.api, "POST /v1/executions HTTP/1.1\r\nHost: sb\r\n"+
			"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ability\":")
		if took := closedWithin(t, conn, 10*time.Second); took < 500*time.Millisecond {
			t.Errorf("closed after %s, before the 1s read timeout: not the timeout closing it", took)
		}
	})

	t.Run("oversized headers get 431", func(t *testing.T) {
		conn := rawRequest(t, e.api, "GET /v1/executions/exe_x HTTP/1.1\r\nHost: sb\r\nX-Big: "+
			strings.Repeat("a", 100<<10)+"\r\n\r\n")
		status, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(status, "HTTP/1.1 431") {
			t.Errorf("status line %q, want 431", status)
		}
	})

	t.Run("idle keep-alive connections are closed", func(t *testing.T) {
		conn := rawRequest(t, e.api, "GET /v1/executions/exe_x HTTP/1.1\r\nHost: sb\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Close {
			t.Fatalf("status %d, close %v: want a kept-alive 404", resp.StatusCode, resp.Close)
		}
		closedWithin(t, conn, 10*time.Second)
	})

	t.Run("a body that is not JSON gets 415 and creates nothing", func(t *testing.T) {
		body := `{"ability":"chat","input":[{"type":"text","text":"form post"}]}`
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
			req, err := http.NewRequest(http.MethodPost, "http://"+e.api+"/v1/executions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			req.Header.Set("Idempotency-Key", "form-post")
			resp := do(t, req)
			if resp.status != http.StatusUnsupportedMediaType || resp.code != protocol.CodeInvalidRequest {
				t.Errorf("Content-Type %q: %d %s, want 415 invalid_request", ct, resp.status, resp.code)
			}
		}
		// Nothing was remembered under the key: the same body as JSON is a first request.
		req, err := http.NewRequest(http.MethodPost, "http://"+e.api+"/v1/executions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "form-post")
		if resp := do(t, req); resp.status != http.StatusAccepted || resp.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("JSON submit after the refusals: %d, replayed %q", resp.status, resp.header.Get("Idempotent-Replayed"))
		}
	})

	t.Run("an event stream outlives the read timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		acc, err := e.client.Submit(ctx, textRequest("stall", "hold on"))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := e.client.Events(ctx, acc.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		// The stalled model sends one piece, then nothing: only keep-alives flow, which
		// Next skips, so it returns only when the stream ends.
		ended := make(chan protocol.EventType, 1)
		go func() {
			var last protocol.EventType
			for stream.Next() {
				last = stream.Event().Type
			}
			ended <- last
		}()
		select {
		case <-ended:
			t.Fatalf("the stream ended within 2.5s, past the 1s read timeout: %v", stream.Err())
		case <-time.After(2500 * time.Millisecond):
		}
		if _, err := e.client.Cancel(ctx, acc.ID); err != nil {
			t.Fatal(err)
		}
		if last := <-ended; last != protocol.EventFailed {
			t.Errorf("after the cancel the stream ended on %q, want execution.failed", last)
		}
	})
}

type answer struct {
	status int
	header http.Header
	code   protocol.Code
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body protocol.ErrorBody
	if resp.StatusCode >= 400 {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error == nil {
			t.Fatalf("status %d without a JSON error body: %v", resp.StatusCode, err)
		}
		return answer{resp.StatusCode, resp.Header, body.Error.Code}
	}
	return answer{status: resp.StatusCode, header: resp.Header}
}

// TestShutdownEndsStreamsAndRecordsTerminalEvents runs the binary on Redis, so that
// what it recorded can be read after it exited.
func TestShutdownEndsStreamsAndRecordsTerminalEvents(t *testing.T) {
	url := os.Getenv("SWITCHBOARD_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	e := setup(t, "--event-store", "redis", "--redis-url", url, "--cleanup-grace", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var ids []string
	for range 3 {
		acc, err := e.client.Submit(ctx, textRequest("stall", "never finishes"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, acc.ID)
	}
	stream, err := e.client.Events(ctx, ids[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for stream.Next() {
		if stream.Event().Type == protocol.EventOutputDelta {
			break // the execution is running and streaming
		}
	}

	ended := make(chan time.Duration, 1)
	sent := time.Now()
	go func() {
		for stream.Next() {
		}
		ended <- time.Since(sent)
	}()
	if err := e.process.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case took := <-ended:
		t.Logf("the open stream ended %s after SIGTERM", took)
	case <-time.After(5 * time.Second):
		t.Fatal("the open event stream was still open 5s after SIGTERM")
	}
	e.process.Wait(t, 15*time.Second)

	store, err := redisstore.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, id := range ids {
		st, err := store.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if !st.Terminal || st.State != protocol.StatusFailed {
			t.Errorf("%s after shutdown: terminal %v, state %s; want its terminal event recorded", id, st.Terminal, st.State)
			continue
		}
		// Retryable only if the stalled model had not streamed its piece yet: after
		// output, resubmitting is not known to be safe.
		events, err := store.Read(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		output := slices.ContainsFunc(events, func(ev protocol.Event) bool { return ev.Type.IsOutput() })
		if st.Error == nil || st.Error.Code != protocol.CodeProviderUnavailable || st.Error.Retryable == output {
			t.Errorf("%s ended with %+v after output=%v, want provider_unavailable, retryable only without output", id, st.Error, output)
		}
	}
}
