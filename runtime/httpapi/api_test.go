package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func mustUnmarshal(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

func TestSubmitAccepted(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodPost, "/v1/executions", chat("hi"), "Content-Type", "application/json")
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var acc struct {
		ID        string    `json:"id"`
		Status    string    `json:"status"`
		CreatedAt time.Time `json:"created_at"`
		Links     struct {
			Self, Events, Result, Cancel string
		} `json:"links"`
	}
	mustUnmarshal(t, r.body, &acc)
	if !strings.HasPrefix(acc.ID, "exe_") || acc.Status != "accepted" || acc.CreatedAt.IsZero() {
		t.Fatalf("unexpected body %s", r.body)
	}
	self := "/v1/executions/" + acc.ID
	if got := r.header.Get("Location"); got != self {
		t.Errorf("Location %q, want %q", got, self)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Error("a first submission is marked as replayed")
	}
	wantLinks := struct{ Self, Events, Result, Cancel string }{self, self + "/events", self + "/result", self + "/cancel"}
	if diff := cmp.Diff(wantLinks, acc.Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}

	snap := e.waitTerminal(t, acc.ID)
	if snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != "hello" {
		t.Fatalf("unexpected result %+v", snap)
	}

	st, err := e.client.Get(context.Background(), acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != protocol.StatusCompleted || st.Ability != "chat" || st.Attempts != 1 || st.Route == nil ||
		st.LastSequence != snap.Sequence || !st.CreatedAt.Equal(acc.CreatedAt) {
		t.Errorf("unexpected status %+v (accepted at %v)", st, acc.CreatedAt)
	}
}

func TestRejectsBadRequests(t *testing.T) {
	e := newEnv(t, withAPI(func(c *httpapi.Config) { c.MaxRequestBytes = 1024 }))
	big := chat(strings.Repeat("x", 2048))
	tests := []struct {
		name   string
		method string
		body   string
		status int
		code   protocol.Code
	}{
		{"unknown field", http.MethodPost, `{"ability":"chat","input":[{"type":"text","text":"hi"}],"bogus":1}`, 400, protocol.CodeInvalidRequest},
		{"unknown part field", http.MethodPost, `{"ability":"chat","input":[{"type":"text","text":"hi","x":1}]}`, 400, protocol.CodeInvalidRequest},
		{"not json", http.MethodPost, `{"ability":`, 400, protocol.CodeInvalidRequest},
		{"empty body", http.MethodPost, ``, 400, protocol.CodeInvalidRequest},
		{"oversized", http.MethodPost, big, 413, protocol.CodeRequestTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, e.do(t, tt.method, "/v1/executions", tt.body), tt.status, tt.code)
		})
	}
	t.Run("oversized without length", func(t *testing.T) {
		// A chunked body has no Content-Length: the limit applies while reading.
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/executions", struct{ *strings.Reader }{strings.NewReader(big)})
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var body protocol.ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != protocol.CodeRequestTooLarge {
			t.Fatalf("body %+v, %v", body, err)
		}
	})
	if n := e.calls.Load(); n != 0 {
		t.Errorf("the adapter ran %d times for rejected requests", n)
	}
}

func TestNotFoundIsJSON(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct {
		method, path string
		headers      []string
	}{
		{http.MethodGet, "/v1/executions/exe_unknown", nil},
		{http.MethodGet, "/v1/executions/exe_unknown/result", nil},
		{http.MethodPost, "/v1/executions/exe_unknown/cancel", nil},
		{http.MethodGet, "/v1/executions/exe_unknown/events", []string{"Accept", "text/event-stream"}},
		{http.MethodGet, "/v1/executions/exe_unknown/events?after=3", []string{"Last-Event-ID", "5"}},
		{http.MethodGet, "/v1/executions/exe_unknown/events", []string{"Accept", "application/json"}},
		{http.MethodGet, "/v2/anything", nil},
		{http.MethodGet, "/", nil},
		{http.MethodGet, "/v1/executions/exe_unknown/other", nil},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := e.do(t, tt.method, tt.path, "", tt.headers...)
			pe := wantError(t, r, http.StatusNotFound, protocol.CodeNotFound)
			if strings.Contains(pe.Message, "exe_unknown") {
				t.Errorf("message echoes the id: %q", pe.Message)
			}
		})
	}
}

