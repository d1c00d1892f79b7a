//go:build !race

package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
)

// Allocation and stack bounds of the hot paths, from the figures measured when they were
// set: a regression guard that counts allocations and bytes instead of timing anything.
// The race detector changes the counts, so this file is built only without it, and `make test` runs these
// tests in a run of their own without -race. Raise a bound only with a reason.
const (
	// maxAllocsPerAccept bounds POST /v1/executions → 202 with the execution's own work
	// up to its adapter, all of it counted (measured: 124 every run). The bound of 100
	// before counted a varying share of that work (83 to 125 in one series of runs),
	// and failed now and then.
	maxAllocsPerAccept = 130
	// maxAllocsPerFrame bounds one delivered SSE frame of a replayed stream, its share
	// of the store reads and of the stream's set-up included (measured: 0.103).
	maxAllocsPerFrame = 0.15
	// maxStackPerIdleStream bounds the goroutine stacks an open, idle event stream keeps
	// on the server: its handler's (8 KiB since the stream's head is written from a
	// shallow frame; it was 16 KiB) and net/http's background reader's (2 KiB).
	maxStackPerIdleStream = 12 << 10
)

// TestAcceptAllocations: accepting an execution allocates at most maxAllocsPerAccept
// times. Each run waits until its execution is in the adapter, where it stays, so that
// the accept path and the execution's start up to the provider call are counted whole:
// counting while the executions' goroutines still run would count a varying share.
func TestAcceptAllocations(t *testing.T) {
	e := newEnv(t, withMaxConcurrent(1<<16))
	started := make(chan struct{})
	e.setScript(func(ctx context.Context, a engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
		started <- struct{}{}
		return hang(ctx, a, em)
	})
	body := []byte(chat("count my allocations"))
	allocs := testing.AllocsPerRun(200, func() {
		req := httptest.NewRequest(http.MethodPost, "/v1/executions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		<-started
	})
	t.Logf("%.1f allocations per accepted execution", allocs)
	if allocs > maxAllocsPerAccept {
		t.Errorf("%.1f allocations per accepted execution, bound %d", allocs, maxAllocsPerAccept)
	}
}

// TestFrameAllocations: replaying an ended execution of 1,000 events over SSE allocates
// at most maxAllocsPerFrame times per frame.
func TestFrameAllocations(t *testing.T) {
	const deltas = 1000
	e := newEnv(t)
	texts := make([]string, deltas)
	for i := range texts {
		texts[i] = "a delta of some forty bytes of text, say"
	}
	e.setScript(reply(texts...))
	id := e.submit(t, chat("many frames"))
	e.waitTerminal(t, id)
	events := 0
	allocs := testing.AllocsPerRun(20, func() {
		w := &discardStream{header: http.Header{}}
		e.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/executions/"+id+"/events", nil))
		if w.status != http.StatusOK {
			t.Fatalf("status %d", w.status)
		}
		events = w.frames
	})
	if events < deltas {
		t.Fatalf("%d frames, want more than %d", events, deltas)
	}
	perFrame := allocs / float64(events)
	t.Logf("%.3f allocations per frame (%.0f per stream of %d frames)", perFrame, allocs, events)
	if perFrame > maxAllocsPerFrame {
		t.Errorf("%.3f allocations per frame, bound %.2f", perFrame, maxAllocsPerFrame)
	}
}

// discardStream is a response writer for event streams that keeps nothing but counts:
// it supports what the stream's http.ResponseController needs.
type discardStream struct {
	header http.Header
	status int
	frames int
}

func (d *discardStream) Header() http.Header  { return d.header }
func (d *discardStream) WriteHeader(code int) { d.status = code }
func (d *discardStream) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	d.frames += bytes.Count(p, []byte("\nevent: "))
	return len(p), nil
}
func (d *discardStream) FlushError() error                { return nil }
func (d *discardStream) SetWriteDeadline(time.Time) error { return nil }
func (d *discardStream) SetReadDeadline(time.Time) error  { return nil }

// TestIdleStreamStack: an event stream waiting for events keeps at most
// maxStackPerIdleStream of goroutine stack on the server, also one a browser opened
// with the signed link of a submission. The clients are bare connections, without
// goroutines of their own, and the collector is off while the streams are open, since it
// could shrink a grown stack and hide the regression.
func TestIdleStreamStack(t *testing.T) {
	t.Run("without authentication", func(t *testing.T) {
		e := newEnv(t)
		e.setScript(hang)
		idleStreamStack(t, e, "/v1/executions/"+e.submit(t, chat("wait with me"))+"/events")
	})
	t.Run("by stream link", func(t *testing.T) {
		e := newAuthEnv(t)
		e.setScript(hang)
		idleStreamStack(t, e, e.submitAs(t, aliceToken, "chat").Links.Events)
	})
}

// idleStreamStack measures the stack of idle streams of path (an execution's events).
func idleStreamStack(t *testing.T, e *env, path string) {
	const streams = 200
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	addr := strings.TrimPrefix(e.srv.URL, "http://")
	open := func() {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, addr)
		// The stream is open and idle once its head and the events so far have arrived:
		// they end with the route.selected frame.
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			if strings.HasPrefix(line, "event: route.selected") {
				return
			}
		}
	}
	open() // the first stream sets up what every later one shares
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range streams {
		open()
	}
	time.Sleep(100 * time.Millisecond) // every handler is parked in its wait
	runtime.ReadMemStats(&after)
	perStream := float64(after.StackInuse-before.StackInuse) / streams
	t.Logf("%.0f bytes of goroutine stack per idle stream", perStream)
	if perStream > maxStackPerIdleStream {
		t.Errorf("%.0f bytes of goroutine stack per idle stream, bound %d", perStream, maxStackPerIdleStream)
	}
}
