package openai

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// call sends one request to the door served over k.
func call(t *testing.T, k *fakeKit, method, target, body string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" && method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	serveDoor(k).ServeHTTP(rec, req)
	return rec
}

func decodeResponse(t *testing.T, rec *httptest.ResponseRecorder) responses.Response {
	t.Helper()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var r responses.Response
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	return r
}

func decodeError(t *testing.T, rec *httptest.ResponseRecorder, status int, code protocol.Code) errorObject {
	t.Helper()
	var b errorBody
	if rec.Code != status || json.Unmarshal(rec.Body.Bytes(), &b) != nil || b.Error.Code != code {
		t.Fatalf("got %d %s; want %d with code %s", rec.Code, rec.Body, status, code)
	}
	return b.Error
}

func TestCreateWaitsForTheEnd(t *testing.T) {
	k := newFakeKit()
	rec := call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi","metadata":{"team":"a"}}`)
	r := decodeResponse(t, rec)
	if r.Status != "completed" || r.OutputText() != "Hello" || r.Model != "echo" || r.Usage.TotalTokens != 5 || r.Metadata["team"] != "a" {
		t.Errorf("response %s", rec.Body)
	}
	if id := rec.Header().Get(compat.ExecutionHeader); id == "" || id != r.ID {
		t.Errorf("%s = %q, response id %q", compat.ExecutionHeader, id, r.ID)
	}
	if k.requests[0].Ability != "chat" || k.requests[0].Routing != nil {
		t.Errorf("native request %+v", k.requests[0])
	}
}

func TestCreatePinsADeployment(t *testing.T) {
	k := newFakeKit()
	decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"e2e/echo","input":"hi"}`))
	if r := k.requests[0]; r.Ability != "chat" || r.Routing == nil || len(r.Routing.Only) != 1 || r.Routing.Only[0] != "e2e/echo" {
		t.Errorf("native request %+v", r)
	}
}

func TestCreateRefusals(t *testing.T) {
	k := newFakeKit()
	e := decodeError(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"gpt-ZQXCANARY","input":"hi"}`), http.StatusNotFound, protocol.CodeNotFound)
	if e.Type != "not_found_error" || strings.Contains(e.Message, "ZQXCANARY") {
		t.Errorf("unknown model: %+v", e)
	}
	e = decodeError(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi","previous_response_id":"resp_1"}`),
		http.StatusBadRequest, protocol.CodeInvalidRequest)
	if e.Type != "invalid_request_error" || !strings.HasPrefix(e.Message, "previous_response_id: ") {
		t.Errorf("previous_response_id: %+v", e)
	}
	// The native limits hold: too many parts for one execution.
	decodeError(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":[`+strings.Repeat(`{"role":"user","content":"x"},`, 256)+`{"role":"user","content":"x"}]}`),
		http.StatusBadRequest, protocol.CodeInvalidRequest)
	if k.accepted != 0 {
		t.Errorf("%d refused requests were submitted", k.accepted)
	}
}

func TestCreateFailureIsAnHTTPError(t *testing.T) {
	k := newFakeKit()
	k.script = func(*protocol.Request) ([]any, bool) {
		return join(routeEv, []any{protocol.EventFailed, `{"error":{"code":"rate_limited","message":"the provider is rate limiting","retryable":true,"retry_after_ms":1500}}`}), false
	}
	rec := call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi"}`)
	e := decodeError(t, rec, http.StatusTooManyRequests, protocol.CodeRateLimited)
	if e.Type != "rate_limit_error" || !e.Switchboard.Retryable || rec.Header().Get("Retry-After") != "2" || rec.Header().Get(compat.ExecutionHeader) == "" {
		t.Errorf("error %+v, headers %v", e, rec.Header())
	}
	// An execution that a cancel ended is answered with its response.
	k.script = func(*protocol.Request) ([]any, bool) {
		return join(routeEv, text(0, "par"), []any{protocol.EventFailed, `{"error":{"code":"cancelled","message":"the execution was cancelled","retryable":false}}`}), false
	}
	r := decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi"}`))
	if r.Status != "cancelled" || r.Error.Code != "cancelled" || r.OutputText() != "par" || r.Output[0].Status != "incomplete" {
		t.Errorf("cancelled response %+v", r)
	}
}

