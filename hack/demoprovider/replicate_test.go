package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// predictionJSON is what the tests read from a prediction.
type predictionJSON struct {
	ID          string             `json:"id"`
	Model       string             `json:"model"`
	Version     string             `json:"version"`
	Status      string             `json:"status"`
	Logs        string             `json:"logs"`
	Output      []string           `json:"output"`
	Error       *string            `json:"error"`
	CreatedAt   string             `json:"created_at"`
	StartedAt   *string            `json:"started_at"`
	CompletedAt *string            `json:"completed_at"`
	URLs        map[string]string  `json:"urls"`
	Metrics     map[string]float64 `json:"metrics"`
}

// replicateInput is a minimal prediction request body.
var replicateInput = map[string]any{"input": map[string]any{"prompt": "a lighthouse"}}

// create posts a prediction for model owner/name and returns it.
func (ts *testServer) create(t *testing.T, model string) predictionJSON {
	t.Helper()
	var p predictionJSON
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/models/"+model+"/predictions", replicateInput), http.StatusCreated, &p)
	return p
}

// poll gets a prediction by id.
func (ts *testServer) poll(t *testing.T, id string) predictionJSON {
	t.Helper()
	var p predictionJSON
	decodeJSON(t, ts.do(t, "GET", "/replicate/v1/predictions/"+id, nil), http.StatusOK, &p)
	return p
}

// cancelPrediction cancels a prediction by id.
func (ts *testServer) cancelPrediction(t *testing.T, id string) predictionJSON {
	t.Helper()
	var p predictionJSON
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/predictions/"+id+"/cancel", nil), http.StatusOK, &p)
	return p
}

func TestReplicateLifecycle(t *testing.T) {
	clock := newFakeClock()
	ts := startServer(t, config{JobDuration: time.Second, Now: clock.Now})

	p := ts.create(t, "acme/image-demo")
	if p.Status != "starting" || p.Logs != "" || p.Output != nil || p.StartedAt != nil || p.Model != "acme/image-demo" {
		t.Fatalf("created = %+v", p)
	}
	base := ts.URL + "/replicate/v1/predictions/" + p.ID
	if p.URLs["get"] != base || p.URLs["cancel"] != base+"/cancel" {
		t.Fatalf("urls = %v, want absolute URLs under %s", p.URLs, base)
	}

	steps := []struct {
		advance time.Duration
		status  string
		logs    string
	}{
		{100 * time.Millisecond, "starting", ""},
		{100 * time.Millisecond, "processing", "step 1/5\n"},
		{320 * time.Millisecond, "processing", "step 1/5\nstep 2/5\nstep 3/5\n"},
		{479 * time.Millisecond, "processing", "step 1/5\nstep 2/5\nstep 3/5\nstep 4/5\nstep 5/5\n"},
		{1 * time.Millisecond, "succeeded", "step 1/5\nstep 2/5\nstep 3/5\nstep 4/5\nstep 5/5\n"},
	}
	for _, s := range steps {
		clock.Advance(s.advance)
		p = ts.poll(t, p.ID)
		if p.Status != s.status || p.Logs != s.logs {
			t.Fatalf("after %s: status %q logs %q, want %q %q", s.advance, p.Status, p.Logs, s.status, s.logs)
		}
		if (p.StartedAt != nil) != (s.status != "starting") {
			t.Fatalf("status %s with started_at %v", p.Status, p.StartedAt)
		}
	}
	if p.CompletedAt == nil || p.Error != nil || p.Metrics["predict_time"] != 0.8 || p.Metrics["total_time"] != 1 {
		t.Fatalf("succeeded = %+v", p)
	}
	want := ts.URL + "/replicate/files/" + p.ID + ".png"
	if len(p.Output) != 1 || p.Output[0] != want {
		t.Fatalf("output = %v, want [%s]", p.Output, want)
	}

	// The output is a valid PNG, served without a credential.
	resp, err := http.Get(p.Output[0])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("file: status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("file is not a PNG: %v", err)
	}

	// Canceling a finished prediction changes nothing.
	if p = ts.cancelPrediction(t, p.ID); p.Status != "succeeded" {
		t.Fatalf("cancel after success: status %q", p.Status)
	}
}