func TestMethodNotAllowedIsJSON(t *testing.T) {
	e := newEnv(t)
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/executions", "POST"},
		{http.MethodDelete, "/v1/executions/exe_x", "GET, HEAD"},
		{http.MethodPost, "/v1/executions/exe_x/result", "GET, HEAD"},
		{http.MethodGet, "/v1/executions/exe_x/cancel", "POST"},
		{http.MethodPut, "/v1/executions/exe_x/events", "GET, HEAD"},
	} {
		r := e.do(t, tt.method, tt.path, "")
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: status %d, Allow %q", tt.method, tt.path, r.status, r.header.Get("Allow"))
		}
		errorBody(t, r)
	}
}

func TestUnsupportedCapability(t *testing.T) {
	e := newEnv(t) // text-only models
	const png = "iVBORw0KGgo="
	for name, body := range map[string]string{
		"no requirements":       `{"ability":"chat","input":[{"type":"text","text":"what is this?"},{"type":"image","media_type":"image/png","data":"` + png + `"}]}`,
		"narrower requirements": `{"ability":"chat","input":[{"type":"image","media_type":"image/png","data":"` + png + `"}],"requirements":["output.text"]}`,
		"image by uri":          `{"ability":"chat","input":[{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"}]}`,
		"tools":                 `{"ability":"chat","input":[{"type":"text","text":"hi"},{"type":"tool","name":"get_weather","parameters":{"type":"object"}}]}`,
		"unknown ability":       `{"ability":"translate","input":[{"type":"text","text":"hi"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			pe := wantError(t, e.do(t, http.MethodPost, "/v1/executions", body), http.StatusUnprocessableEntity, protocol.CodeUnsupportedCapability)
			if strings.Contains(pe.Message, "translate") || strings.Contains(pe.Message, "chat") {
				t.Errorf("message names the ability: %q", pe.Message)
			}
		})
	}
	if n := e.calls.Load(); n != 0 {
		t.Errorf("the adapter was called %d times", n)
	}
	if n := e.store.creates.Load(); n != 0 {
		t.Errorf("%d executions were created", n)
	}
}

func TestRateLimited(t *testing.T) {
	e := newEnv(t, withMaxConcurrent(1))
	e.setScript(hang)
	id := e.submit(t, chat("first"))
	r := e.do(t, http.MethodPost, "/v1/executions", chat("second"), "Idempotency-Key", "k-429")
	wantError(t, r, http.StatusTooManyRequests, protocol.CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}

	// The rejected request was not remembered: once there is room, the key works.
	if _, err := e.client.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	e.waitTerminal(t, id)
	e.setScript(reply("ok"))
	eventually(t, "a free execution slot", func() bool {
		r = e.do(t, http.MethodPost, "/v1/executions", chat("second"), "Idempotency-Key", "k-429")
		return r.status != http.StatusTooManyRequests
	})
	if r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("status %d, replayed %q: %s", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t)
	e.setScript(hang)
	id := e.submit(t, chat("long"))

	r := e.do(t, http.MethodPost, "/v1/executions/"+id+"/cancel", "")
	if r.status != http.StatusAccepted {
		t.Fatalf("cancel of a running execution: status %d: %s", r.status, r.body)
	}
	var st protocol.ExecutionStatus
	mustUnmarshal(t, r.body, &st)
	if st.ID != id {
		t.Fatalf("cancel answered with status of %q", st.ID)
	}

	snap := e.waitTerminal(t, id)
	if snap.Status != protocol.StatusFailed || snap.Error == nil || snap.Error.Code != protocol.CodeCancelled {
		t.Fatalf("after cancel: %+v", snap)
	}

	r = e.do(t, http.MethodPost, "/v1/executions/"+id+"/cancel", "")
	if r.status != http.StatusOK {
		t.Fatalf("cancel of a terminal execution: status %d: %s", r.status, r.body)
	}
	mustUnmarshal(t, r.body, &st)
	if st.Status != protocol.StatusFailed || st.Error == nil || st.Error.Code != protocol.CodeCancelled {
		t.Fatalf("status after no-op cancel: %+v", st)
	}

	// The client reports the same through its typed API.
	cst, err := e.client.Cancel(context.Background(), id)
	if err != nil || cst.Status != protocol.StatusFailed {
		t.Fatalf("client cancel: %+v, %v", cst, err)
	}
}

func TestResultWhileRunning(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("stream"))
	g.delta(t, "par")
	g.delta(t, "tial")

	res, err := e.client.Result(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != protocol.StatusRunning || res.Sequence != 4 || res.Output[0].Text != "partial" {
		t.Fatalf("partial result: %+v", res)
	}
	st, err := e.client.Get(context.Background(), id)
	if err != nil || st.Status != protocol.StatusRunning || st.LastSequence != 4 {
		t.Fatalf("status while running: %+v, %v", st, err)
	}
	g.finish()
	if snap := e.waitTerminal(t, id); snap.Output[0].Text != "partial" {
		t.Fatalf("final: %+v", snap)
	}
}

func TestClientErrors(t *testing.T) {
	e := newEnv(t)
	_, err := e.client.Get(context.Background(), "exe_missing")
	var ce *client.Error
	if !asError(err, &ce) || ce.StatusCode != http.StatusNotFound || ce.Code() != protocol.CodeNotFound || ce.Retryable() {
		t.Fatalf("Get unknown: %v", err)
	}
	var pe *protocol.Error
	if !asError(err, &pe) || pe.Code != protocol.CodeNotFound {
		t.Fatalf("the portable error is not in the chain: %v", err)
	}
	_, err = e.client.Submit(context.Background(), &protocol.Request{Ability: "chat"})
	if !asError(err, &ce) || ce.Code() != protocol.CodeInvalidRequest {
		t.Fatalf("Submit invalid: %v", err)
	}
	if _, err := e.client.Events(context.Background(), "exe_missing", 0); !asError(err, &ce) || ce.StatusCode != 404 {
		t.Fatalf("Events unknown: %v", err)
	}
	if err := e.client.Follow(context.Background(), "exe_missing", 0, func(protocol.Event) error { return nil }); !asError(err, &ce) {
		t.Fatalf("Follow unknown: %v", err)
	}
}

// TestRedaction sends canary strings in every caller-controlled place and checks that no
// error body, synchronous or in events, repeats them.
func TestRedaction(t *testing.T) {
	e := newEnv(t)
	const canary = "zqcanary"
	bodies := []struct {
		name, body string
	}{
		{"ability", `{"ability":"` + canary + `","input":[{"type":"text","text":"hi"}]}`},
		{"ability too long", `{"ability":"` + strings.Repeat(canary, 10) + `","input":[{"type":"text","text":"hi"}]}`},
		{"metadata key", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"` + canary + `-Bad":"v"}}`},
		{"metadata value", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"k":"` + strings.Repeat(canary, 40) + `"}}`},
		{"extension key", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"` + canary + `.x":1}}`},
		{"extension value", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"openai.reasoning_effort":"` + canary + ` bad"}}`},
		{"parameter name", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"replicate.input":{"` + canary + `-x":1}}}`},
		{"parameter value", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"replicate.input":{"seed":"https://` + canary + `"}}}`},
		{"unknown field", `{"ability":"chat","input":[{"type":"text","text":"hi"}],"` + canary + `":1}`},
		{"text part", `{"ability":"chat","input":[{"type":"text","text":"` + canary + `","` + canary + `":2}]}`},
		{"image with text", `{"ability":"chat","input":[{"type":"text","text":"` + canary + `"},{"type":"image","media_type":"image/png","uri":"https://` + canary + `.example/?q=` + canary + `"}],"metadata":{"team":"` + canary + `"}}`},
		{"bad media type", `{"ability":"chat","input":[{"type":"image","media_type":"image/` + canary + `!!","data":"AA=="}]}`},
	}
	for _, b := range bodies {
		r := e.do(t, http.MethodPost, "/v1/executions", b.body)
		if r.status < 400 {
			t.Errorf("%s: status %d", b.name, r.status)
		}
		errorBody(t, r)
		if strings.Contains(strings.ToLower(r.body), canary) {
			t.Errorf("%s: error body leaks the canary: %s", b.name, r.body)
		}
	}

	// The same key with another body: the mismatch message must not echo either body.
	ok := `{"ability":"chat","input":[{"type":"text","text":"` + canary + `"}],"metadata":{"team":"` + canary + `"},"extensions":{"openai.temperature":1}}`
	e.submit(t, ok, "Idempotency-Key", canary)
	r := e.do(t, http.MethodPost, "/v1/executions", strings.Replace(ok, `"openai.temperature":1`, `"openai.temperature":0.5`, 1), "Idempotency-Key", canary)
	wantError(t, r, http.StatusUnprocessableEntity, protocol.CodeIdempotencyKeyReused)
	if strings.Contains(strings.ToLower(r.body), canary) {
		t.Errorf("key reuse leaks the canary: %s", r.body)
	}

	// An execution that fails with a dependency error: neither the error text nor the
	// request's content appears in its failure.
	e.setScript(func(context.Context, engine.Attempt, engine.Emitter) (engine.Outcome, error) {
		return engine.Outcome{}, errorString("dial tcp: " + canary + " secret-internal-detail")
	})
	id := e.submit(t, ok)
	snap := e.waitTerminal(t, id)
	raw, _ := json.Marshal(snap)
	if snap.Error == nil || strings.Contains(strings.ToLower(string(raw)), canary) || strings.Contains(string(raw), "secret-internal") {
		t.Errorf("failure leaks: %s", raw)
	}
}

func asError[T error](err error, target *T) bool { return errors.As(err, target) }

type errorString string

func (e errorString) Error() string { return string(e) }

func TestConcurrentSubmissions(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	ids := &collector[string]{}
	for i := range 50 {
		wg.Go(func() {
			acc, err := e.client.Submit(context.Background(), &protocol.Request{
				Ability: "chat",
				Input:   []protocol.Part{{Type: protocol.PartText, Text: strings.Repeat("x", i+1)}},
			})
			if err != nil {
				t.Error(err)
				return
			}
			ids.add(acc.ID)
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids.all() {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
	if len(seen) != 50 || e.store.creates.Load() != 50 {
		t.Fatalf("%d ids, %d creates", len(seen), e.store.creates.Load())
	}
}

// Whether a cancel was a no-op is decided when it is requested: an execution that ends
// between the request's arrival and the cancel reaching the store gets 200, not 202.
func TestCancelRacingTheEnd(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("racing"))
	g.delta(t, "partial")
	finish := func(string) {
		g.finish()
		eventually(t, "the execution to end", func() bool {
			st, err := e.store.Get(context.Background(), id)
			return err == nil && st.Terminal
		})
	}
	e.store.beforeCancel.Store(&finish)
	r := e.do(t, http.MethodPost, "/v1/executions/"+id+"/cancel", "")
	if r.status != http.StatusOK {
		t.Fatalf("cancel that found the execution terminal: status %d, want 200: %s", r.status, r.body)
	}
	var st protocol.ExecutionStatus
	mustUnmarshal(t, r.body, &st)
	if st.Status != protocol.StatusCompleted {
		t.Errorf("status %+v, want completed", st)
	}
}

// A wrong method answers 405 with Allow and a body consistent with the documented
// exception: code invalid_request, not retryable.
func TestMethodNotAllowedBody(t *testing.T) {
	e := newEnv(t)
	r := e.do(t, http.MethodDelete, "/v1/executions/exe_x/cancel", "")
	if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Fatalf("status %d, Allow %q", r.status, r.header.Get("Allow"))
	}
	if pe := errorBody(t, r); pe.Code != protocol.CodeInvalidRequest || pe.Retryable {
		t.Errorf("405 body %+v, want invalid_request, not retryable", pe)
	}
}

// The error table of spec/http-api.md matches the codes' statuses and retryability, and
// documents the 405 exception on invalid_request.
func TestErrorTableDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../spec/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([^|]*) \\| (yes|no) \\|$")
	rows := row.FindAllStringSubmatch(string(doc), -1)
	if len(rows) < 17 {
		t.Fatalf("found %d rows of the error table, want every code", len(rows))
	}
	for _, m := range rows {
		code, status, retryable := protocol.Code(m[1]), strings.TrimSpace(m[2]), m[3] == "yes"
		if !code.Known() {
			t.Errorf("unknown code %s in the table", code)
			continue
		}
		if code.Retryable() != retryable {
			t.Errorf("%s: documented retryable %v", code, retryable)
		}
		if n, err := strconv.Atoi(strings.Fields(status)[0]); err == nil && n != code.HTTPStatus() {
			t.Errorf("%s: documented HTTP %d, want %d", code, n, code.HTTPStatus())
		}
		if code == protocol.CodeInvalidRequest && !strings.Contains(status, "405") {
			t.Errorf("invalid_request row %q does not document the 405 exception", status)
		}
	}
}