func TestBackgroundAnswersAtOnce(t *testing.T) {
	k := newFakeKit()
	k.script = func(*protocol.Request) ([]any, bool) { return nil, true } // accepted, and nothing yet
	r := decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi","background":true}`))
	if r.Status != "queued" || len(r.Output) != 0 {
		t.Errorf("background response %+v", r)
	}
	k.appendEvent(r.ID, protocol.EventRouteSelected, routeEv[1].(string))
	k.appendEvent(r.ID, protocol.EventOutputDelta, text(0, "Hel")[1].(string))
	got := decodeResponse(t, call(t, k, http.MethodGet, "/v1/responses/"+r.ID, ""))
	if got.Status != "in_progress" || got.OutputText() != "Hel" || got.Output[0].Status != "in_progress" || got.Model != "echo" {
		t.Errorf("running response %+v", got)
	}
	c := decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses/"+r.ID+"/cancel", ""))
	if c.Status != "cancelled" {
		t.Errorf("cancel answered %+v", c)
	}
	again := decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses/"+r.ID+"/cancel", ""))
	if again.Status != "cancelled" || k.cancelled != 1 {
		t.Errorf("second cancel: %+v, %d cancels", again, k.cancelled)
	}
}

// streamOf reads an event stream answer into its frames.
func streamOf(t *testing.T, rec *httptest.ResponseRecorder) []frame {
	t.Helper()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	return frames(t, rec.Body.Bytes())
}

