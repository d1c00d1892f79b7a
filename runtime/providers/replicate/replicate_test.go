package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const foxRequest = `{"ability":"image","input":[
	{"type":"text","text":"a red fox"},
	{"type":"text","text":"in fresh snow"}],
	"extensions":{"replicate.input":{"num_outputs":2}}}`

// TestListOutput follows an official model's prediction from starting through two
// processing states (each polled twice) to a list of files, and checks every request,
// every event and the snapshot they fold into.
func TestListOutput(t *testing.T) {
	f := newFake(t, createdJSON("flux_starting.json"),
		okJSON("flux_processing_1.json"), okJSON("flux_processing_1.json"),
		okJSON("flux_processing_2.json"), okJSON("flux_processing_2.json"),
		okJSON("flux_succeeded.json"))
	d := deployment(f.srv.URL)
	o := attempt(context.Background(), t, d, request(t, foxRequest), time.Second, fast(f)...)
	if o.err != nil {
		t.Fatalf("Execute: %v", o.err)
	}

	wantCalls := []string{
		"POST /v1/models/black-forest-labs/flux-schnell/predictions",
		"GET /v1/predictions/m420tb253nrm60cj09c8hwfgxw",
		"GET /v1/predictions/m420tb253nrm60cj09c8hwfgxw",
		"GET /v1/predictions/m420tb253nrm60cj09c8hwfgxw",
		"GET /v1/predictions/m420tb253nrm60cj09c8hwfgxw",
		"GET /v1/predictions/m420tb253nrm60cj09c8hwfgxw",
	}
	if diff := cmp.Diff(wantCalls, f.calls()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	reqs := f.seen()
	assertAuth(t, reqs)
	assertJSON(t, "create body", jsonText(reqs[0].Body), `{"input":{"num_outputs":2,"prompt":"a red fox\n\nin fresh snow"}}`)
	if ct := reqs[0].Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("create Content-Type = %q", ct)
	}
	if p := reqs[0].Header.Get("Prefer"); p != "" {
		t.Errorf("create sent Prefer: %q; the adapter polls", p)
	}

	const artifacts = `[
		{"uri":"https://replicate.delivery/yhqm/zhBT5Cu9HFZVCZC9ecfY80gCXM9uCtA1f5vJe7MHSoJRIx3NB/out-0.webp","media_type":"image/webp","expires_at":"2024-08-31T13:00:02.75Z"},
		{"uri":"https://replicate.delivery/yhqm/SRMJkAmSnDIsJNw2zDe5tBhxyrhha2zApLZn0y2s0KZCJedTA/out-1.webp","media_type":"image/webp","expires_at":"2024-08-31T13:00:02.75Z"}]`
	const result = `[
		"https://replicate.delivery/yhqm/zhBT5Cu9HFZVCZC9ecfY80gCXM9uCtA1f5vJe7MHSoJRIx3NB/out-0.webp",
		"https://replicate.delivery/yhqm/SRMJkAmSnDIsJNw2zDe5tBhxyrhha2zApLZn0y2s0KZCJedTA/out-1.webp"]`
	assertJSON(t, "events", o.events, `[
		{"type":"execution.progress","data":{"stage":"queued"}},
		{"type":"execution.progress","data":{"stage":"running","message":"running quantized prediction"}},
		{"type":"execution.progress","data":{"stage":"running","message":"50%|█████     | 2/4 [00:00<00:00,  7.21it/s]"}},
		{"type":"output.result","data":{"result":`+result+`,"artifacts":`+artifacts+`}},
		{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":1.497716,"source":"provider"}]}}]`)
	assertJSON(t, "snapshot", protocol.Materialize("exe_test", envelopes(d, o)), `{
		"id":"exe_test","status":"completed","sequence":8,"output":[],"tool_calls":[],
		"result":`+result+`,"artifacts":`+artifacts+`,
		"usage":[{"unit":"replicate.predict_time_seconds","quantity":1.497716,"source":"provider"}],
		"finish_reason":"succeeded"}`)
	assertNoCanary(t, o)
}

