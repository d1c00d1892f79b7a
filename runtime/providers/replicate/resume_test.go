package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
)

// predID is the id of the flux_* predictions in testdata.
const predID = "m420tb253nrm60cj09c8hwfgxw"

// Requests of the flux_* prediction.
const (
	createFlux = "POST /v1/models/black-forest-labs/flux-schnell/predictions"
	pollFlux   = "GET /v1/predictions/" + predID
	cancelFlux = "POST /v1/predictions/" + predID + "/cancel"
)

// handleOn is the handle Execute records for the flux prediction when the endpoint is
// server (byte for byte).
func handleOn(server string) string {
	return `{"id":"` + predID + `","urls":{"get":"` + server + `/v1/predictions/` + predID +
		`","cancel":"` + server + `/v1/predictions/` + predID + `/cancel"}}`
}

// texts returns the handles as strings, for comparison.
func texts(o outcome) []string {
	var out []string
	for _, h := range o.handles {
		out = append(out, string(h))
	}
	return out
}

// noCreate is the create reply of tests that resume: a create would be a second
// prediction, and the requests checked show none was sent.
var noCreate = reply{status: http.StatusInternalServerError}

// cancels counts the cancel requests f received.
func cancels(f *fakeReplicate) int {
	return strings.Count(strings.Join(f.calls(), "\n"), "/cancel")
}

// TestRemoteJobRecorded: the prediction's handle — id, urls.get, urls.cancel, never the
// credential — is recorded as soon as the create answers, before anything is polled or
// emitted, and only once.
func TestRemoteJobRecorded(t *testing.T) {
	t.Run("after create", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"), okJSON("flux_succeeded.json"))
		o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
		if o.err != nil {
			t.Fatalf("Execute: %v", o.err)
		}
		if diff := cmp.Diff([]string{handleOn(f.srv.URL)}, texts(o)); diff != "" {
			t.Errorf("handles (-want +got):\n%s", diff)
		}
		want := []string{"remote job", "execution.progress", "execution.progress", "output.result", "usage.reported"}
		if diff := cmp.Diff(want, o.order); diff != "" {
			t.Errorf("recorded (-want +got):\n%s", diff)
		}
		assertNoCanary(t, o)
	})
	t.Run("credential in a URL", func(t *testing.T) {
		// A same-origin urls.get is followed whatever it holds, but a handle holding the
		// credential would carry it into the event store: none is recorded.
		f := newFake(t, createdJSON("flux_starting_echo_url.json"), okJSON("flux_succeeded.json"))
		o := attempt(context.Background(), t, deployment(f.srv.URL), request(t, foxRequest), time.Second, fast(f)...)
		if o.err != nil {
			t.Fatalf("Execute: %v", o.err)
		}
		if len(o.handles) != 0 {
			t.Errorf("handles = %s, want none", texts(o))
		}
		if !strings.Contains(o.logs, "Cannot record Replicate prediction for adoption: its id or URLs are unusable") {
			t.Errorf("the unrecorded handle was not logged:\n%s", o.logs)
		}
		assertNoCanary(t, o)
	})
	t.Run("refused", func(t *testing.T) {
		// A refused handle costs only the adoption: the attempt goes on.
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_succeeded.json"))
		d := deployment(f.srv.URL)
		o := perform(context.Background(), t, d, time.Second, func(ctx context.Context, ad engine.Adapter, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
			at.Request = request(t, foxRequest)
			return ad.Execute(ctx, at, refuseHandles{emit})
		}, false, fast(f)...)
		if o.err != nil {
			t.Fatalf("Execute: %v", o.err)
		}
		if !strings.Contains(o.logs, "Cannot record Replicate prediction for adoption") {
			t.Errorf("the refused handle was not logged:\n%s", o.logs)
		}
		if diff := cmp.Diff([]string{"execution.progress", "output.result", "usage.reported"}, o.order); diff != "" {
			t.Errorf("recorded (-want +got):\n%s", diff)
		}
	})
}

