package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Timing of the suite's attempts. An attempt that should end on its own gets
// attemptTimeout; Stall's attempt context ends after stallAfter. cleanupGrace is the
// Attempt.CleanupGrace the suite passes: an adapter must return within it once the
// attempt's context has ended (engine.Adapter).
const (
	attemptTimeout = 20 * time.Second
	stallAfter     = 300 * time.Millisecond
	cleanupGrace   = 2 * time.Second
	// graceSlack is how late after the grace an adapter that uses all of it (to learn a
	// remote job's id and cancel it) may return: the engine stops waiting at the grace.
	graceSlack = 500 * time.Millisecond
	// hugeAllocBound is what reading HugeLine may allocate at most: a bounded reader
	// stops at its frame bound (about 1 MiB), far below the 10 MB unit.
	hugeAllocBound = 8 << 20
)

// Requests of the scenarios. Text-like scenarios send plain text; ToolCall offers the
// tool the Wire calls.
var (
	textRequest = `{"ability":"chat","input":[{"type":"text","text":"Say hello"}]}`
	toolRequest = `{"ability":"chat","input":[{"type":"text","text":"Weather in Paris?"},` +
		`{"type":"tool","name":"` + ScriptTool + `","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`
)

// scenarios are run in this order.
var scenarios = []Scenario{Text, ToolCall, Usage, InStreamError, CutBeforeOutput, CutAfterOutput,
	Stall, HugeLine, InvalidUTF8, Echo}

// RunConformance runs the whole suite against w: every scenario not NotApplicable, the
// documented errors, a redirect, success statuses other than 200, a cancellation, and
// the encode checks
// (CheckEncodeAgreement on Cases, CheckJSONPartsAreText). On every request the upstream
// receives it checks Authenticated and that no secret travels outside CredentialHeader;
// after every attempt, that no secret is in the error, the events or the log.
func RunConformance(t *testing.T, w Wire) {
	t.Helper()
	if w.Respond == nil || w.Authenticated == nil || w.Provider == "" || len(w.Secrets) == 0 ||
		w.EchoAnswer == nil || len(w.EchoFields) == 0 {
		t.Fatal("the Wire needs Provider, Respond, Authenticated, Secrets, EchoAnswer and EchoFields")
	}
	for _, s := range scenarios {
		if why, ok := w.NotApplicable[s]; ok {
			t.Logf("%s: not applicable to %s: %s", s, w.Provider, why)
			continue
		}
		t.Run(string(s), func(t *testing.T) { checks[s](t, w) })
	}
	t.Run("echoed identifiers", func(t *testing.T) { checkEchoedIdentifiers(t, w) })
	t.Run("credential never prints", func(t *testing.T) { checkRedacted(t, w) })
	t.Run("endpoint fence", func(t *testing.T) { checkFence(t, w) })
	t.Run("documented errors", func(t *testing.T) { checkErrors(t, w) })
	t.Run("redirect refused", func(t *testing.T) { checkRedirect(t, w) })
	t.Run("any 2xx is success", func(t *testing.T) { checkSuccessStatuses(t, w) })
	t.Run("cancel", func(t *testing.T) { checkCancel(t, w) })
	t.Run("encode agreement", func(t *testing.T) { CheckEncodeAgreement(t, w.Subject, Cases()) })
	t.Run("json parts are text", func(t *testing.T) { CheckJSONPartsAreText(t, w.Subject) })
}