// TestStringOutput: a model whose output is one file URL gives that string as the result
// and one artifact.
func TestStringOutput(t *testing.T) {
	f := newFake(t, createdJSON("pro_starting.json"), okJSON("pro_succeeded.json"))
	d := deployment(f.srv.URL, withModel("black-forest-labs/flux-1.1-pro"))
	req := request(t, `{"ability":"image","input":[
		{"type":"text","text":"a paper boat floating on calm water at sunrise"}],
		"extensions":{"replicate.input":{"aspect_ratio":"1:1","output_format":"png"}}}`)
	o := attempt(context.Background(), t, d, req, time.Second, fast(f)...)
	if o.err != nil {
		t.Fatalf("Execute: %v", o.err)
	}
	assertJSON(t, "create body", jsonText(f.seen()[0].Body),
		`{"input":{"aspect_ratio":"1:1","output_format":"png","prompt":"a paper boat floating on calm water at sunrise"}}`)
	const url = "https://replicate.delivery/czjl/Xq4cYvRrvVZ2fRk8e8TuBRmBKn9mwjoUX8aEo0yMUGUSwPTnA/output.png"
	artifacts := `[{"uri":"` + url + `","media_type":"image/png","expires_at":"2026-03-12T12:27:21.602Z"}]`
	usage := `[{"unit":"replicate.predict_time_seconds","quantity":3.190351,"source":"provider"}]`
	assertJSON(t, "events", o.events, `[
		{"type":"execution.progress","data":{"stage":"queued"}},
		{"type":"output.result","data":{"result":"`+url+`","artifacts":`+artifacts+`}},
		{"type":"usage.reported","data":{"usage":`+usage+`}}]`)
	assertJSON(t, "snapshot", protocol.Materialize("exe_test", envelopes(d, o)), `{
		"id":"exe_test","status":"completed","sequence":6,"output":[],"tool_calls":[],
		"result":"`+url+`","artifacts":`+artifacts+`,"usage":`+usage+`,"finish_reason":"succeeded"}`)
}

