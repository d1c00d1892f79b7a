package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/telemetry"
)

// Canaries: values that must never reach a metric, a span or a log line.
const (
	canaryCredential = "sk-canary-credential-5f0c2a"
	canaryPrompt     = "canary prompt 8e1d77: what is the capital of France?"
	canaryMetadata   = "canary-metadata-41b9e3"
	canaryAuthz      = "Bearer canary-authorization-c03a5d"
)

// upstream is a fake OpenAI Chat Completions server: model "gpt-down" answers 503 (with
// an error message echoing the key, as OpenAI's do for bad keys), any other model
// streams "Paris" with usage. It records the traceparent of each request.
type upstream struct {
	*httptest.Server
	mu           sync.Mutex
	traceparents map[string][]string // by model
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{traceparents: map[string][]string{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Model string `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.traceparents[body.Model] = append(u.traceparents[body.Model], r.Header.Get("traceparent"))
		u.mu.Unlock()
		if body.Model == "gpt-down" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":{"message":"overloaded; key %s","type":"server_error","param":null,"code":null}}`, r.Header.Get("Authorization"))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, chunk := range []string{
			`{"id":"c1","object":"chat.completion.chunk","model":"gpt-up-2026-01-01","choices":[{"index":0,"delta":{"role":"assistant","content":"Par"},"finish_reason":null}]}`,
			`{"id":"c1","object":"chat.completion.chunk","model":"gpt-up-2026-01-01","choices":[{"index":0,"delta":{"content":"is"},"finish_reason":null}]}`,
			`{"id":"c1","object":"chat.completion.chunk","model":"gpt-up-2026-01-01","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"c1","object":"chat.completion.chunk","model":"gpt-up-2026-01-01","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}`,
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", chunk)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) traceparentsOf(model string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.traceparents[model]...)
}

// world is the runtime in process with every observer wired as the binary wires them:
// metrics in their own registry, spans to an in-memory recorder, every log line (at
// the highest verbosity) into one buffer.
type world struct {
	api      *httptest.Server
	client   *client.Client
	registry *prometheus.Registry
	spans    *tracetest.SpanRecorder
	logs     *lockedBuffer
	upstream *upstream
}

// lockedBuffer collects lines that a test reads while they are written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) line(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(prefix + " " + args + "\n")
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newWorld(t *testing.T) *world {
	w := &world{registry: prometheus.NewRegistry(), spans: tracetest.NewSpanRecorder(), logs: &lockedBuffer{}, upstream: newUpstream(t)}
	log := funcr.New(w.logs.line, funcr.Options{Verbosity: 10})

	metrics := telemetry.NewMetrics()
	metrics.MustRegister(w.registry)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := telemetry.Tracer(tp)

	mem := memory.New()
	store := timed(mem, metrics.Store("memory"))
	holder := &routing.Holder{}
	registry := routing.NewRegistry(holder, routing.OnPublish(metrics.TablePublished))
	for _, d := range []routing.Deployment{deployment(w.upstream.URL, "down", 10), deployment(w.upstream.URL, "up", 0)} {
		registry.Set(d.Ref, &d)
	}
	registry.Start()
	providers := map[string]engine.Provider{}
	// The upstream listens on loopback, which only a fence allowing it reaches.
	openai.Register(providers, openai.WithHTTPClient(providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})))
	eng := engine.New(engine.Config{
		Store: store, Table: holder, Providers: providers, MaxConcurrent: 1 << 16,
		Logger: log.WithName("engine"), Observer: metrics.Engine(), Tracer: tracer,
	})
	w.api = httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Engine: eng, Store: store,
		Logger: log.WithName("httpapi"), AccessLog: func(e httpapi.AccessEntry) {
			log.WithName("access").Info("HTTP request", "route", e.Route, "method", e.Method, "status", e.Status,
				"duration", e.Duration, "principal", e.Principal, "execution", e.Execution, "bytes", e.Bytes)
		},
		Observer: metrics.HTTP(), Tracer: tracer,
	}))
	t.Cleanup(func() {
		w.api.Close()
		_ = eng.Close()
		_ = mem.Close()
	})
	c, err := client.New(w.api.URL)
	if err != nil {
		t.Fatal(err)
	}
	w.client = c
	return w
}

// timedStore is a store's roles that the engine and the HTTP API use, each timed.
type timedStore struct {
	eventstore.Log
	eventstore.Reservations
	eventstore.Cancels
	eventstore.Leases
}

// timed returns the roles of s timed by timer, as the binary times its store.
func timed(s *memory.Store, timer eventstore.Timer) timedStore {
	return timedStore{
		Log:          eventstore.InstrumentLog(s, timer),
		Reservations: eventstore.InstrumentReservations(s, timer),
		Cancels:      eventstore.InstrumentCancels(s, timer),
		Leases:       eventstore.InstrumentLeases(s, timer),
	}
}