func TestStreamAndResume(t *testing.T) {
	k := newFakeKit()
	rec := call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi","stream":true}`)
	full := streamOf(t, rec)
	if full[0].event != "response.created" || full[len(full)-1].event != "response.completed" {
		t.Fatalf("stream %v", full)
	}
	id := rec.Header().Get(compat.ExecutionHeader)
	for _, target := range []string{
		"/v1/responses/" + id + "?stream=true&starting_after=3",
		"/v1/responses/" + id + "?starting_after=3&include_obfuscation=false",
	} {
		body := ""
		if !strings.Contains(target, "stream=") {
			body = `{"stream":true}` // as openai-go's GetStreaming sends it
		}
		got := streamOf(t, call(t, k, http.MethodGet, target, body))
		if len(got) != len(full)-4 || got[0] != full[4] || got[len(got)-1] != full[len(full)-1] {
			t.Errorf("%s: %d frames from %v; want the %d after 3", target, len(got), got[0], len(full)-4)
		}
	}
	whole := streamOf(t, call(t, k, http.MethodGet, "/v1/responses/"+id+"?stream=true", ""))
	if len(whole) != len(full) {
		t.Errorf("replay of %d frames, want %d", len(whole), len(full))
	}
	if got := streamOf(t, call(t, k, http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after=1000", "")); len(got) != 0 {
		t.Errorf("resume past the end: %v", got)
	}
	if rec := call(t, k, http.MethodHead, "/v1/responses/"+id+"?stream=true&starting_after=3", ""); rec.Code != http.StatusOK ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("HEAD of a stream: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
}

func TestGetRefusals(t *testing.T) {
	k := newFakeKit()
	id := decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi"}`)).ID
	for target, want := range map[string]string{
		"?starting_after=2":                       "starting_after: requires stream=true",
		"?stream=true&starting_after=-1":          "starting_after: must be a non-negative integer",
		"?stream=true&starting_after=01":          "starting_after: must be a non-negative integer",
		"?stream=yes":                             "stream: must be true or false",
		"?stream=true&stream=true":                "stream: must be given once",
		"?include[]=message.output_text.logprobs": "include: not supported by this front door",
		"?ZQXCANARY=1":                            "query: unknown parameter",
	} {
		e := decodeError(t, call(t, k, http.MethodGet, "/v1/responses/"+id+target, ""), http.StatusBadRequest, protocol.CodeInvalidRequest)
		if e.Message != want {
			t.Errorf("%s: %q, want %q", target, e.Message, want)
		}
	}
	decodeError(t, call(t, k, http.MethodGet, "/v1/responses/exe_unknown", ""), http.StatusNotFound, protocol.CodeNotFound)
	decodeError(t, call(t, k, http.MethodPost, "/v1/responses/exe_unknown/cancel", ""), http.StatusNotFound, protocol.CodeNotFound)
	decodeError(t, call(t, k, http.MethodDelete, "/v1/responses/exe_unknown", ""), http.StatusNotFound, protocol.CodeNotFound)
}

func TestDelete(t *testing.T) {
	k := newFakeKit()
	id := decodeResponse(t, call(t, k, http.MethodPost, "/v1/responses", `{"model":"chat","input":"hi"}`)).ID
	rec := call(t, k, http.MethodDelete, "/v1/responses/"+id, "")
	if rec.Code != http.StatusOK || rec.Body.String() != `{"id":"`+id+`","object":"response","deleted":true}` {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	decodeError(t, call(t, k, http.MethodGet, "/v1/responses/"+id, ""), http.StatusNotFound, protocol.CodeNotFound)
	decodeError(t, call(t, k, http.MethodDelete, "/v1/responses/"+id, ""), http.StatusNotFound, protocol.CodeNotFound)
}

// leavingCall posts body with a client that leaves once the execution is running, and
// returns the execution's id.
func leavingCall(t *testing.T, k *fakeKit, body string, header ...string) string {
	t.Helper()
	srv := httptest.NewServer(serveDoor(k))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		k.mu.Lock()
		n := k.accepted
		k.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the handler is waiting on the execution
	cancel()
	<-done
	k.mu.Lock()
	defer k.mu.Unlock()
	for id := range k.execs {
		return id
	}
	t.Fatal("no execution was created")
	return ""
}

// waitCancelled reports whether execution id ends cancelled within a second.
func waitCancelled(k *fakeKit, id string) bool {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		_, evs, _ := k.exec(id)
		if evs[len(evs)-1].Type == protocol.EventFailed {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func TestDisconnects(t *testing.T) {
	hold := func(*protocol.Request) ([]any, bool) { return join(routeEv, text(0, "Hel")), true }
	for _, tc := range []struct {
		name   string
		body   string
		header []string
		cancel bool
	}{
		{"waiting caller leaves", `{"model":"chat","input":"hi"}`, nil, true},
		{"streaming caller leaves", `{"model":"chat","input":"hi","stream":true}`, nil, true},
		{"keyed caller leaves", `{"model":"chat","input":"hi","stream":true}`, []string{"Idempotency-Key", "k1"}, false},
		{"background stream caller leaves", `{"model":"chat","input":"hi","stream":true,"background":true}`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newFakeKit()
			k.script = hold
			id := leavingCall(t, k, tc.body, tc.header...)
			if got := waitCancelled(k, id); got != tc.cancel {
				t.Errorf("cancelled: %v, want %v", got, tc.cancel)
			}
		})
	}

	t.Run("a keyed retry re-attaches and replays from the start", func(t *testing.T) {
		k := newFakeKit()
		k.script = hold
		body := `{"model":"chat","input":"hi","stream":true}`
		id := leavingCall(t, k, body, "Idempotency-Key", "k2")
		go func() {
			time.Sleep(50 * time.Millisecond)
			k.appendEvent(id, protocol.EventCompleted, `{"finish_reason":"stop"}`)
		}()
		rec := call(t, k, http.MethodPost, "/v1/responses", body, "Idempotency-Key", "k2")
		fs := streamOf(t, rec)
		if rec.Header().Get(compat.ExecutionHeader) != id || fs[0].event != "response.created" || fs[len(fs)-1].event != "response.completed" ||
			!strings.Contains(fs[4].data, `"delta":"Hel"`) || k.accepted != 1 {
			t.Errorf("retry: %s, %d executions", rec.Body, k.accepted)
		}
	})
}
