// Command relay is the benchmarks' baseline (hack/bench): the three exchanges of a call
// through the runtime, made with net/http and nothing else. POST /v1/executions answers
// 202 with an id and starts the provider's Chat Completions stream; every chunk becomes
// an event, kept in memory; GET /v1/executions/{id}/events streams the events as the
// runtime frames them, one write and flush per batch of ready events. The runtime's Go
// client reads it as it reads the runtime.
//
// It is what any runtime built on Go's HTTP stack pays for the same calls: the same
// connections, reads, writes and flushes, the same JSON decoding of a provider chunk
// (providerhttp.DecodeChunk) and encoding of an event (protocol.AppendDelta,
// protocol.AppendEnvelope). It has none of what the runtime
// adds: no request validation or routing, no authentication, limits, idempotency,
// deadlines, cancel, fallback, durable store, leases, metrics, traces or access log.
// The difference between the two, measured in one run, is the cost of those.
//
// POST /v1/chat/completions is its one-exchange translating mode, the baseline of a
// front door: an OpenAI Chat Completions request is parsed, the upstream request built
// from it, and each upstream chunk parsed and re-emitted as an OpenAI chunk on the same
// response, with none of the above either (chat.go).
//
//	go run ./hack/relay --upstream http://127.0.0.1:9090/openai/v1 --model bench-echo --api-key KEY
//
// Once it accepts connections it prints "relay listening on http://ADDR". An execution
// is forgotten once a stream has delivered its last event: the benchmarks read each
// once. GET /metrics answers the Go heap counters the benchmarks read from the runtime;
// /debug/pprof/ serves Go's profiles.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// maxBody bounds a request body, as the runtime's default does.
const maxBody = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (port 0 picks a free port)")
	upstream := fs.String("upstream", "", "base URL of an OpenAI-compatible API (…/v1)")
	model := fs.String("model", "", "model to ask for")
	key := fs.String("api-key", "", "bearer token for the upstream")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *upstream == "" || *model == "" {
		return errors.New("--upstream and --model are required")
	}
	r := &relay{
		url:   *upstream + "/chat/completions",
		model: *model,
		auth:  "Bearer " + *key,
		// As providerhttp's client: keep-alive connections, many idle per host.
		hc:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}},
		execs: map[string]*execution{},
		log:   stderr,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/executions", r.submit)
	mux.HandleFunc("GET /v1/executions/{id}/events", r.events)
	mux.HandleFunc("POST /v1/chat/completions", r.chatCompletions)
	mux.HandleFunc("GET /metrics", heapMetrics)
	// Profiles, to compare with the runtime's (--pprof-bind-address).
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "relay listening on http://%s\n", ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// relay holds the executions it serves.
type relay struct {
	url, model, auth string
	hc               *http.Client
	log              io.Writer // failed upstream calls
	next             atomic.Uint64

	mu    sync.Mutex
	execs map[string]*execution
}

// execution is one call's events, in order.
type execution struct {
	id string

	mu     sync.Mutex
	events []event
	done   bool
	wake   chan struct{} // closed and replaced by every append
}

// submit is POST /v1/executions: the request's text parts are the prompt.
func (r *relay) submit(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The runtime's own decoder, the cheapest there is for a request.
	in, err := protocol.DecodeRequest(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var prompt bytes.Buffer
	for _, p := range in.Input {
		prompt.WriteString(p.Text)
	}
	now := time.Now().UTC()
	x := &execution{id: "exe_relay" + strconv.FormatUint(r.next.Add(1), 10), wake: make(chan struct{})}
	r.mu.Lock()
	r.execs[x.id] = x
	r.mu.Unlock()
	x.append(protocol.EventAccepted, protocol.AcceptedData{Ability: in.Ability, DeadlineAt: now.Add(time.Minute)})
	go r.call(context.WithoutCancel(req.Context()), x, prompt.String())

	out := []byte(`{"id":`)
	out = protocol.AppendJSONString(out, x.id)
	out = append(out, `,"status":"accepted","created_at":"`...)
	out = now.AppendFormat(out, time.RFC3339Nano)
	out = append(out, `"}`...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(out)
}

// event is one recorded event: its type and its JSON envelope.
type event struct {
	typ protocol.EventType
	env []byte
}

// chunk is the part of a Chat Completions stream chunk the relay reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     float64 `json:"prompt_tokens"`
		CompletionTokens float64 `json:"completion_tokens"`
	} `json:"usage"`
}