// deployment is an openai deployment team/gpt-<name> of ability chat.
func deployment(endpoint, name string, priority int32) routing.Deployment {
	return routing.Deployment{
		Ref:          routing.Ref{Namespace: "team", Name: "gpt-" + name},
		Provider:     openai.ProviderOpenAI,
		Model:        "gpt-" + name,
		Endpoint:     endpoint + "/v1",
		Credential:   routing.NewCredential(canaryCredential),
		Abilities:    []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapOutputText, protocol.CapStreaming),
		Priority:     priority,
		Weight:       100,
	}
}

// submit posts body with headers and returns the status and response body.
func (w *world) submit(t *testing.T, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, w.api.URL+"/v1/executions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// run submits body, follows the execution to its end and returns its id.
func (w *world) run(t *testing.T, body string, header ...string) string {
	t.Helper()
	status, b := w.submit(t, body, header...)
	if status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", status, b)
	}
	var acc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &acc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err := w.client.FollowResult(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != protocol.StatusCompleted {
		t.Fatalf("execution %s ended %s: %+v", acc.ID, snap.Status, snap.Error)
	}
	return acc.ID
}

func chatBody(text string) string {
	b, _ := json.Marshal(map[string]any{
		"ability":  "chat",
		"input":    []map[string]string{{"type": "text", "text": text}},
		"metadata": map[string]string{"team": canaryMetadata},
	})
	return string(b)
}

// TestTraceOfAnExecutionWithFallback: the server span continues the caller's trace; the
// execution span starts a trace of its own, linked to the server span; the failed and
// the successful attempt are sibling client spans under it with the GenAI attributes;
// and each attempt's traceparent reached the provider.
func TestTraceOfAnExecutionWithFallback(t *testing.T) {
	w := newWorld(t)
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	id := w.run(t, chatBody("hello"), "traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")

	// The execution span ends right after its terminal event is recorded: wait for it.
	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans = w.spans.Ended()
		if byName(spans, "execution") != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	server := byName(spans, "POST /v1/executions")
	if server == nil {
		t.Fatalf("no server span among %v", names(spans))
	}
	if server.SpanKind() != trace.SpanKindServer || server.Parent().TraceID().String() != callerTrace || server.SpanContext().TraceID().String() != callerTrace {
		t.Errorf("server span: kind %s, parent %s: want a server span continuing trace %s", server.SpanKind(), server.Parent().TraceID(), callerTrace)
	}
	wantAttrs(t, server, map[string]string{"http.route": "POST /v1/executions", "http.request.method": "POST", "http.response.status_code": "202", "switchboard.execution.id": id})

	exec := byName(spans, "execution")
	if exec == nil {
		t.Fatalf("no execution span among %v", names(spans))
	}
	if exec.Parent().IsValid() || exec.SpanContext().TraceID() == server.SpanContext().TraceID() {
		t.Error("the execution span is not the root of a trace of its own")
	}
	if links := exec.Links(); len(links) != 1 || !links[0].SpanContext.Equal(server.SpanContext()) {
		t.Errorf("execution span links = %+v, want one link to the server span", links)
	}
	wantAttrs(t, exec, map[string]string{"switchboard.execution.id": id, "switchboard.ability": "chat"})

	down, up := byName(spans, "chat gpt-down"), byName(spans, "chat gpt-up")
	if down == nil || up == nil {
		t.Fatalf("attempt spans missing among %v", names(spans))
	}
	for _, a := range []sdktrace.ReadOnlySpan{down, up} {
		if a.SpanKind() != trace.SpanKindClient || a.Parent().SpanID() != exec.SpanContext().SpanID() || a.SpanContext().TraceID() != exec.SpanContext().TraceID() {
			t.Errorf("%s: kind %s, parent %s: want a client span under the execution span", a.Name(), a.SpanKind(), a.Parent().SpanID())
		}
	}
	wantAttrs(t, down, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-down",
		"switchboard.deployment": "team/gpt-down", "switchboard.attempt": "1", "error.type": "provider_unavailable"})
	wantAttrs(t, up, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-up",
		"gen_ai.response.model": "gpt-up-2026-01-01", "gen_ai.usage.input_tokens": "12", "gen_ai.usage.output_tokens": "2",
		"switchboard.deployment": "team/gpt-up", "switchboard.attempt": "2"})
	if v, ok := attr(up, "error.type"); ok {
		t.Errorf("successful attempt has error.type %s", v)
	}

	for _, a := range []sdktrace.ReadOnlySpan{down, up} {
		want := fmt.Sprintf("00-%s-%s-01", a.SpanContext().TraceID(), a.SpanContext().SpanID())
		if got := w.upstream.traceparentsOf(a.Name()[len("chat "):]); len(got) != 1 || got[0] != want {
			t.Errorf("%s: provider received traceparent %q, want [%s]", a.Name(), got, want)
		}
	}
}