// refuseHandles is an Emitter whose store fails every handle.
type refuseHandles struct{ engine.Emitter }

func (refuseHandles) RemoteJob(json.RawMessage) error { return errors.New("store unavailable") }

// TestResume follows a prediction from its handle as Execute would have: the first
// poll goes out at once, nothing is emitted before its answer, and the rest — progress,
// result, usage, status mapping — is Execute's. No prediction is created.
func TestResume(t *testing.T) {
	t.Run("mid-way to success", func(t *testing.T) {
		f := newFake(t, noCreate, okJSON("flux_processing_1.json"), okJSON("flux_processing_2.json"), okJSON("flux_succeeded.json"))
		d := deployment(f.srv.URL)
		start := time.Now()
		o := perform(context.Background(), t, d, time.Second, resume(handleOn(f.srv.URL)), false, fast(f)...)
		if o.err != nil {
			t.Fatalf("Resume: %v", o.err)
		}
		if o.out.FinishReason != "succeeded" {
			t.Errorf("finish reason = %q", o.out.FinishReason)
		}
		if diff := cmp.Diff([]string{pollFlux, pollFlux, pollFlux}, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if first := f.seen()[0].At.Sub(start); first > 200*time.Millisecond {
			t.Errorf("first poll after %v, want at once", first)
		}
		assertAuth(t, f.seen())
		const result = `[
			"https://replicate.delivery/yhqm/zhBT5Cu9HFZVCZC9ecfY80gCXM9uCtA1f5vJe7MHSoJRIx3NB/out-0.webp",
			"https://replicate.delivery/yhqm/SRMJkAmSnDIsJNw2zDe5tBhxyrhha2zApLZn0y2s0KZCJedTA/out-1.webp"]`
		assertJSON(t, "events", o.events, `[
			{"type":"execution.progress","data":{"stage":"running","message":"running quantized prediction"}},
			{"type":"execution.progress","data":{"stage":"running","message":"50%|█████     | 2/4 [00:00<00:00,  7.21it/s]"}},
			{"type":"output.result","data":{"result":`+result+`,"artifacts":[
				{"uri":"https://replicate.delivery/yhqm/zhBT5Cu9HFZVCZC9ecfY80gCXM9uCtA1f5vJe7MHSoJRIx3NB/out-0.webp","media_type":"image/webp","expires_at":"2024-08-31T13:00:02.75Z"},
				{"uri":"https://replicate.delivery/yhqm/SRMJkAmSnDIsJNw2zDe5tBhxyrhha2zApLZn0y2s0KZCJedTA/out-1.webp","media_type":"image/webp","expires_at":"2024-08-31T13:00:02.75Z"}]}},
			{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":1.497716,"source":"provider"}]}}]`)
		if len(o.handles) != 0 {
			t.Errorf("Resume recorded handles %s; the resumed one is recorded already", texts(o))
		}
		assertNoCanary(t, o)
	})
	t.Run("already failed", func(t *testing.T) {
		f := newFake(t, noCreate, okJSON("flux_failed.json"))
		// The first poll does not wait for the poll backoff.
		slowPolls := []Option{WithHTTPClient(f.srv.Client()), WithPollBackoff(3*time.Second, 3*time.Second)}
		start := time.Now()
		o := perform(context.Background(), t, deployment(f.srv.URL), time.Second, resume(handleOn(f.srv.URL)), false, slowPolls...)
		if took := time.Since(start); took > time.Second {
			t.Errorf("Resume took %v: the first poll waited", took)
		}
		assertError(t, o.err, `{"code":"provider_rejected","message":"the provider's model failed on this input","retryable":false,"provider_error":{"provider":"replicate","type":"failed","request_id":"`+predID+`"}}`)
		assertJSON(t, "events", o.events, `[
			{"type":"usage.reported","data":{"usage":[{"unit":"replicate.predict_time_seconds","quantity":2.25,"source":"provider"}]}}]`)
		if diff := cmp.Diff([]string{pollFlux}, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	})
	t.Run("first poll fails for good", func(t *testing.T) {
		f := newFake(t, noCreate, reply{status: http.StatusUnauthorized, file: "error_401.json"})
		o := perform(context.Background(), t, deployment(f.srv.URL), time.Second, resume(handleOn(f.srv.URL)), false, fast(f)...)
		assertError(t, o.err, `{"code":"provider_rejected","message":"the provider rejected the deployment's credentials, permissions or model","retryable":false,"provider_error":{"provider":"replicate","http_status":401}}`)
		if diff := cmp.Diff([]string{pollFlux, cancelFlux}, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if len(o.events) != 0 {
			t.Errorf("events = %v, want none", o.events)
		}
	})
	t.Run("factory adapters resume", func(t *testing.T) {
		ad, err := Factory(deployment(""))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ad.(engine.Resumer); !ok {
			t.Error("Factory's adapter is not an engine.Resumer")
		}
		m := map[string]engine.Provider{}
		Register(m)
		if ad, err = m[Provider].New(deployment("")); err != nil {
			t.Fatal(err)
		} else if _, ok := ad.(engine.Resumer); !ok {
			t.Error("Register's adapter is not an engine.Resumer")
		}
	})
}

// TestResumeEnded: a takeover after a cancel or past the deadline cancels the
// prediction within the grace, without polling it or emitting anything.
func TestResumeEnded(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"past the deadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, noCreate, okJSON("flux_processing_1.json"))
			ctx, cancel := tt.ctx()
			defer cancel()
			o := perform(ctx, t, deployment(f.srv.URL), time.Second, resume(handleOn(f.srv.URL)), false, fast(f)...)
			if o.err == nil {
				t.Fatal("Resume succeeded after its context ended")
			}
			if diff := cmp.Diff([]string{cancelFlux}, f.calls()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			assertAuth(t, f.seen())
			if len(o.events) != 0 {
				t.Errorf("events = %v, want none", o.events)
			}
		})
	}
	t.Run("cancel bounded by the grace", func(t *testing.T) {
		f := newFake(t, noCreate)
		f.holdCancel = true
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		const grace = 200 * time.Millisecond
		start := time.Now()
		perform(ctx, t, deployment(f.srv.URL), grace, resume(handleOn(f.srv.URL)), false, fast(f)...)
		if took := time.Since(start); took > grace+time.Second {
			t.Errorf("Resume took %v with a %v grace", took, grace)
		}
		if n := cancels(f); n != 1 {
			t.Errorf("cancel requests = %d, want 1", n)
		}
	})
}

// TestDetached: when this replica lets the execution go (engine.Detached), a prediction
// whose handle is recorded is left running for the replica that adopts it — never
// cancelled — and the attempt returns at once. One whose handle could not be recorded
// could be adopted by nobody, so it is cancelled as usual.
func TestDetached(t *testing.T) {
	// detachAfterPolls returns an attempt context that is detached once f answered n
	// polls.
	detachAfterPolls := func(t *testing.T, f *fakeReplicate, n int) context.Context {
		ctx, detach := engine.WithDetach(context.Background())
		t.Cleanup(detach)
		go func() {
			for range n {
				<-f.polled
			}
			detach()
		}()
		return ctx
	}
	const grace = 2 * time.Second
	left := func(t *testing.T, f *fakeReplicate, o outcome, start time.Time) {
		t.Helper()
		if o.err == nil {
			t.Fatal("the attempt succeeded after its context ended")
		}
		if n := cancels(f); n != 0 {
			t.Errorf("the prediction was cancelled; requests: %v", f.calls())
		}
		if took := time.Since(start); took > grace/2 {
			t.Errorf("the attempt took %v to let the prediction go", took)
		}
		if !strings.Contains(o.logs, "Left Replicate prediction running for the replica taking the execution over") {
			t.Errorf("leaving the prediction was not logged:\n%s", o.logs)
		}
	}

	t.Run("execute", func(t *testing.T) {
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
		ctx := detachAfterPolls(t, f, 2)
		start := time.Now()
		o := attempt(ctx, t, deployment(f.srv.URL), request(t, foxRequest), grace, fast(f)...)
		left(t, f, o, start)
		if diff := cmp.Diff([]string{predID}, f.running()); diff != "" {
			t.Errorf("running predictions (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{handleOn(f.srv.URL)}, texts(o)); diff != "" {
			t.Errorf("handles (-want +got):\n%s", diff)
		}
	})
	t.Run("resume", func(t *testing.T) {
		f := newFake(t, noCreate, okJSON("flux_processing_1.json"))
		ctx := detachAfterPolls(t, f, 2)
		start := time.Now()
		o := perform(ctx, t, deployment(f.srv.URL), grace, resume(handleOn(f.srv.URL)), false, fast(f)...)
		left(t, f, o, start)
	})
	t.Run("resume after the hand-over", func(t *testing.T) {
		f := newFake(t, noCreate, okJSON("flux_processing_1.json"))
		ctx, detach := engine.WithDetach(context.Background())
		detach()
		start := time.Now()
		o := perform(ctx, t, deployment(f.srv.URL), grace, resume(handleOn(f.srv.URL)), false, fast(f)...)
		left(t, f, o, start)
		if calls := f.calls(); len(calls) != 0 {
			t.Errorf("requests sent: %v", calls)
		}
	})

	// The create answers after the hand-over: the prediction is left only if its handle
	// can still be recorded. The engine refuses handles once the attempt has ended.
	createdLate := func(t *testing.T, late bool) (*fakeReplicate, outcome) {
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
		f.createDelay = 300 * time.Millisecond
		ctx, detach := engine.WithDetach(context.Background())
		defer detach()
		go func() {
			for len(f.seen()) == 0 {
				time.Sleep(time.Millisecond)
			}
			detach()
		}()
		o := perform(ctx, t, deployment(f.srv.URL), grace, execute(request(t, foxRequest)), late, fast(f)...)
		if o.err == nil {
			t.Fatal("Execute succeeded after its context ended")
		}
		return f, o
	}
	t.Run("created after the hand-over, handle refused", func(t *testing.T) {
		f, o := createdLate(t, false)
		if diff := cmp.Diff([]string{createFlux, cancelFlux}, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if len(f.running()) != 0 {
			t.Errorf("predictions left running with no handle: %v", f.running())
		}
		if !strings.Contains(o.logs, "Cancelling Replicate prediction although the execution is handed over: its handle is not recorded") {
			t.Errorf("the cancel was not explained:\n%s", o.logs)
		}
	})
	t.Run("created after the hand-over, handle recorded", func(t *testing.T) {
		f, o := createdLate(t, true)
		if diff := cmp.Diff([]string{createFlux}, f.calls()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{handleOn(f.srv.URL)}, texts(o)); diff != "" {
			t.Errorf("handles (-want +got):\n%s", diff)
		}
		if len(o.events) != 0 {
			t.Errorf("events = %v", o.events)
		}
	})
	t.Run("ended otherwise", func(t *testing.T) {
		// A context ended by a cancel is not a hand-over: the prediction is cancelled.
		f := newFake(t, createdJSON("flux_starting.json"), okJSON("flux_processing_1.json"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-f.polled
			cancel()
		}()
		attempt(ctx, t, deployment(f.srv.URL), request(t, foxRequest), grace, fast(f)...)
		if n := cancels(f); n != 1 {
			t.Errorf("cancel requests = %d, want 1; requests: %v", n, f.calls())
		}
	})
}

// TestResumeForeignHandle: a handle whose URLs leave the deployment's origin (the
// endpoint changed since, or the record is not the adapter's) is refused without any
// request, to either origin, whether the attempt is live or already ended.
func TestResumeForeignHandle(t *testing.T) {
	for _, ended := range []bool{false, true} {
		name := "live"
		if ended {
			name = "ended"
		}
		t.Run(name, func(t *testing.T) {
			var hits atomic.Int32
			evil := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
			defer evil.Close()
			f := newFake(t, noCreate, okJSON("flux_processing_1.json"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if ended {
				cancel()
			}
			o := perform(ctx, t, deployment(f.srv.URL), time.Second, resume(handleOn(evil.URL)), false, fast(f)...)
			if !ended {
				assertError(t, o.err, `{"code":"provider_rejected","message":"the provider returned a URL outside the deployment's endpoint","retryable":false,"provider_error":{"provider":"replicate"}}`)
			} else if o.err == nil {
				t.Fatal("Resume succeeded after its context ended")
			}
			if n := hits.Load(); n != 0 {
				t.Errorf("foreign origin got %d requests", n)
			}
			if calls := f.calls(); len(calls) != 0 {
				t.Errorf("requests sent: %v", calls)
			}
			if len(o.events) != 0 {
				t.Errorf("events = %v", o.events)
			}
		})
	}
}

// TestResumeMalformedHandle: a handle the adapter did not record is refused with a fixed
// internal error, before any request.
func TestResumeMalformedHandle(t *testing.T) {
	f := newFake(t, noCreate, okJSON("flux_processing_1.json"))
	get := f.srv.URL + "/v1/predictions/" + predID
	handles := []string{
		``,
		`{`,
		`null`,
		`[]`,
		`"` + predID + `"`,
		`{}`,
		`{"id":"` + predID + `"}`,
		`{"id":"` + predID + `","urls":{"get":""}}`,
		`{"id":"","urls":{"get":"` + get + `"}}`,
		`{"id":"../../v1/account","urls":{"get":"` + get + `"}}`,
		`{"id":"` + canary + `","urls":{"get":"` + get + `"}}`,
		`{"id":"` + predID + `","urls":{"get":42}}`,
	}
	for _, h := range handles {
		o := perform(context.Background(), t, deployment(f.srv.URL), time.Second, resume(h), false, fast(f)...)
		assertError(t, o.err, `{"code":"internal","message":"the recorded provider job cannot be resumed","retryable":false,"provider_error":{"provider":"replicate"}}`)
		if len(o.events) != 0 {
			t.Errorf("handle %s: events = %v", h, o.events)
		}
		if !strings.Contains(o.logs, "Cannot resume Replicate prediction: its recorded handle is malformed") {
			t.Errorf("handle %s: refusal not logged:\n%s", h, o.logs)
		}
		assertNoCanary(t, o)
	}
	if calls := f.calls(); len(calls) != 0 {
		t.Errorf("requests sent: %v", calls)
	}
}

// FuzzParseHandle: any handle either is refused or names an identifier and a urls.get,
// and what handle encodes parses back to the same prediction.
func FuzzParseHandle(f *testing.F) {
	f.Add([]byte(handleOn("https://api.replicate.com")))
	f.Add([]byte(`{"id":"x","urls":{"get":"https://api.replicate.com/v1/predictions/x"}}`))
	f.Add([]byte(`{"id":"","urls":{}}`))
	f.Add([]byte(`null`))
	ad, err := New(deployment("https://api.replicate.com"))
	if err != nil {
		f.Fatal(err)
	}
	a := ad.(*adapter)
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, ok := a.parseHandle(raw)
		if !ok {
			return
		}
		if a.safeID(p.ID) != p.ID || p.ID == "" || p.URLs.Get == "" || p.Status != "" {
			t.Fatalf("parseHandle(%q) = %+v", raw, p)
		}
		if h, ok := a.handle(p); ok {
			q, ok := a.parseHandle(h)
			if !ok || q.ID != p.ID || q.URLs != p.URLs {
				t.Fatalf("round trip of %q: %s → %+v", raw, h, q)
			}
		}
	})
}