// WriteHuge writes prefix and then HugeLineBytes of 'a' with no line end, flushing as
// it goes, for the HugeLine scenario; it stops early when the client goes away. It
// allocates little, so the suite's allocation bound measures the adapter.
func WriteHuge(w http.ResponseWriter, prefix string) {
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	if _, err := io.WriteString(w, prefix); err != nil {
		return
	}
	for n := 0; n < HugeLineBytes; n += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// attempt is one Execute and everything observed around it.
type attempt struct {
	rec     *enginetest.Recorder
	logs    *enginetest.LogSink
	out     engine.Outcome
	err     error
	perr    *protocol.Error // err as a protocol error, nil if it is not one
	elapsed time.Duration   // from the attempt's context ending (or the start) to return
	reqs    []captured
	allocs  uint64
}

// captured is one request the upstream received.
type captured struct {
	Method, URL string
	Header      http.Header
	Body        []byte
}

// upstream serves handler after recording the request and checking it.
type upstream struct {
	t    *testing.T
	w    Wire
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []captured
	// arrived is closed when the first request has arrived.
	arrived chan struct{}
	once    sync.Once
}

func newUpstream(t *testing.T, w Wire, handler func(http.ResponseWriter, *http.Request)) *upstream {
	u := &upstream{t: t, w: w, arrived: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.mu.Lock()
		u.reqs = append(u.reqs, captured{Method: r.Method, URL: r.URL.String(), Header: r.Header.Clone(), Body: body})
		u.mu.Unlock()
		u.once.Do(func() { close(u.arrived) })
		if err := w.Authenticated(r); err != nil {
			t.Errorf("request %s %s is not authenticated as documented: %v", r.Method, r.URL.Path, err)
		}
		handler(rw, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []captured {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// execute runs one attempt of body against u. ctxFor makes the attempt's context from
// a parent; the returned time is when that context is expected to end (zero: it ends
// only with the attempt).
func (w Wire) execute(t *testing.T, u *upstream, body string, ctxFor func(context.Context) (context.Context, func())) attempt {
	t.Helper()
	return w.executeOn(t, u, w.Subject.Deployment(u.srv.URL), body, ctxFor)
}

// executeOn is execute on deployment d of u.
func (w Wire) executeOn(t *testing.T, u *upstream, d *routing.Deployment, body string, ctxFor func(context.Context) (context.Context, func())) attempt {
	t.Helper()
	a, err := w.Subject.New(d, u.srv.Client())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	logs := &enginetest.LogSink{}
	ctx, cancel := ctxFor(logr.NewContext(context.Background(), logs.Logger()))
	defer cancel()
	rec := &enginetest.Recorder{Context: ctx}
	at := engine.Attempt{ExecutionID: "exe_conformance", Number: 1, Request: decode(t, body), Deployment: d, CleanupGrace: cleanupGrace}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	out, err := a.Execute(ctx, at, rec)
	end := time.Now()
	runtime.ReadMemStats(&after)

	res := attempt{rec: rec, logs: logs, out: out, err: err, reqs: u.requests(), allocs: after.TotalAlloc - before.TotalAlloc}
	res.elapsed = end.Sub(start)
	if dl, ok := ctx.Deadline(); ok && ctx.Err() != nil {
		res.elapsed = end.Sub(dl)
	}
	errors.As(err, &res.perr)
	w.checkSecrets(t, res)
	for _, e := range rec.Recorded() {
		// Events are stored and served as JSON text: provider bytes that are not UTF-8
		// must have been repaired on the way in.
		if !utf8.Valid(e.Data) {
			t.Errorf("a %s event is not valid UTF-8: %q", e.Type, e.Data)
		}
	}
	return res
}

// run is execute with the ordinary attempt context.
func (w Wire) run(t *testing.T, s Scenario, body string) attempt {
	t.Helper()
	u := newUpstream(t, w, func(rw http.ResponseWriter, r *http.Request) { w.Respond(s, rw, r) })
	return w.execute(t, u, body, func(p context.Context) (context.Context, func()) {
		return context.WithTimeout(p, attemptTimeout)
	})
}

// parts are the credential's parts: Secrets and PublicParts.
func (w Wire) parts() []string {
	return slices.DeleteFunc(slices.Concat(w.Secrets, w.PublicParts), func(s string) bool { return s == "" })
}

// checkSecrets fails t if a secret went on the wire outside CredentialHeader, or a part
// of the credential came back in the error, an event, the outcome or a log line.
func (w Wire) checkSecrets(t *testing.T, a attempt) {
	t.Helper()
	for _, secret := range w.Secrets {
		if secret == "" {
			continue
		}
		for _, r := range a.reqs {
			if strings.Contains(r.URL, secret) || bytes.Contains(r.Body, []byte(secret)) {
				t.Errorf("a secret was sent in the URL or body of %s %s", r.Method, r.URL)
			}
			for name, values := range r.Header {
				if http.CanonicalHeaderKey(name) == http.CanonicalHeaderKey(w.CredentialHeader) {
					continue
				}
				if slices.ContainsFunc(values, func(v string) bool { return strings.Contains(v, secret) }) {
					t.Errorf("a secret was sent in header %s", name)
				}
			}
		}
	}
	for _, secret := range w.parts() {
		if a.err != nil {
			encoded, _ := json.Marshal(a.perr)
			if strings.Contains(fmt.Sprintf("%v %+v %#v", a.err, a.err, a.err), secret) || strings.Contains(string(encoded), secret) {
				t.Error("a part of the credential is in the returned error")
			}
		}
		for _, e := range a.rec.Recorded() {
			if bytes.Contains(e.Data, []byte(secret)) {
				t.Errorf("a part of the credential is in a %s event: %s", e.Type, e.Data)
			}
		}
		if strings.Contains(a.logs.Text(), secret) {
			t.Error("a part of the credential is in the adapter's log")
		}
		if strings.Contains(a.out.FinishReason+a.out.ResponseModel, secret) {
			t.Error("a part of the credential is in the outcome")
		}
	}
}

// text is the output text as a caller reads it: the output.delta texts joined, or, from
// an adapter that reports a whole result instead (Replicate), the text of an
// output.result holding a JSON string or an array of strings (a language model's tokens).
func (a attempt) text(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	var result json.RawMessage
	for _, e := range a.rec.Recorded() {
		switch e.Type {
		case protocol.EventOutputDelta:
			var d protocol.OutputDeltaData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatalf("output.delta %s: %v", e.Data, err)
			}
			sb.WriteString(d.Text)
		case protocol.EventOutputResult:
			var d protocol.OutputResultData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatalf("output.result %s: %v", e.Data, err)
			}
			result = d.Result
		}
	}
	if sb.Len() > 0 || result == nil {
		return sb.String()
	}
	var one string
	if json.Unmarshal(result, &one) == nil {
		return one
	}
	var tokens []string
	if err := json.Unmarshal(result, &tokens); err != nil {
		t.Fatalf("output.result %s holds no text", result)
	}
	return strings.Join(tokens, "")
}

// wantError fails t unless the attempt failed with code and retryable.
func (a attempt) wantError(t *testing.T, code protocol.Code, retryable bool) {
	t.Helper()
	if a.perr == nil {
		t.Fatalf("Execute returned %v (outcome %+v), want a %s error", a.err, a.out, code)
	}
	if a.perr.Code != code || a.perr.Retryable != retryable {
		t.Errorf("Execute failed with %s retryable=%v, want %s retryable=%v", a.perr.Code, a.perr.Retryable, code, retryable)
	}
}

// wantSuccess fails t unless the attempt succeeded.
func (a attempt) wantSuccess(t *testing.T) {
	t.Helper()
	if a.err != nil {
		t.Fatalf("Execute: %v", a.err)
	}
	if len(a.reqs) == 0 {
		t.Fatal("nothing was sent upstream")
	}
}

var checks = map[Scenario]func(*testing.T, Wire){
	Text: func(t *testing.T, w Wire) {
		a := w.run(t, Text, textRequest)
		a.wantSuccess(t)
		if got := a.text(t); got != ScriptText {
			t.Errorf("output text %q, want %q", got, ScriptText)
		}
	},
	ToolCall: func(t *testing.T, w Wire) {
		a := w.run(t, ToolCall, toolRequest)
		a.wantSuccess(t)
		var callID string
		var args strings.Builder
		for _, e := range a.rec.Recorded() {
			switch e.Type {
			case protocol.EventToolCallStarted:
				var d protocol.ToolCallStartedData
				_ = json.Unmarshal(e.Data, &d)
				if callID != "" || d.Name != ScriptTool || d.CallID == "" {
					t.Fatalf("tool.call.started %s: want one call of %s with a call id", e.Data, ScriptTool)
				}
				callID = d.CallID
			case protocol.EventToolCallArgsDelta:
				var d protocol.ToolCallArgsDeltaData
				_ = json.Unmarshal(e.Data, &d)
				if d.CallID != callID {
					t.Fatalf("arguments delta for call %q before or outside call %q", d.CallID, callID)
				}
				args.WriteString(d.Delta)
			}
		}
		if callID == "" {
			t.Fatalf("no tool call in %v", a.rec.Recorded())
		}
		var got, want any
		if err := json.Unmarshal([]byte(args.String()), &got); err != nil {
			t.Fatalf("arguments %q are not JSON: %v", args.String(), err)
		}
		_ = json.Unmarshal([]byte(ScriptArguments), &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("arguments %s, want %s", args.String(), ScriptArguments)
		}
	},
	Usage: func(t *testing.T, w Wire) {
		a := w.run(t, Usage, textRequest)
		a.wantSuccess(t)
		got := map[string]float64{}
		for _, e := range a.rec.Recorded() {
			if e.Type != protocol.EventUsageReported {
				continue
			}
			var d protocol.UsageReportedData
			_ = json.Unmarshal(e.Data, &d)
			for _, u := range d.Usage {
				if u.Source != protocol.SourceProvider {
					t.Errorf("usage %s has source %q, want provider", u.Unit, u.Source)
				}
				got[u.Unit] += u.Quantity
			}
		}
		if len(w.Usage) == 0 {
			t.Fatal("the Wire declares no Usage figures")
		}
		if !reflect.DeepEqual(got, w.Usage) {
			t.Errorf("usage %v, want %v", got, w.Usage)
		}
	},
	InStreamError: func(t *testing.T, w Wire) { checkFailureAfterOutput(t, w, InStreamError) },
	CutBeforeOutput: func(t *testing.T, w Wire) {
		a := w.run(t, CutBeforeOutput, textRequest)
		a.wantError(t, protocol.CodeProviderUnavailable, true)
		if n := len(a.rec.Recorded()); n != 0 {
			t.Errorf("%d events emitted, want none", n)
		}
	},
	CutAfterOutput: func(t *testing.T, w Wire) { checkFailureAfterOutput(t, w, CutAfterOutput) },
	Stall: func(t *testing.T, w Wire) {
		u := newUpstream(t, w, func(rw http.ResponseWriter, r *http.Request) { w.Respond(Stall, rw, r) })
		a := w.execute(t, u, textRequest, func(p context.Context) (context.Context, func()) {
			return context.WithTimeout(p, stallAfter)
		})
		if a.err == nil {
			t.Error("Execute succeeded on a stalled stream")
		}
		if a.elapsed > cleanupGrace+graceSlack {
			t.Errorf("Execute returned %s after the attempt's context ended, want within the cleanup grace %s", a.elapsed, cleanupGrace)
		}
	},
	HugeLine: func(t *testing.T, w Wire) {
		a := w.run(t, HugeLine, textRequest)
		a.wantError(t, protocol.CodeProviderUnavailable, true)
		if n := len(a.rec.Recorded()); n != 0 {
			t.Errorf("%d events emitted, want none", n)
		}
		if a.allocs > hugeAllocBound {
			t.Errorf("reading a %d-byte unit allocated %d bytes; the adapter must stop at its bound", HugeLineBytes, a.allocs)
		}
	},
	InvalidUTF8: func(t *testing.T, w Wire) {
		a := w.run(t, InvalidUTF8, textRequest)
		a.wantSuccess(t)
		got := a.text(t)
		if !utf8.ValidString(got) || !strings.HasPrefix(got, "ok") || !strings.HasSuffix(got, "!") {
			t.Errorf("output text %q, want valid UTF-8 from %q", got, InvalidUTF8Text)
		}
	},
	Echo: func(t *testing.T, w Wire) {
		a := w.run(t, Echo, textRequest)
		a.wantError(t, protocol.CodeProviderRejected, false)
	},
}

// checkEchoedIdentifiers serves EchoAnswer with every part of the credential in every
// EchoFields field, on the Wire's deployment and on it without streaming: nothing the
// adapter returns, emits or logs holds the part, and the attempt either succeeds or
// fails with a portable error (an unreadable answer is provider_unavailable; an echoed
// block reason may well be content_filtered). The ordinary answer (no echo) must succeed,
// with the tool call where the deployment declares tools, or the fields prove nothing.
func checkEchoedIdentifiers(t *testing.T, w Wire) {
	type variant struct {
		name string
		caps routing.CapSet
	}
	streaming := routing.CapsOf(protocol.CapStreaming)
	caps := w.Subject.Deployment("http://127.0.0.1:1").Capabilities
	variants := []variant{{"as declared", caps}}
	if caps.Has(streaming) {
		variants = append(variants, variant{"without streaming", caps &^ streaming})
	}
	body := textRequest
	if caps.Has(routing.CapsOf(protocol.CapTools)) {
		body = toolRequest
	}
	for _, v := range variants {
		run := func(t *testing.T, field, echo string) attempt {
			t.Helper()
			u := newUpstream(t, w, func(rw http.ResponseWriter, r *http.Request) { w.EchoAnswer(field, echo, rw, r) })
			d := w.Subject.Deployment(u.srv.URL)
			d.Capabilities = v.caps
			return w.executeOn(t, u, d, body, func(p context.Context) (context.Context, func()) {
				return context.WithTimeout(p, attemptTimeout)
			})
		}
		t.Run(v.name, func(t *testing.T) {
			t.Run("ordinary answer", func(t *testing.T) {
				a := run(t, "", "")
				a.wantSuccess(t)
				called := slices.ContainsFunc(a.rec.Recorded(), func(e enginetest.Emitted) bool { return e.Type == protocol.EventToolCallStarted })
				if v.caps.Has(routing.CapsOf(protocol.CapTools)) && !called {
					t.Errorf("the ordinary echo answer made no tool call: %v", a.rec.Recorded())
				}
			})
			for i, part := range w.parts() {
				for _, field := range w.EchoFields {
					t.Run(fmt.Sprintf("part %d in %s", i, field), func(t *testing.T) {
						a := run(t, field, part) // execute checks that the part comes back nowhere
						if len(a.reqs) == 0 {
							t.Fatal("nothing was sent upstream")
						}
						if a.err != nil && (a.perr == nil || !a.perr.Code.Known() || a.perr.Code == protocol.CodeInternal) {
							t.Errorf("Execute returned %v, want success or a provider's portable error", a.err)
						}
					})
				}
			}
		})
	}
}

// checkFence sends through providerhttp.NewClient with loopback refused (cluster mode's
// fence) to the loopback upstream and to the cloud metadata address: each attempt fails
// with the fence's provider_rejected, not retryable, and the upstream receives nothing —
// the adapter maps the refused dial as every adapter does (providerhttp.TransportError).
func checkFence(t *testing.T, w Wire) {
	strict := providerhttp.NewClient(providerhttp.Fence{})
	u := newUpstream(t, w, func(rw http.ResponseWriter, r *http.Request) { w.Respond(Text, rw, r) })
	for _, endpoint := range []string{u.srv.URL, "http://169.254.169.254:80"} {
		d := w.Subject.Deployment(endpoint)
		a, err := w.Subject.New(d, strict)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
		at := engine.Attempt{ExecutionID: "exe_conformance", Number: 1, Request: decode(t, textRequest), Deployment: d, CleanupGrace: cleanupGrace}
		_, err = a.Execute(ctx, at, &enginetest.Recorder{Context: ctx})
		cancel()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeProviderRejected || pe.Retryable || pe.Message != providerhttp.RefusedMessage {
			t.Errorf("an attempt on %s through the strict fence returned %v, want the fence's provider_rejected", endpoint, err)
		}
	}
	if n := len(u.requests()); n != 0 {
		t.Errorf("the loopback upstream received %d requests, want none", n)
	}
}

// formatVerbs are the fmt verbs an adapter or a deployment could be printed with by
// mistake: a log line, a test failure, a debug dump.
var formatVerbs = []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d", "%T %[1]v"}

// checkRedacted builds the adapter of the Wire's deployment and prints it, and the
// deployment, with every verb of formatVerbs and as JSON: no part of the credential
// shows. fmt prints unexported fields by reflection, without their methods, so an
// adapter keeps every credential value in a routing.Credential (which holds it behind a
// pointer) or prints itself.
func checkRedacted(t *testing.T, w Wire) {
	d := w.Subject.Deployment("http://127.0.0.1:1")
	a, err := w.Subject.New(d, http.DefaultClient)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for name, v := range map[string]any{"adapter": a, "deployment": d, "deployment value": *d} {
		var printed []string
		for _, verb := range formatVerbs {
			printed = append(printed, verb+" → "+fmt.Sprintf(verb, v))
		}
		if b, err := json.Marshal(v); err == nil {
			printed = append(printed, "JSON → "+string(b))
		}
		for _, s := range printed {
			for _, part := range w.parts() {
				if strings.Contains(s, part) {
					t.Errorf("the %s shows a part of the credential: %s", name, s)
				}
			}
		}
	}
}

// checkErrors serves each documented error and checks its mapping.
func checkErrors(t *testing.T, w Wire) {
	if len(w.Errors) == 0 {
		t.Fatal("the Wire lists no documented errors")
	}
	for _, c := range w.Errors {
		t.Run(c.Name, func(t *testing.T) {
			u := newUpstream(t, w, func(rw http.ResponseWriter, _ *http.Request) {
				for k, v := range c.Header {
					rw.Header()[k] = v
				}
				rw.WriteHeader(c.Status)
				_, _ = io.WriteString(rw, c.Body)
			})
			a := w.execute(t, u, textRequest, func(p context.Context) (context.Context, func()) {
				return context.WithTimeout(p, attemptTimeout)
			})
			a.wantError(t, c.Code, c.Retryable)
			if a.perr == nil {
				return
			}
			if c.RetryAfterMs != 0 && a.perr.RetryAfterMs != c.RetryAfterMs {
				t.Errorf("retry_after_ms %d, want %d", a.perr.RetryAfterMs, c.RetryAfterMs)
			}
			if pe := a.perr.ProviderError; pe == nil || pe.Provider != w.Provider || pe.HTTPStatus != c.Status {
				t.Errorf("provider_error %+v, want provider %s and http_status %d", pe, w.Provider, c.Status)
			}
			if n := len(a.rec.Recorded()); n != 0 {
				t.Errorf("%d events emitted, want none", n)
			}
		})
	}
}

// checkRedirect answers the first request with a 307 to another server, which must
// never be reached: following would carry the credential there.
func checkRedirect(t *testing.T, w Wire) {
	var mu sync.Mutex
	reached := 0
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		reached++
		mu.Unlock()
	}))
	defer elsewhere.Close()
	u := newUpstream(t, w, func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Location", elsewhere.URL+"/moved")
		rw.WriteHeader(http.StatusTemporaryRedirect)
	})
	a := w.execute(t, u, textRequest, func(p context.Context) (context.Context, func()) {
		return context.WithTimeout(p, attemptTimeout)
	})
	if a.err == nil {
		t.Error("Execute succeeded on a redirect")
	}
	mu.Lock()
	defer mu.Unlock()
	if reached != 0 {
		t.Errorf("the redirect was followed %d times", reached)
	}
}