// call streams the completion of prompt into x's events and ends x.
func (r *relay) call(ctx context.Context, x *execution, prompt string) {
	x.append(protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "bench/bench", Provider: "openai-compatible", Model: r.model})
	finish, err := r.stream(ctx, x, prompt)
	if err != nil {
		fmt.Fprintf(r.log, "relay: %s: %v\n", x.id, err)
		x.append(protocol.EventFailed, protocol.FailedData{Error: &protocol.Error{Code: protocol.CodeProviderUnavailable, Message: "The provider call failed.", Retryable: true}})
		return
	}
	x.append(protocol.EventCompleted, protocol.CompletedData{FinishReason: finish})
}

func (r *relay) stream(ctx context.Context, x *execution, prompt string) (finish string, err error) {
	body, err := json.Marshal(map[string]any{
		"model":          r.model,
		"messages":       []map[string]string{{"role": "user", "content": prompt}},
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", r.auth)
	resp, err := r.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("upstream answered %s", resp.Status)
	}
	dec := sse.NewDecoder(resp.Body)
	defer dec.Release()
	var c chunk
	for {
		_, data, err := dec.NextData()
		if err != nil {
			return "", fmt.Errorf("upstream stream ended before [DONE]: %w", err)
		}
		if string(data) == "[DONE]" {
			return finish, nil
		}
		c = chunk{}
		if err := providerhttp.DecodeChunk(data, &c); err != nil {
			return "", err
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				x.appendRaw(protocol.EventOutputDelta, protocol.AppendDelta(nil, protocol.OutputDeltaData{Type: "text", Text: ch.Delta.Content}))
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
		if u := c.Usage; u != nil {
			x.append(protocol.EventUsageReported, protocol.UsageReportedData{Usage: []protocol.Usage{
				{Unit: protocol.UnitInputTokens, Quantity: u.PromptTokens, Source: protocol.SourceProvider},
				{Unit: protocol.UnitOutputTokens, Quantity: u.CompletionTokens, Source: protocol.SourceProvider},
			}})
		}
	}
}

// append records an event whose data encoding/json encodes.
func (x *execution) append(typ protocol.EventType, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err) // the relay's own payloads always encode
	}
	x.appendRaw(typ, raw)
}

// appendRaw records an event with encoded data and wakes the streams waiting for it.
func (x *execution) appendRaw(typ protocol.EventType, data []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ev := protocol.Event{ExecutionID: x.id, Sequence: uint64(len(x.events) + 1), Timestamp: time.Now().UTC(), Type: typ, Data: data}
	x.events = append(x.events, event{typ, protocol.AppendEnvelope(nil, &ev)})
	x.done = typ.Terminal()
	close(x.wake)
	x.wake = make(chan struct{})
}

// events is GET /v1/executions/{id}/events: every event from the first, then each as it
// is appended, until the terminal one.
func (r *relay) events(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("id")
	r.mu.Lock()
	x := r.execs[id]
	r.mu.Unlock()
	if x == nil {
		http.Error(w, "no such execution", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	rc := http.NewResponseController(w)
	var buf []byte
	for sent := 0; ; {
		x.mu.Lock()
		ready, done, wake := x.events[sent:], x.done, x.wake
		x.mu.Unlock()
		buf = buf[:0]
		for _, ev := range ready {
			sent++
			buf = append(buf, "id: "...)
			buf = strconv.AppendInt(buf, int64(sent), 10)
			buf = append(buf, '\n')
			buf = sse.AppendEvent(buf, "", string(ev.typ), ev.env)
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
		if done {
			r.mu.Lock()
			delete(r.execs, id)
			r.mu.Unlock()
			return
		}
		select {
		case <-wake:
		case <-req.Context().Done():
			return
		}
	}
}

// heapMetrics answers the two Go heap counters the benchmarks read, in the Prometheus
// text format.
func heapMetrics(w http.ResponseWriter, _ *http.Request) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "go_memstats_alloc_bytes_total %d\ngo_memstats_mallocs_total %d\n", m.TotalAlloc, m.Mallocs)
}
