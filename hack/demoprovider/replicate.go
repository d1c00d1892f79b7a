package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Replicate predictions: an asynchronous job API. A prediction's state is a pure
// function of its creation time, the configured job duration, its scenario and (if any)
// its cancellation time, so polling is deterministic under a fake clock:
//
//	[0, D/5)  starting    no logs
//	[D/5, D)  processing  logs "step 1/5" … "step 5/5", one line per fifth of the run
//	D         succeeded   output [".../replicate/files/{id}.png"], metrics.predict_time
//
// D is --job-duration (×5 for "slow" models). "fail" models end failed at D; "stall"
// models stay processing at step 1 until canceled.

// predictionSteps is the number of "step k/N" log lines of a full run.
const predictionSteps = 5

// prediction is one stored job. It is a value: the store hands out copies.
type prediction struct {
	id, model, version string
	input              json.RawMessage
	created            time.Time
	duration           time.Duration
	stall, fail        bool
	// canceled is when the prediction was canceled; zero if it was not.
	canceled time.Time
}

// predictionState is what a prediction looks like at one instant.
type predictionState struct {
	status string
	// steps is how many "step k/N" log lines have been written.
	steps int
	// started and completed are zero until the job starts or ends.
	started, completed time.Time
}

// terminal reports whether the status is final.
func (st predictionState) terminal() bool {
	switch st.status {
	case "succeeded", "failed", "canceled":
		return true
	}
	return false
}

// stateAt derives p's state at now.
func (p prediction) stateAt(now time.Time) predictionState {
	t, canceled := now, false
	if !p.canceled.IsZero() && !now.Before(p.canceled) {
		t, canceled = p.canceled, true
	}
	start, end := p.created.Add(p.duration/5), p.created.Add(p.duration)
	var st predictionState
	switch {
	case t.Before(start):
		st.status = "starting"
	case p.stall:
		st.status, st.started, st.steps = "processing", start, 1
	case t.Before(end):
		st.status, st.started = "processing", start
		st.steps = min(predictionSteps, 1+int(t.Sub(start)*predictionSteps/end.Sub(start)))
	default:
		st.status, st.started, st.completed, st.steps = "succeeded", start, end, predictionSteps
		if p.fail {
			st.status = "failed"
		}
	}
	if canceled {
		st.status, st.completed = "canceled", p.canceled
	}
	return st
}

// predictionView is the prediction object of Replicate's HTTP API.
type predictionView struct {
	ID          string             `json:"id"`
	Model       string             `json:"model"`
	Version     string             `json:"version"`
	Input       json.RawMessage    `json:"input"`
	Logs        string             `json:"logs"`
	Output      []string           `json:"output"`
	DataRemoved bool               `json:"data_removed"`
	Error       *string            `json:"error"`
	Status      string             `json:"status"`
	CreatedAt   string             `json:"created_at"`
	StartedAt   *string            `json:"started_at"`
	CompletedAt *string            `json:"completed_at"`
	URLs        map[string]string  `json:"urls"`
	Metrics     map[string]float64 `json:"metrics"`
}

// view renders p at now; base is this server's absolute Replicate root URL.
func (p prediction) view(now time.Time, base string) predictionView {
	st := p.stateAt(now)
	stamp := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		return ptr(t.UTC().Format(time.RFC3339Nano))
	}
	v := predictionView{
		ID: p.id, Model: p.model, Version: p.version, Input: p.input,
		Status:      st.status,
		CreatedAt:   *stamp(p.created),
		StartedAt:   stamp(st.started),
		CompletedAt: stamp(st.completed),
		URLs: map[string]string{
			"get":    base + "/v1/predictions/" + p.id,
			"cancel": base + "/v1/predictions/" + p.id + "/cancel",
		},
		Metrics: map[string]float64{},
	}
	var logs strings.Builder
	for k := 1; k <= st.steps; k++ {
		fmt.Fprintf(&logs, "step %d/%d\n", k, predictionSteps)
	}
	switch st.status {
	case "succeeded":
		v.Output = []string{base + "/files/" + p.id + ".png"}
	case "failed":
		v.Error = ptr("demoprovider: scripted failure")
		logs.WriteString("error: scripted failure\n")
	}
	v.Logs = logs.String()
	if !st.started.IsZero() && !st.completed.IsZero() {
		v.Metrics["predict_time"] = st.completed.Sub(st.started).Seconds()
		v.Metrics["total_time"] = st.completed.Sub(p.created).Seconds()
	}
	return v
}

