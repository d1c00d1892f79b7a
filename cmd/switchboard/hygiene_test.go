package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Connection hygiene and shutdown of the built binary (spec/http-api.md, "Connections";
// spec/events.md, "Shutdown"): slow or idle clients cannot hold connections, a browser
// form cannot submit, and a shutdown is a drain: event streams stay open through the
// shutdown grace, then the executions still running are handed over (Redis) or ended
// (memory) before the process exits.

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

// stalledStream is an open event stream of a stalled execution, read in the background
// once it has shown output.
type stalledStream struct {
	id     string
	events []protocol.Event
	ended  chan struct{} // closed when the stream has ended
	at     time.Time     // when it ended
	err    error         // why it ended
}

// followStalled submits n executions of the stalled model and opens a stream on each,
// returning once each stream has shown output; the streams are then read until they end.
func followStalled(t *testing.T, ctx context.Context, c *client.Client, n int) []*stalledStream {
	t.Helper()
	var out []*stalledStream
	for range n {
		acc, err := c.Submit(ctx, textRequest("stall", "never finishes"))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := c.Events(ctx, acc.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stream.Close() })
		s := &stalledStream{id: acc.ID, ended: make(chan struct{})}
		for stream.Next() {
			s.events = append(s.events, stream.Event())
			if stream.Event().Type == protocol.EventOutputDelta {
				break // running and streaming
			}
		}
		go func() {
			for stream.Next() {
				s.events = append(s.events, stream.Event())
			}
			s.at, s.err = time.Now(), stream.Err()
			close(s.ended)
		}()
		out = append(out, s)
	}
	return out
}

// waitEnded waits until every stream has ended, and checks that none ended before
// atLeast after sent.
func waitEnded(t *testing.T, streams []*stalledStream, sent time.Time, atLeast, timeout time.Duration) {
	t.Helper()
	for _, s := range streams {
		select {
		case <-s.ended:
		case <-time.After(time.Until(sent.Add(timeout))):
			t.Fatalf("the stream of %s was still open %s after SIGTERM", s.id, timeout)
		}
		took := s.at.Sub(sent)
		t.Logf("the stream of %s ended %s after SIGTERM (%v)", s.id, took.Round(time.Millisecond), s.err)
		if took < atLeast {
			t.Errorf("the stream of %s ended %s after SIGTERM, within the shutdown grace", s.id, took)
		}
	}
}

// TestShutdownDrainsThenHandsOver stops the only replica of a Redis store: it keeps its
// event streams open through the shutdown grace, then lets go of the executions still
// running without ending them, and the next replica to start on the store ends them
// (spec/events.md, "Shutdown").
func TestShutdownDrainsThenHandsOver(t *testing.T) {
	url := redisURL(t, dbShutdownRedis)
	const grace = 2 * time.Second
	e := setup(t, "--event-store", "redis", "--redis-url", url, "--execution-lease", testLease.String(),
		"--cleanup-grace", testCleanupGrace.String(), "--shutdown-grace", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	streams := followStalled(t, ctx, e.client, 3)
	// A remote job that outlasts the grace (painter-slow: 5 s): handed over, not
	// canceled at the provider.
	store := openRedisStore(t, url)
	job, err := e.client.Submit(ctx, textRequest("text-to-image", "a lighthouse"))
	if err != nil {
		t.Fatal(err)
	}
	waitRemoteJob(t, store, job.ID)

	sent := time.Now()
	if err := e.process.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, streams, sent, grace*9/10, grace+5*time.Second)
	e.process.Wait(t, grace+5*time.Second)
	t.Logf("switchboard exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))

	orphans, err := store.Orphans(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range streams {
		ids = append(ids, s.id)
		// Handed over, not ended: the stream was cut without a terminal event.
		var trunc *client.TruncatedError
		if !errors.As(s.err, &trunc) || slices.ContainsFunc(s.events, func(ev protocol.Event) bool { return ev.Type.Terminal() }) {
			t.Errorf("the stream of %s ended with %v after %s, want cut without a terminal event", s.id, s.err, strings.Join(types(s.events), " "))
		}
		st, err := store.Get(ctx, s.id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Terminal || st.State != protocol.StatusRunning {
			t.Errorf("%s after shutdown: terminal %v, state %s; want still running, handed over", s.id, st.Terminal, st.State)
		}
		if !slices.Contains(orphans, s.id) {
			t.Errorf("%s after shutdown: lease %+v, not an orphan; want its lease released", s.id, st.Lease)
		}
	}

	if st, err := store.Get(ctx, job.ID); err != nil || st.Terminal || !slices.Contains(orphans, job.ID) {
		t.Errorf("remote job after shutdown: terminal %v, orphan %v (%v); want handed over", st.Terminal, slices.Contains(orphans, job.ID), err)
	}
	if hasLine(e.provider.String(), "POST /replicate/v1/predictions/", "/cancel") {
		t.Error("the shutdown canceled the handed-over prediction at the provider")
	}

	successor := startReplica(t, "successor", e.dir, url)
	final := waitTerminal(t, successor.client, append(slices.Clone(ids), job.ID), 10*time.Second)
	if st := final[job.ID]; st.Status != protocol.StatusCompleted {
		t.Errorf("handed-over remote job: %s %+v, want completed by the successor", st.Status, st.Error)
	}
	for _, id := range ids {
		checkOrphaned(t, id, final[id].Error)
		events, err := store.Read(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, id, events)
	}
}

// TestShutdownWithoutPeersEndsExecutions stops a replica on the memory store, which no
// other replica shares: after the grace it ends the executions still running itself,
// and its followers see them end before it exits (spec/events.md, "Shutdown").
func TestShutdownWithoutPeersEndsExecutions(t *testing.T) {
	const grace = 2 * time.Second
	e := setup(t, "--cleanup-grace", "1s", "--shutdown-grace", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	streams := followStalled(t, ctx, e.client, 3)

	sent := time.Now()
	if err := e.process.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, streams, sent, grace*9/10, grace+5*time.Second)
	for _, s := range streams {
		if s.err != nil {
			t.Errorf("the stream of %s ended with %v after %s, want its terminal event", s.id, s.err, strings.Join(types(s.events), " "))
			continue
		}
		checkLog(t, s.id, s.events)
		checkOrphaned(t, s.id, failure(t, s.id, s.events[len(s.events)-1]))
	}
	e.process.Wait(t, grace+5*time.Second)
	t.Logf("switchboard exited %s after SIGTERM", time.Since(sent).Round(time.Millisecond))
}