// checkFailureAfterOutput runs s, a scenario that fails after the text ScriptPartial:
// the text stays recorded, and the failure is provider_unavailable, not retryable.
func checkFailureAfterOutput(t *testing.T, w Wire, s Scenario) {
	a := w.run(t, s, textRequest)
	a.wantError(t, protocol.CodeProviderUnavailable, false)
	if got := a.text(t); got != ScriptPartial {
		t.Errorf("output text %q, want %q recorded before the error", got, ScriptPartial)
	}
}

// checkSuccessStatuses answers the Text scenario with 201 and then 203 wherever the Wire
// answers 200: every adapter takes any 2xx as success, as HTTP has it (providerhttp.Do).
func checkSuccessStatuses(t *testing.T, w Wire) {
	for _, status := range []int{http.StatusCreated, http.StatusNonAuthoritativeInfo} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			u := newUpstream(t, w, func(rw http.ResponseWriter, r *http.Request) {
				w.Respond(Text, &okAs{ResponseWriter: rw, status: status}, r)
			})
			a := w.execute(t, u, textRequest, func(p context.Context) (context.Context, func()) {
				return context.WithTimeout(p, attemptTimeout)
			})
			a.wantSuccess(t)
			if got := a.text(t); got != ScriptText {
				t.Errorf("output text %q, want %q", got, ScriptText)
			}
		})
	}
}