// predictionStore is the concurrency-safe set of live predictions. Entries expire ttl
// after creation; expired entries are invisible at once and swept on a later add.
type predictionStore struct {
	ttl       time.Duration
	mu        sync.Mutex
	byID      map[string]prediction
	lastSweep time.Time
}

// newPredictionStore returns an empty store whose entries live for ttl.
func newPredictionStore(ttl time.Duration) *predictionStore {
	return &predictionStore{ttl: ttl, byID: make(map[string]prediction)}
}

// add stores p, sweeping expired entries at most every ttl/4 so adds stay O(1) amortized.
func (st *predictionStore) add(p prediction, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if now.Sub(st.lastSweep) >= st.ttl/4 {
		for id, q := range st.byID {
			if st.expired(q, now) {
				delete(st.byID, id)
			}
		}
		st.lastSweep = now
	}
	st.byID[p.id] = p
}

// expired reports whether p has outlived the store's ttl at now.
func (st *predictionStore) expired(p prediction, now time.Time) bool {
	return !now.Before(p.created.Add(st.ttl))
}

// get returns a copy of the live prediction id.
func (st *predictionStore) get(id string, now time.Time) (prediction, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p, ok := st.byID[id]
	if !ok || st.expired(p, now) {
		return prediction{}, false
	}
	return p, true
}

// cancel marks the live prediction id canceled at now unless it already ended, and
// returns a copy of it; canceled reports whether this call canceled it. Canceling a
// finished prediction changes nothing, as on Replicate.
func (st *predictionStore) cancel(id string, now time.Time) (p prediction, canceled, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p, ok = st.byID[id]
	if !ok || st.expired(p, now) {
		return prediction{}, false, false
	}
	if !p.stateAt(now).terminal() {
		p.canceled = now
		st.byID[id] = p
		canceled = true
	}
	return p, canceled, true
}

// len returns the number of stored entries, expired or not (for tests).
func (st *predictionStore) len() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.byID)
}

// replicateBase is the absolute URL of this server's Replicate root, built from the
// request's Host so the URLs work however the client reached the server.
func replicateBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/replicate"
}

// replicateAuthorized accepts Replicate's "Bearer" and legacy "Token" schemes.
func (s *server) replicateAuthorized(w http.ResponseWriter, r *http.Request) bool {
	if s.authorized(r, "Authorization", "Bearer ", "Token ") {
		return true
	}
	replicateError(w, http.StatusUnauthorized, "")
	return false
}