func byName(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := attr(s, k); !ok || got != v {
			t.Errorf("span %q: %s = %q (set: %v), want %q", s.Name(), k, got, ok, v)
		}
	}
}

// TestNoCanaryInTelemetry: a credential (echoed by the provider's error), the prompt, a
// metadata value and the caller's Authorization header appear in no metric, span (name,
// attribute, event, link, status) or log line, at the highest log verbosity.
func TestNoCanaryInTelemetry(t *testing.T) {
	w := newWorld(t)
	w.run(t, chatBody(canaryPrompt), "Authorization", canaryAuthz)
	// A request that fails routing, and one refused as invalid, with canaries too.
	w.submit(t, `{"ability":"chat","input":[{"type":"image","media_type":"image/png","data":"aGk="}],"metadata":{"k":"`+canaryMetadata+`"}}`, "Authorization", canaryAuthz)
	w.submit(t, `{"ability":"chat","input":[{"type":"text","text":"`+canaryPrompt+`"}],"bogus":"`+canaryMetadata+`"}`, "Authorization", canaryAuthz)

	var spanText strings.Builder
	for _, s := range w.spans.Ended() {
		fmt.Fprintln(&spanText, s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			fmt.Fprintln(&spanText, kv.Key, kv.Value.String())
		}
		for _, ev := range s.Events() {
			fmt.Fprintln(&spanText, ev.Name)
			for _, kv := range ev.Attributes {
				fmt.Fprintln(&spanText, kv.Key, kv.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				fmt.Fprintln(&spanText, kv.Key, kv.Value.String())
			}
		}
	}
	surfaces := map[string]string{"metrics": exposition(t, w.registry), "spans": spanText.String(), "logs": w.logs.String()}
	if !strings.Contains(surfaces["logs"], `"HTTP request"`) || !strings.Contains(surfaces["spans"], "gen_ai.request.model") {
		t.Fatalf("nothing was logged or traced: logs %q", surfaces["logs"])
	}
	canaries := []string{canaryCredential, canaryPrompt, "8e1d77", canaryMetadata, canaryAuthz, "canary-authorization"}
	for surface, text := range surfaces {
		for _, c := range canaries {
			if strings.Contains(text, c) {
				t.Errorf("%s hold the canary %q", surface, c)
			}
		}
	}
}

// exposition is reg's /metrics text.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestCardinalityIsBounded: 10,000 submissions with random abilities, metadata and
// extension keys — a few routed, most not — add no series once the routed ability and
// each kind of answer has been seen, and no label holds a caller's string.
func TestCardinalityIsBounded(t *testing.T) {
	w := newWorld(t)
	rng := rand.New(rand.NewPCG(1, 2))
	random := func() string {
		const letters = "abcdefghijklmnopqrstuvwxyz"
		b := make([]byte, 12)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	var seen []string // every random string sent
	body := func(routed bool) string {
		ability := "chat"
		if !routed {
			ability = "ab-" + random()
		}
		key, value, ext := "k"+random(), "v"+random(), "x"+random()+".f"+random()
		seen = append(seen, ability, key, value, ext)
		b, _ := json.Marshal(map[string]any{
			"ability":    ability,
			"input":      []map[string]string{{"type": "text", "text": "t" + random()}},
			"metadata":   map[string]string{key: value},
			"extensions": map[string]any{ext: random()},
		})
		return string(b)
	}
	send := func(n int) {
		for i := range n {
			w.submit(t, body(i%20 == 0))
		}
	}
	// Warm up: the routed ability's series and every answer's status exist afterwards.
	send(200)
	before := seriesCount(t, w.registry)
	send(10_000)
	// Let the routed executions finish, so their outcome series exist too.
	time.Sleep(200 * time.Millisecond)
	after := seriesCount(t, w.registry)
	if after != before {
		t.Errorf("series: %d before, %d after 10,000 random submissions", before, after)
	}
	text := exposition(t, w.registry)
	for _, s := range seen {
		if s != "chat" && strings.Contains(text, s) {
			t.Fatalf("a caller's string %q is in a metric", s)
		}
	}
	t.Logf("%d series before and after", after)
}

// seriesCount is the number of series reg exposes (a histogram counts once per label
// set).
func seriesCount(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		n += len(f.GetMetric())
	}
	return n
}