// okAs is a ResponseWriter that answers status where its handler answers 200.
type okAs struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (o *okAs) WriteHeader(code int) {
	if code == http.StatusOK && !o.wrote {
		code = o.status
	}
	o.wrote = true
	o.ResponseWriter.WriteHeader(code)
}

func (o *okAs) Write(b []byte) (int, error) {
	if !o.wrote {
		o.WriteHeader(http.StatusOK)
	}
	return o.ResponseWriter.Write(b)
}

func (o *okAs) Flush() {
	if !o.wrote {
		o.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(o.ResponseWriter).Flush()
}

func (o *okAs) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// checkCancel cancels the attempt once the upstream holds the request (as Stall does)
// and checks Execute returns within the cleanup grace.
func checkCancel(t *testing.T, w Wire) {
	if _, ok := w.NotApplicable[Stall]; ok {
		t.Fatal("cancellation is checked on the Stall scenario, which every provider can produce")
	}
	cancelled := make(chan time.Time, 1)
	u := newUpstream(t, w, func(rw http.ResponseWriter, r *http.Request) { w.Respond(Stall, rw, r) })
	a := w.execute(t, u, textRequest, func(p context.Context) (context.Context, func()) {
		ctx, cancel := context.WithCancel(p)
		go func() {
			select {
			case <-u.arrived:
				// Give the adapter a moment to be reading the response.
				time.Sleep(50 * time.Millisecond)
			case <-time.After(attemptTimeout):
			}
			cancelled <- time.Now()
			cancel()
		}()
		return ctx, cancel
	})
	if a.err == nil {
		t.Error("Execute succeeded after cancellation")
	}
	select {
	case at := <-cancelled:
		if since := time.Since(at); since > cleanupGrace+graceSlack {
			t.Errorf("Execute returned %s after cancellation, want within the cleanup grace %s", since, cleanupGrace)
		}
	default:
		t.Fatalf("Execute returned %v before the attempt was cancelled", a.err)
	}
}