// TestVersion: the model and version are the deployment's alone. A pinned version runs
// through POST /v1/predictions, an unpinned model through its official-model endpoint,
// whatever the request carries: replicate.version is refused at decode (400), and in a
// request built past the decoder, or named by a json part or a parameter, it changes
// nothing.
func TestVersion(t *testing.T) {
	const version = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
	if _, err := protocol.DecodeRequest([]byte(`{"ability":"image","input":[{"type":"text","text":"Alice"}],"extensions":{"replicate.version":"` + version + `"}}`)); err == nil ||
		protocol.AsError(err).Code.HTTPStatus() != http.StatusBadRequest {
		t.Fatalf("DecodeRequest of replicate.version = %v, want 400", err)
	}
	// Built in code, past the decoder: the extension and the json part name another
	// version and model; the allowed parameter "version" is an ordinary model input.
	attack := func(t *testing.T) *protocol.Request {
		req := request(t, `{"ability":"image","input":[{"type":"text","text":"Alice"},{"type":"json","json":{"version":"0000","model":"evil/model"}}]}`)
		req.Extensions = map[string]json.RawMessage{
			"replicate.version": json.RawMessage(`"evil/model:0000"`),
			"replicate.model":   json.RawMessage(`"evil/model"`),
		}
		return req
	}
	const prompt = `"Alice\n\n{\"version\":\"0000\",\"model\":\"evil/model\"}"`
	tests := []struct {
		name  string
		model string
		calls []string
		body  string
	}{
		{"pinned by the model id", "replicate/hello-world:" + version,
			[]string{"POST /v1/predictions", "GET /v1/predictions/gm3qorzdhgbfurvjtvhg6dckhu"},
			`{"version":"` + version + `","input":{"prompt":` + prompt + `}}`},
		{"official model", "replicate/hello-world",
			[]string{"POST /v1/models/replicate/hello-world/predictions", "GET /v1/predictions/gm3qorzdhgbfurvjtvhg6dckhu"},
			`{"input":{"prompt":` + prompt + `}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, createdJSON("hello_starting.json"), okJSON("hello_succeeded.json"))
			d := deployment(f.srv.URL, withModel(tt.model))
			o := attempt(context.Background(), t, d, attack(t), time.Second, fast(f)...)
			if o.err != nil {
				t.Fatalf("Execute: %v", o.err)
			}
			if diff := cmp.Diff(tt.calls, f.calls()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			assertJSON(t, "create body", jsonText(f.seen()[0].Body), tt.body)
			assertJSON(t, "events", o.events, `[
				{"type":"execution.progress","data":{"stage":"queued"}},
				{"type":"output.result","data":{"result":"hello Alice","artifacts":[]}},
				{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":0.012683,"source":"provider"}]}}]`)
		})
	}
}

// TestTerminalFailures maps failed, canceled and aborted predictions, reporting the
// usage of those that ran.
func TestTerminalFailures(t *testing.T) {
	running := `{"type":"execution.progress","data":{"stage":"running","message":"running quantized prediction"}}`
	tests := []struct {
		name   string
		file   string
		events string
		err    string
		usage  string
	}{
		{
			name:   "failed",
			file:   "flux_failed.json",
			events: `[{"type":"execution.progress","data":{"stage":"queued"}},` + running + `,{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":2.25,"source":"provider"}]}}]`,
			usage:  `[{"unit":"replicate.predict_time_seconds","quantity":2.25,"source":"provider"}]`,
			err:    `{"code":"provider_rejected","message":"the provider's model failed on this input","retryable":false,"provider_error":{"provider":"replicate","type":"failed","request_id":"m420tb253nrm60cj09c8hwfgxw"}}`,
		},
		{
			name:   "canceled",
			file:   "flux_canceled.json",
			events: `[{"type":"execution.progress","data":{"stage":"queued"}},` + running + `,{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":3.75,"source":"provider"}]}}]`,
			usage:  `[{"unit":"replicate.predict_time_seconds","quantity":3.75,"source":"provider"}]`,
			err:    `{"code":"provider_unavailable","message":"the provider cancelled the prediction","retryable":false,"provider_error":{"provider":"replicate","type":"canceled","request_id":"m420tb253nrm60cj09c8hwfgxw"}}`,
		},
		{
			name:   "aborted",
			file:   "flux_aborted.json",
			events: `[{"type":"execution.progress","data":{"stage":"queued"}},` + running + `]`,
			usage:  `[]`,
			err:    `{"code":"provider_unavailable","message":"the provider aborted the prediction before it started","retryable":true,"provider_error":{"provider":"replicate","type":"aborted","request_id":"m420tb253nrm60cj09c8hwfgxw"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"), okJSON(tt.file))
			d := deployment(f.srv.URL)
			o := attempt(context.Background(), t, d, request(t, foxRequest), time.Second, fast(f)...)
			assertError(t, o.err, tt.err)
			assertJSON(t, "events", o.events, tt.events)
			assertJSON(t, "snapshot", protocol.Materialize("exe_test", envelopes(d, o)), `{
				"id":"exe_test","status":"failed","sequence":`+strconv.Itoa(len(o.events)+3)+`,"output":[],"tool_calls":[],
				"artifacts":[],"usage":`+tt.usage+`,"error":`+tt.err+`}`)
			for _, c := range f.calls() {
				if strings.HasSuffix(c, "/cancel") {
					t.Errorf("cancelled a terminal prediction: %s", c)
				}
			}
			assertNoCanary(t, o)
		})
	}
}

// TestCreateErrors maps the create call's HTTP failures; nothing is polled or cancelled.
func TestCreateErrors(t *testing.T) {
	tests := []struct {
		status int
		file   string
		header map[string]string
		want   string
	}{
		{401, "error_401.json", nil, `{"code":"provider_rejected","message":"the provider rejected the deployment's credentials, permissions or model","retryable":false,"provider_error":{"provider":"replicate","http_status":401}}`},
		{402, "error_402.json", nil, `{"code":"quota_exhausted","message":"the provider account's quota is exhausted","retryable":false,"provider_error":{"provider":"replicate","http_status":402}}`},
		{404, "error_404.json", nil, `{"code":"provider_rejected","message":"the provider rejected the deployment's credentials, permissions or model","retryable":false,"provider_error":{"provider":"replicate","http_status":404}}`},
		{422, "error_422.json", nil, `{"code":"invalid_request","message":"the provider rejected the request as invalid","retryable":false,"provider_error":{"provider":"replicate","http_status":422}}`},
		{429, "error_429.json", map[string]string{"Retry-After": "1"}, `{"code":"rate_limited","message":"the provider is rate limiting requests","retryable":true,"retry_after_ms":1000,"provider_error":{"provider":"replicate","http_status":429}}`},
		{500, "error_500.json", nil, `{"code":"provider_unavailable","message":"the provider is unavailable","retryable":true,"provider_error":{"provider":"replicate","http_status":500}}`},
		{201, "", nil, `{"code":"provider_unavailable","message":"the provider's response could not be read","retryable":true,"provider_error":{"provider":"replicate"}}`},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			f := newFake(t, reply{status: tt.status, file: tt.file, header: tt.header})
			d := deployment(f.srv.URL)
			o := attempt(context.Background(), t, d, request(t, foxRequest), time.Second, fast(f)...)
			assertError(t, o.err, tt.want)
			if len(o.events) != 0 {
				t.Errorf("events = %v, want none", o.events)
			}
			if diff := cmp.Diff([]string{"POST /v1/models/black-forest-labs/flux-schnell/predictions"}, f.calls()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			assertAuth(t, f.seen())
			assertNoCanary(t, o)
		})
	}
}

// TestPollRetries: transient poll failures (5xx, 429) are retried, honouring
// Retry-After; a permanent one, or too many in a row, fails the attempt and cancels the
// prediction.
func TestPollRetries(t *testing.T) {
	t.Run("transient then success", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"),
			reply{status: 500, file: "error_500.json"},
			reply{status: 429, file: "error_429.json", header: map[string]string{"Retry-After": "1"}},
			okJSON("flux_succeeded.json"))
		o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
		if o.err != nil {
			t.Fatalf("Execute: %v", o.err)
		}
		reqs := f.seen()
		if len(reqs) != 4 {
			t.Fatalf("requests = %v", f.calls())
		}
		if gap := reqs[3].At.Sub(reqs[2].At); gap < 950*time.Millisecond {
			t.Errorf("poll after 429 with Retry-After: 1 came %v later, want ≥ 1s", gap)
		}
		assertAuth(t, reqs)
	})
	t.Run("unreadable then success", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), reply{status: 200}, okJSON("flux_succeeded.json"))
		o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
		if o.err != nil {
			t.Fatalf("Execute: %v", o.err)
		}
		if n := len(f.calls()); n != 3 {
			t.Errorf("requests = %v", f.calls())
		}
	})
	t.Run("permanent", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), reply{status: 401, file: "error_401.json"})
		o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
		assertError(t, o.err, `{"code":"provider_rejected","message":"the provider rejected the deployment's credentials, permissions or model","retryable":false,"provider_error":{"provider":"replicate","http_status":401}}`)
		want := []string{
			"POST /v1/models/black-forest-labs/flux-schnell/predictions",
			"GET /v1/predictions/m420tb253nrm60cj09c8hwfgxw",
			"POST /v1/predictions/m420tb253nrm60cj09c8hwfgxw/cancel",
		}
		if diff := cmp.Diff(want, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	})
	t.Run("too many transient", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), reply{status: 503, file: "error_500.json"})
		o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
		assertError(t, o.err, `{"code":"provider_unavailable","message":"the provider is unavailable","retryable":true,"provider_error":{"provider":"replicate","http_status":503}}`)
		calls := f.calls()
		if gets := strings.Count(strings.Join(calls, "\n"), "GET "); gets != maxPollFailures+1 {
			t.Errorf("polled %d times, want %d", gets, maxPollFailures+1)
		}
		if last := calls[len(calls)-1]; last != "POST /v1/predictions/m420tb253nrm60cj09c8hwfgxw/cancel" {
			t.Errorf("last request = %s, want the cancel", last)
		}
	})
}

// TestCancellation: when the attempt's context ends mid-poll (cancel or deadline), the
// prediction is cancelled remotely, with the credential, before Execute returns.
func TestCancellation(t *testing.T) {
	tests := []struct {
		name string
		ctx  func(t *testing.T, f *fakeReplicate) context.Context
	}{
		{"cancel", func(t *testing.T, f *fakeReplicate) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() {
				// After the second poll the first one's processing state was handled.
				<-f.polled
				<-f.polled
				cancel()
			}()
			return ctx
		}},
		{"deadline", func(t *testing.T, f *fakeReplicate) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
			d := deployment(f.srv.URL)
			const grace = 2 * time.Second
			start := time.Now()
			o := attempt(tt.ctx(t, f), t, d, request(t, foxRequest), grace, fast(f)...)
			if took := time.Since(start); took > grace+time.Second {
				t.Errorf("Execute took %v", took)
			}
			select {
			case <-f.cancelled:
			default:
				t.Fatalf("no cancel before Execute returned; requests: %v", f.calls())
			}
			if o.err == nil {
				t.Fatal("Execute succeeded after its context ended")
			}
			reqs := f.seen()
			last := reqs[len(reqs)-1]
			if last.Method+" "+last.Path != "POST /v1/predictions/m420tb253nrm60cj09c8hwfgxw/cancel" {
				t.Errorf("last request = %s %s, want the cancel", last.Method, last.Path)
			}
			assertAuth(t, reqs)
			assertJSON(t, "events", o.events, `[
				{"type":"execution.progress","data":{"stage":"queued"}},
				{"type":"execution.progress","data":{"stage":"running","message":"running quantized prediction"}}]`)
			assertNoCanary(t, o)
		})
	}
}

// TestCancelBoundedByGrace: a cancel call that hangs is abandoned after the grace.
func TestCancelBoundedByGrace(t *testing.T) {
	f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
	f.holdCancel = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.polled
		cancel()
	}()
	const grace = 200 * time.Millisecond
	done := make(chan outcome, 1)
	go func() { done <- attempt(ctx, t, deployment(f.srv.URL), request(t, foxRequest), grace, fast(f)...) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Execute did not return after the cleanup grace")
	}
	select {
	case <-f.cancelled:
	default:
		t.Error("cancel was not attempted")
	}
}

// TestCreateUnanswered: a create that never answers is abandoned once the cleanup grace
// after the attempt's end has passed; with no prediction id nothing can be cancelled.
func TestCreateUnanswered(t *testing.T) {
	f := newFake(t, createdJSON("flux_starting.json"))
	f.holdCreate = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for len(f.seen()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	const grace = 300 * time.Millisecond
	start := time.Now()
	o := attempt(ctx, t, deployment(f.srv.URL), request(t, foxRequest), grace, fast(f)...)
	if took := time.Since(start); took < grace || took > grace+2*time.Second {
		t.Errorf("Execute took %v, want about the %v grace", took, grace)
	}
	if o.err == nil {
		t.Fatal("Execute succeeded")
	}
	if diff := cmp.Diff([]string{"POST /v1/models/black-forest-labs/flux-schnell/predictions"}, f.calls()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if len(o.events) != 0 {
		t.Errorf("events = %v", o.events)
	}
	if !strings.Contains(o.logs, "Replicate create did not answer within the cleanup grace") {
		t.Errorf("the abandoned create was not logged:\n%s", o.logs)
	}
}

// TestCreateAnsweredAfterTimeout: the attempt times out while the create is in flight
// and the create answers later, within the cleanup grace. The prediction it names is
// cancelled through its urls.cancel, so no second billed prediction keeps running; it is
// never polled, and nothing is recorded for it.
func TestCreateAnsweredAfterTimeout(t *testing.T) {
	const timeout, late = 150 * time.Millisecond, 400 * time.Millisecond
	t.Run("attempt", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
		f.createDelay = late
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		o := attempt(ctx, t, deployment(f.srv.URL), request(t, foxRequest), 2*time.Second, fast(f)...)
		if o.err == nil {
			t.Fatal("Execute succeeded after its context ended")
		}
		want := []string{
			"POST /v1/models/black-forest-labs/flux-schnell/predictions",
			"POST /v1/predictions/m420tb253nrm60cj09c8hwfgxw/cancel",
		}
		if diff := cmp.Diff(want, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if running := f.running(); len(running) != 0 {
			t.Errorf("predictions left running: %v", running)
		}
		if len(o.events) != 0 {
			t.Errorf("events = %v", o.events)
		}
		assertAuth(t, f.seen())
		assertNoCanary(t, o)
	})
	t.Run("through the engine", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
		f.createDelay = late
		d := deployment(f.srv.URL)
		d.AttemptTimeout = timeout
		h := enginetest.NewHarness(t, engine.Config{
			Providers:    map[string]engine.Provider{Provider: {New: func(d *routing.Deployment) (engine.Adapter, error) { return New(d, fast(f)...) }}},
			CleanupGrace: 2 * time.Second,
		}, *d)
		id := h.Submit(request(t, `{"ability":"image","input":[{"type":"text","text":"a fox"}],"routing":{"max_attempts":1}}`)).ID
		snap := protocol.Materialize(id, h.WaitTerminal(id))
		if snap.Status != protocol.StatusFailed || snap.Error == nil || snap.Error.Code != protocol.CodeProviderTimeout {
			t.Errorf("snapshot = %+v, want failed with provider_timeout", snap)
		}
		// The terminal event waited for the cleanup: the cancel has already arrived.
		select {
		case <-f.cancelled:
		default:
			t.Fatalf("no cancel before the terminal event; requests: %v", f.calls())
		}
		if running := f.running(); len(running) != 0 {
			t.Errorf("predictions left running: %v", running)
		}
		if n := strings.Count(strings.Join(f.calls(), "\n"), "GET "); n != 0 {
			t.Errorf("the late prediction was polled %d times", n)
		}
	})
}

// TestForeignURL: a urls.get on another origin is refused without sending it anything;
// the prediction is still cancelled when its cancel URL is on the endpoint's origin.
func TestForeignURL(t *testing.T) {
	tests := []struct {
		file      string
		wantCalls []string
	}{
		{"flux_starting_foreign.json", []string{
			"POST /v1/models/black-forest-labs/flux-schnell/predictions",
			"POST /v1/predictions/m420tb253nrm60cj09c8hwfgxw/cancel",
		}},
		{"flux_starting_all_foreign.json", []string{
			"POST /v1/models/black-forest-labs/flux-schnell/predictions",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var hits atomic.Int32
			evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if strings.Contains(r.Header.Get("Authorization"), canary) {
					t.Errorf("credential sent to a foreign origin: %s %s", r.Method, r.URL)
				}
			}))
			defer evil.Close()
			f := newFake(t, createdJSON(tt.file))
			f.foreign = evil.URL
			o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
			assertError(t, o.err, `{"code":"provider_rejected","message":"the provider returned a URL outside the deployment's endpoint","retryable":false,"provider_error":{"provider":"replicate"}}`)
			if n := hits.Load(); n != 0 {
				t.Errorf("foreign origin got %d requests", n)
			}
			if diff := cmp.Diff(tt.wantCalls, f.calls()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			assertAuth(t, f.seen())
			assertNoCanary(t, o)
			if !strings.Contains(o.logs, "Refused a Replicate URL outside the endpoint's origin") {
				t.Errorf("the refusal was not logged:\n%s", o.logs)
			}
		})
	}
}

// TestRedirectNotFollowed: a redirect could carry the credential elsewhere, so none is
// followed.
func TestRedirectNotFollowed(t *testing.T) {
	var hits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer evil.Close()
	f := newFake(t, reply{status: http.StatusTemporaryRedirect, header: map[string]string{"Location": evil.URL + "/v1/predictions"}})
	o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
	assertError(t, o.err, `{"code":"provider_rejected","message":"the provider rejected the deployment's credentials, permissions or model","retryable":false,"provider_error":{"provider":"replicate","http_status":307}}`)
	if n := hits.Load(); n != 0 {
		t.Errorf("redirect followed: %d requests to its target", n)
	}
}

// TestCredentialNeverLeaks runs upstreams that echo the credential back — in an error
// body and header, in logs, in the failure's id and error, in the output — and checks it
// reaches no event, error or log line, and travels only in the Authorization header.
func TestCredentialNeverLeaks(t *testing.T) {
	tests := []struct {
		name   string
		create reply
		polls  []reply
		events string
	}{
		{
			name:   "error body",
			create: reply{status: 401, file: "error_401_echo.json", header: map[string]string{"X-Echo": canary, "X-Request-Id": canary}},
			events: `[]`,
		},
		{
			name:   "logs, id and error of a failure",
			create: createdJSON("flux_starting.json"),
			polls:  []reply{okJSON("flux_processing_echo.json"), okJSON("flux_failed_echo.json")},
			events: `[
				{"type":"execution.progress","data":{"stage":"queued"}},
				{"type":"execution.progress","data":{"stage":"running","message":"Authorization: Bearer [redacted]"}},
				{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":0.5,"source":"provider"}]}}]`,
		},
		{
			name:   "output",
			create: createdJSON("flux_starting.json"),
			polls:  []reply{okJSON("flux_succeeded_echo.json")},
			events: `[
				{"type":"execution.progress","data":{"stage":"queued"}},
				{"type":"output.result","data":{
					"result":{"[redacted]":"https://replicate.delivery/yhqm/[redacted]/out-0.png","echo":"token [redacted]","escaped":"[redacted]"},
					"artifacts":[{"uri":"https://replicate.delivery/yhqm/[redacted]/out-0.png","media_type":"image/png","expires_at":"2024-08-31T13:00:02.75Z"}]}},
				{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":1.5,"source":"provider"}]}}]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, tt.create, tt.polls...)
			o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
			assertJSON(t, "events", o.events, tt.events)
			assertNoCanary(t, o)
			assertAuth(t, f.seen())
			if o.err != nil {
				if pe := protocol.AsError(o.err); pe.ProviderError != nil && pe.ProviderError.RequestID != "" {
					t.Errorf("request_id = %q from an upstream echoing the credential", pe.ProviderError.RequestID)
				}
			}
		})
	}
}

// TestInputRefused: parts or parameters the deployment cannot take are refused before
// any request is sent, as NotSent refusals that CanEncode makes too.
func TestInputRefused(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{
			name: "image not declared",
			body: `{"ability":"image","input":[{"type":"text","text":"like this"},{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"}]}`,
			want: `{"code":"unsupported_capability","message":"the deployment does not declare an input modality the request uses","retryable":false}`,
		},
		{
			name: "tool part",
			body: `{"ability":"image","input":[{"type":"text","text":"hi"},{"type":"tool","name":"get_weather","parameters":{"type":"object"}}]}`,
			want: `{"code":"unsupported_capability","message":"replicate deployments cannot take tool, tool_call or tool_result parts","retryable":false}`,
		},
		{
			name: "parameter not allowed",
			body: `{"ability":"image","input":[{"type":"text","text":"hi"}],"extensions":{"replicate.input":{"num_inference_steps":50}}}`,
			want: `{"code":"invalid_request","message":"a model parameter the request sets is not allowed by the deployment","retryable":false}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, createdJSON("flux_starting.json"))
			d := deployment(f.srv.URL)
			req := request(t, tt.body)
			o := attempt(context.Background(), t, d, req, time.Second, fast(f)...)
			assertError(t, o.err, tt.want)
			if !errors.Is(o.err, engine.ErrNotSent) {
				t.Errorf("error = %v, want a NotSent refusal", o.err)
			}
			assertJSON(t, "CanEncode", CanEncode(req, d), tt.want)
			if calls := f.calls(); len(calls) != 0 {
				t.Errorf("requests sent: %v", calls)
			}
		})
	}
}

// TestNew refuses deployments the adapter cannot use.
func TestNew(t *testing.T) {
	tests := []struct {
		name string
		d    *routing.Deployment
		want string
	}{
		{"no credential", deployment("", func(d *routing.Deployment) { d.Credential = routing.Credential{} }),
			`{"code":"provider_rejected","message":"the replicate deployment has no credential","retryable":false,"provider_error":{"provider":"replicate"}}`},
		{"model without owner", deployment("", withModel("flux-schnell")),
			`{"code":"provider_rejected","message":"the replicate deployment's model must be owner/name or owner/name:version","retryable":false,"provider_error":{"provider":"replicate"}}`},
		{"model with path", deployment("", withModel("a/b/c")),
			`{"code":"provider_rejected","message":"the replicate deployment's model must be owner/name or owner/name:version","retryable":false,"provider_error":{"provider":"replicate"}}`},
		{"empty version", deployment("", withModel("a/b:")),
			`{"code":"provider_rejected","message":"the replicate deployment's model must be owner/name or owner/name:version","retryable":false,"provider_error":{"provider":"replicate"}}`},
		{"endpoint with query", deployment("https://api.replicate.com/?x=1"),
			`{"code":"provider_rejected","message":"the replicate deployment's endpoint must be an absolute http(s) URL without query or credentials","retryable":false,"provider_error":{"provider":"replicate"}}`},
		{"endpoint with user info", deployment("https://u:p@api.replicate.com"),
			`{"code":"provider_rejected","message":"the replicate deployment's endpoint must be an absolute http(s) URL without query or credentials","retryable":false,"provider_error":{"provider":"replicate"}}`},
		{"endpoint not http", deployment("ftp://api.replicate.com"),
			`{"code":"provider_rejected","message":"the replicate deployment's endpoint must be an absolute http(s) URL without query or credentials","retryable":false,"provider_error":{"provider":"replicate"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.d)
			assertError(t, err, tt.want)
		})
	}
	if _, err := Factory(deployment("")); err != nil {
		t.Errorf("Factory with the default endpoint: %v", err)
	}
}

// TestSameOrigin: the credential goes only to the endpoint's scheme, host and port.
func TestSameOrigin(t *testing.T) {
	ad, err := New(deployment("https://API.replicate.com/proxy/"))
	if err != nil {
		t.Fatal(err)
	}
	a := ad.(*adapter)
	tests := []struct {
		url  string
		want bool
	}{
		{"https://api.replicate.com/v1/predictions/x", true},
		{"https://api.replicate.com:443/v1/predictions/x", true},
		{"HTTPS://Api.Replicate.com/v1/predictions/x", true},
		{"http://api.replicate.com/v1/predictions/x", false},
		{"https://api.replicate.com:8443/v1/predictions/x", false},
		{"https://api.replicate.com.evil.example/v1/predictions/x", false},
		{"https://evil.example/v1/predictions/x", false},
		{"https://user@api.replicate.com/v1/predictions/x", false},
		{"//api.replicate.com/v1/predictions/x", false},
		{"/v1/predictions/x", false},
		{"", false},
		{"https://api.replicate.com\\@evil.example/", false},
	}
	for _, tt := range tests {
		if _, got := a.sameOrigin(tt.url); got != tt.want {
			t.Errorf("sameOrigin(%q) = %v, want %v", tt.url, got, tt.want)
		}
	}
	if a.base != "https://API.replicate.com/proxy" {
		t.Errorf("base = %q", a.base)
	}
}

// jsonText marks a request body as JSON text for assertJSON.
type jsonText string

func (j jsonText) MarshalJSON() ([]byte, error) { return []byte(j), nil }