func TestReplicateCancel(t *testing.T) {
	clock := newFakeClock()
	ts := startServer(t, config{JobDuration: time.Second, Now: clock.Now})
	p := ts.create(t, "acme/image-demo")
	clock.Advance(300 * time.Millisecond)
	p = ts.cancelPrediction(t, p.ID)
	if p.Status != "canceled" || p.Logs != "step 1/5\n" || p.CompletedAt == nil || p.Output != nil {
		t.Fatalf("canceled = %+v", p)
	}
	clock.Advance(10 * time.Minute)
	if p = ts.poll(t, p.ID); p.Status != "canceled" || p.Logs != "step 1/5\n" {
		t.Fatalf("later = %+v", p)
	}
	if resp := ts.do(t, "GET", "/replicate/files/"+p.ID+".png", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("file of a canceled prediction: status %d", resp.StatusCode)
	}

	// Canceled before it started: no started_at, no metrics.
	q := ts.create(t, "acme/image-demo")
	if q = ts.cancelPrediction(t, q.ID); q.Status != "canceled" || q.StartedAt != nil || len(q.Metrics) != 0 {
		t.Fatalf("canceled while starting = %+v", q)
	}
}

func TestReplicateScriptedJobs(t *testing.T) {
	clock := newFakeClock()
	ts := startServer(t, config{JobDuration: time.Second, Now: clock.Now})
	failed := ts.create(t, "acme/fail-demo")
	stalled := ts.create(t, "acme/stall-demo")
	slow := ts.create(t, "acme/slow-demo")

	clock.Advance(time.Second)
	if p := ts.poll(t, failed.ID); p.Status != "failed" || p.Error == nil || p.Output != nil || p.CompletedAt == nil {
		t.Errorf("fail model = %+v", p)
	}
	if p := ts.poll(t, slow.ID); p.Status != "processing" {
		t.Errorf("slow model after 1×: %+v", p)
	}
	clock.Advance(4 * time.Second)
	if p := ts.poll(t, slow.ID); p.Status != "succeeded" {
		t.Errorf("slow model after 5×: %+v", p)
	}
	if p := ts.poll(t, stalled.ID); p.Status != "processing" || p.Logs != "step 1/5\n" {
		t.Errorf("stall model = %+v", p)
	}
	if p := ts.cancelPrediction(t, stalled.ID); p.Status != "canceled" {
		t.Errorf("stall model after cancel = %+v", p)
	}
}