// replicateCreate serves POST /replicate/v1/predictions and
// POST /replicate/v1/models/{owner}/{name}/predictions.
func (s *server) replicateCreate(w http.ResponseWriter, r *http.Request) {
	if !s.replicateAuthorized(w, r) {
		return
	}
	var req struct {
		Version string          `json:"version"`
		Input   json.RawMessage `json:"input"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		replicateError(w, http.StatusBadRequest, "The request body is not valid JSON.")
		return
	}
	model := r.PathValue("owner") + "/" + r.PathValue("name")
	if model == "/" {
		model, _, _ = strings.Cut(req.Version, ":")
		if req.Version == "" {
			replicateError(w, http.StatusUnprocessableEntity, "version is required")
			return
		}
	}
	if !isJSONObject(req.Input) {
		replicateError(w, http.StatusUnprocessableEntity, "input is required and must be an object")
		return
	}
	sn := scenarioFor(model + " " + req.Version)
	if sn.status != 0 {
		replicateError(w, sn.status, "")
		return
	}
	p := prediction{
		id: s.nextID("demo"), model: model, version: req.Version, input: req.Input,
		created: s.cfg.Now(), duration: s.cfg.JobDuration, stall: sn.stall, fail: sn.fail,
	}
	if sn.slow {
		p.duration *= 5
	}
	s.predictions.add(p, p.created)
	s.stats.predictionsCreated.Add(1)

	if wait, ok := preferWait(r.Header); ok {
		target := p.created.Add(wait)
		if end := p.created.Add(p.duration); !p.stall && end.Before(target) {
			target = end
		}
		if sleep(r.Context(), target.Sub(s.cfg.Now())) != nil {
			return
		}
		if q, ok := s.predictions.get(p.id, s.cfg.Now()); ok {
			p = q // it may have been canceled meanwhile
		}
	}
	writeJSON(w, http.StatusCreated, "application/json", p.view(s.cfg.Now(), replicateBase(r)))
}

// preferWait parses Replicate's sync mode header, "Prefer: wait" or "Prefer: wait=N"
// (N seconds, 1..60; default 60).
func preferWait(h http.Header) (time.Duration, bool) {
	for _, v := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			name, val, hasVal := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			if !hasVal {
				return 60 * time.Second, true
			}
			n, err := strconv.Atoi(strings.TrimSpace(val))
			if err != nil || n < 1 || n > 60 {
				return 60 * time.Second, true
			}
			return time.Duration(n) * time.Second, true
		}
	}
	return 0, false
}

// isJSONObject reports whether raw is a JSON object.
func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) > 0 && json.Unmarshal(raw, &m) == nil && m != nil
}

// replicateGet serves GET /replicate/v1/predictions/{id}.
func (s *server) replicateGet(w http.ResponseWriter, r *http.Request) {
	s.stats.replicatePolls.Add(1)
	if !s.replicateAuthorized(w, r) {
		return
	}
	now := s.cfg.Now()
	p, ok := s.predictions.get(r.PathValue("id"), now)
	if !ok {
		replicateError(w, http.StatusNotFound, "")
		return
	}
	writeJSON(w, http.StatusOK, "application/json", p.view(now, replicateBase(r)))
}

// replicateCancel serves POST /replicate/v1/predictions/{id}/cancel.
func (s *server) replicateCancel(w http.ResponseWriter, r *http.Request) {
	s.stats.replicateCancelRequests.Add(1)
	if !s.replicateAuthorized(w, r) {
		return
	}
	now := s.cfg.Now()
	p, canceled, ok := s.predictions.cancel(r.PathValue("id"), now)
	if canceled {
		s.stats.predictionsCanceled.Add(1)
	}
	if !ok {
		replicateError(w, http.StatusNotFound, "")
		return
	}
	writeJSON(w, http.StatusOK, "application/json", p.view(now, replicateBase(r)))
}

// replicateFile serves GET /replicate/files/{id}.png, the output of a succeeded
// prediction. Like Replicate's delivery URLs it needs no credential.
func (s *server) replicateFile(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutSuffix(r.PathValue("file"), ".png")
	now := s.cfg.Now()
	p, found := s.predictions.get(id, now)
	if !ok || !found || p.stateAt(now).status != "succeeded" {
		replicateError(w, http.StatusNotFound, "")
		return
	}
	b, err := demoPNG()
	if err != nil {
		http.Error(w, "demoprovider: encode image", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b) // a client that went away needs no answer
}

// demoPNG is the output image: a valid 8×8 PNG, encoded once.
var demoPNG = sync.OnceValues(func() ([]byte, error) {
	img := image.NewNRGBA(image.Rect(0, 0, 8, 8))
	for y := range 8 {
		for x := range 8 {
			img.Set(x, y, color.NRGBA{R: uint8(x * 32), G: uint8(y * 32), B: 160, A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
})
