//go:build !race

package httpapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Allocation bounds of the hot paths, from the figures measured when they were set: a
// regression guard that counts allocations instead of timing anything. The race detector
// changes the counts, so this file is built only without it, and `make test` runs these
// tests in a run of their own without -race. Raise a bound only with a reason.
const (
	// maxAllocsPerAccept bounds POST /v1/executions → 202 with the execution's own work
	// up to its adapter (measured: 70 to 84, as the execution's goroutine runs).
	maxAllocsPerAccept = 100
	// maxAllocsPerFrame bounds one delivered SSE frame of a replayed stream, its share
	// of the store reads and of the stream's set-up included (measured: 0.103).
	maxAllocsPerFrame = 0.15
)

// TestAcceptAllocations: accepting an execution allocates at most maxAllocsPerAccept
// times. The executions wait in their adapter, so only the accept path and the
// execution's start are counted.
func TestAcceptAllocations(t *testing.T) {
	e := newEnv(t, withMaxConcurrent(1<<16))
	e.setScript(hang)
	body := []byte(chat("count my allocations"))
	allocs := testing.AllocsPerRun(200, func() {
		req := httptest.NewRequest(http.MethodPost, "/v1/executions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
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