func TestReplicateVersionedCreate(t *testing.T) {
	ts := startServer(t, config{})
	var p predictionJSON
	body := map[string]any{"version": "acme/image-demo:5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa", "input": map[string]any{"prompt": "x"}}
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/predictions", body), http.StatusCreated, &p)
	if p.Model != "acme/image-demo" || p.Version != body["version"] || p.Status != "starting" {
		t.Errorf("prediction = %+v", p)
	}

	for name, tt := range map[string]struct {
		path   string
		body   any
		status int
	}{
		"bad JSON":       {"/replicate/v1/predictions", "nope", http.StatusBadRequest},
		"no version":     {"/replicate/v1/predictions", map[string]any{"input": map[string]any{}}, http.StatusUnprocessableEntity},
		"no input":       {"/replicate/v1/models/acme/x/predictions", map[string]any{}, http.StatusUnprocessableEntity},
		"input not obj":  {"/replicate/v1/models/acme/x/predictions", map[string]any{"input": "x"}, http.StatusUnprocessableEntity},
		"unknown get":    {"/replicate/v1/predictions/nope", nil, http.StatusNotFound},
		"unknown cancel": {"/replicate/v1/predictions/nope/cancel", map[string]any{}, http.StatusNotFound},
		"unknown file":   {"/replicate/files/nope.png", nil, http.StatusNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			method := "POST"
			if tt.body == nil {
				method = "GET"
			}
			var got struct {
				Title  string `json:"title"`
				Detail string `json:"detail"`
				Status int    `json:"status"`
			}
			resp := ts.do(t, method, tt.path, tt.body)
			decodeJSON(t, resp, tt.status, &got)
			if got.Status != tt.status || got.Title == "" || got.Detail == "" {
				t.Errorf("problem = %+v", got)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}

func TestReplicatePreferWait(t *testing.T) {
	ts := startServer(t, config{JobDuration: 50 * time.Millisecond})
	var p predictionJSON
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/models/acme/image-demo/predictions", replicateInput, "Prefer", "wait=5"), http.StatusCreated, &p)
	if p.Status != "succeeded" || len(p.Output) != 1 {
		t.Errorf("Prefer: wait answered %+v", p)
	}
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/models/acme/fail-demo/predictions", replicateInput, "Prefer", "wait"), http.StatusCreated, &p)
	if p.Status != "failed" {
		t.Errorf("Prefer: wait on a failing model answered %+v", p)
	}
}

func TestPreferWait(t *testing.T) {
	tests := []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"", 0, false},
		{"respond-async", 0, false},
		{"wait", 60 * time.Second, true},
		{"wait=5", 5 * time.Second, true},
		{"foo, wait = 7", 7 * time.Second, true},
		{"wait=0", 60 * time.Second, true},
		{"wait=abc", 60 * time.Second, true},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.header != "" {
			h.Set("Prefer", tt.header)
		}
		if got, ok := preferWait(h); got != tt.want || ok != tt.ok {
			t.Errorf("preferWait(%q) = %s %v, want %s %v", tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReplicateExpiry(t *testing.T) {
	clock := newFakeClock()
	st := newPredictionStore(time.Minute)
	st.add(prediction{id: "old", created: clock.Now(), duration: time.Second}, clock.Now())
	clock.Advance(59 * time.Second)
	if _, ok := st.get("old", clock.Now()); !ok {
		t.Fatal("prediction expired early")
	}
	clock.Advance(time.Second)
	if _, ok := st.get("old", clock.Now()); ok {
		t.Fatal("expired prediction still visible")
	}
	if _, _, ok := st.cancel("old", clock.Now()); ok {
		t.Fatal("expired prediction can still be canceled")
	}
	st.add(prediction{id: "new", created: clock.Now(), duration: time.Second}, clock.Now())
	if n := st.len(); n != 1 {
		t.Fatalf("store holds %d entries after the sweep, want 1", n)
	}
}

func TestReplicateConcurrentUse(t *testing.T) {
	ts := startServer(t, config{JobDuration: 20 * time.Millisecond})
	// Helpers that call t.Fatal must stay on the test goroutine, so the workers use
	// plain requests and report with t.Errorf.
	call := func(method, path string, body []byte) (predictionJSON, error) {
		var p predictionJSON
		req, err := http.NewRequest(method, ts.URL+path, bytes.NewReader(body))
		if err != nil {
			return p, err
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			return p, err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return p, fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
		}
		return p, json.NewDecoder(resp.Body).Decode(&p)
	}
	input := []byte(`{"input":{"prompt":"x"}}`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			p, err := call("POST", "/replicate/v1/models/acme/image-demo/predictions", input)
			for i := 0; err == nil && p.Status != "succeeded" && i < 100; i++ {
				time.Sleep(5 * time.Millisecond)
				p, err = call("GET", "/replicate/v1/predictions/"+p.ID, nil)
			}
			if err != nil || p.Status != "succeeded" {
				t.Errorf("prediction %s: status %q, err %v", p.ID, p.Status, err)
			}
		})
		wg.Go(func() {
			p, err := call("POST", "/replicate/v1/models/acme/stall-demo/predictions", input)
			if err == nil {
				p, err = call("POST", "/replicate/v1/predictions/"+p.ID+"/cancel", nil)
			}
			if err != nil || p.Status != "canceled" {
				t.Errorf("cancel %s: status %q, err %v", p.ID, p.Status, err)
			}
		})
	}
	wg.Wait()
}
