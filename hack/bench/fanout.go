package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// runFanout measures one execution's events streamed to many subscribers at once. For
// each subscriber count N it starts a fresh switchboard whose model is reached through a
// gate: the execution is submitted, its upstream call held at the gate, N subscribers
// open the event stream and receive the events recorded so far, and only then is the
// upstream answer — chunks deltas with no delay — let through. The idle memory per
// subscriber is measured while the gate holds; the lag of each live event is the time
// from the event's timestamp (set when the runtime recorded it) to its receipt.
func runFanout(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("fanout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf common
	cf.register(fs)
	subs := fs.String("subscribers", "1,100,1000", "subscriber counts, comma-separated")
	chunks := fs.Int("chunks", 2000, "output.delta events of the execution")
	delay := fs.Duration("delay", 0, "upstream delay before each delta (0: the whole answer at once, which measures delivery throughput; a token pace such as 20ms measures the latency of each delivery)")
	settle := fs.Duration("settle", time.Second, "wait before reading RSS and goroutines, before and after the subscribers connect")
	store := fs.String("store", "memory", "EventStore of the runtime: memory, or redis (every subscriber's stream then follows the execution through Redis)")
	redisURL := fs.String("redis-url", "redis://127.0.0.1:6379/15", "switchboard --redis-url for -store redis; nothing is flushed, keys expire after -retention")
	baseline := fs.Bool("baseline", true, "measure the relay (hack/relay) before the runtime at each count: the same streams with net/http alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	storeFlags := []string{"--event-store", *store}
	switch *store {
	case "memory":
	case "redis":
		storeFlags = append(storeFlags, "--redis-url", *redisURL)
	default:
		return fmt.Errorf("-store: unknown EventStore %q", *store)
	}
	counts, err := parseInts(*subs)
	if err != nil {
		return fmt.Errorf("-subscribers: %w", err)
	}
	if *chunks < 1 || *settle < 0 || *delay < 0 {
		return errors.New("-chunks must be positive, -settle and -delay not negative")
	}
	// One connection per subscriber on each side: the runtime inherits the limit.
	if err := raiseFileLimit(2*uint64(slices.Max(counts)) + 256); err != nil {
		return err
	}

	s, err := newSession(ctx, cf, stdout, stderr)
	if err != nil {
		return err
	}
	defer s.close(&err)
	provider, err := s.startDemoProvider(*chunks, *delay)
	if err != nil {
		return err
	}
	g, err := newGate(provider, stderr)
	if err != nil {
		return err
	}
	defer g.close()
	text := promptText(2 * *chunks)

	fmt.Fprintf(stdout, "fanout: one execution of %d output.delta events (upstream delay %s, %s EventStore), streamed to N subscribers connected before the output starts\n", *chunks, *delay, *store)
	fmt.Fprintln(stdout, "  lag: event timestamp (recorded by the runtime) → received by a subscriber, over every delivery of an event recorded after the subscribers connected")
	fmt.Fprintln(stdout, "  cpu: the server's CPU time (utime+stime) from the gate's opening to the last terminal event, per live delivery")
	fmt.Fprintln(stdout, "  idle: RSS / goroutines (go_goroutines of /metrics) with all N streams open and no event flowing, minus the same before subscribing")
	servers := []string{"runtime"}
	if *baseline {
		servers = []string{"relay", "runtime"}
		fmt.Fprintln(stdout, "  relay: the baseline (hack/relay), the same execution and streams with net/http alone, events in memory")
	}
	fmt.Fprintln(stdout)
	tab := newTable(stdout, "subscribers", "server", "events", "deliveries", "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "stream_ms",
		"cpu_us_per_delivery", "rss_before_MiB", "rss_idle_MiB", "idle_KiB_per_sub", "goroutines_per_sub")
	upstream := "http://" + g.addr + "/openai/v1"
	for _, n := range counts {
		for _, server := range servers {
			fmt.Fprintf(stderr, "bench: fanout to %d subscribers of the %s\n", n, server)
			var rt *runtimeProc
			if server == "relay" {
				rt, err = s.startRelay("relay", upstream)
			} else {
				rt, err = s.startSwitchboard(ctx, fmt.Sprintf("switchboard-fanout-%d", n), upstream, storeFlags...)
			}
			if err != nil {
				return err
			}
			r, err := fanoutRound(ctx, rt, g, n, text, *settle)
			if err != nil {
				return fmt.Errorf("%s: %w", server, err)
			}
			if err := rt.stop(); err != nil {
				return err
			}
			gor := "n/a"
			if r.goroutinesOK {
				gor = fmt.Sprintf("%.2f", float64(r.goroutinesIdle-r.goroutinesBefore)/float64(n))
			}
			tab.row(fmt.Sprint(n), server, fmt.Sprint(r.events), fmt.Sprint(r.deliveries),
				ms(percentile(r.lags, .5)), ms(percentile(r.lags, .99)), ms(percentile(r.lags, 1)), ms(r.stream),
				r.cpuPerDelivery(), mib(r.rssBefore), mib(r.rssIdle), fmt.Sprintf("%.1f", float64(r.rssIdle-r.rssBefore)/1024/float64(n)), gor)
		}
	}
	return tab.flush()
}

// fanoutResult is one subscriber count's measurement.
type fanoutResult struct {
	events     int             // events of the execution, terminal included
	deliveries int             // events received, all subscribers together
	lags       []time.Duration // sorted, live deliveries only
	stream     time.Duration   // gate released → last subscriber saw the terminal event
	// cpu is the runtime's CPU time from the gate's opening to the last terminal event.
	cpu time.Duration

	rssBefore, rssIdle               int64
	goroutinesBefore, goroutinesIdle int
	goroutinesOK                     bool
}

// cpuPerDelivery formats the runtime's CPU time per live delivery in µs, or n/a when the
// stream was too short to measure with /proc's clock ticks (10 ms).
func (r *fanoutResult) cpuPerDelivery() string {
	if r.cpu < 200*time.Millisecond || len(r.lags) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(r.cpu)/float64(time.Microsecond)/float64(len(r.lags)))
}

// subscriber is what one event stream delivered.
type subscriber struct {
	events int
	last   protocol.Event
	lags   []time.Duration
	text   strings.Builder
}

func fanoutRound(ctx context.Context, rt *runtimeProc, g *gate, n int, text string, settle time.Duration) (*fanoutResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hc := newHTTPClient(n + 4)
	defer hc.CloseIdleConnections()
	cl, err := newRuntimeClient(rt.api, hc)
	if err != nil {
		return nil, err
	}
	arrived, release := g.arm()
	defer release() // never leave the upstream call held
	acc, err := cl.Submit(ctx, textRequest(text))
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	if err := waitFor(ctx, arrived, 30*time.Second, "the upstream call at the gate"); err != nil {
		return nil, err
	}
	// The submission's connection is closed so that every subscriber opens its own and
	// the before figures hold no connection a subscriber then reuses.
	hc.CloseIdleConnections()
	time.Sleep(settle)
	res := &fanoutResult{}
	if res.rssBefore, err = rss(rt.pid()); err != nil {
		return nil, err
	}
	res.goroutinesBefore, res.goroutinesOK = goroutines(ctx, rt.metrics)

	// liveFrom is the gate's release time (Unix ns); events recorded before it were
	// replayed to subscribers as they connected and are left out of the lags.
	var liveFrom atomic.Int64
	subs := make([]subscriber, n)
	ready := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range subs {
		wg.Go(func() {
			if err := subs[i].follow(ctx, hc, rt.api, acc.ID, i == 0, &liveFrom, ready); err != nil {
				cancel(fmt.Errorf("subscriber %d: %w", i+1, err))
			}
		})
	}
	for range n {
		if err := waitFor(ctx, ready, time.Minute, "every subscriber's first event"); err != nil {
			cancel(err)
			wg.Wait()
			return nil, context.Cause(ctx)
		}
	}
	time.Sleep(settle)
	if res.rssIdle, err = rss(rt.pid()); err != nil {
		return nil, err
	}
	if res.goroutinesOK {
		res.goroutinesIdle, res.goroutinesOK = goroutines(ctx, rt.metrics)
	}

	cpu, err := startCPU(rt.pid())
	if err != nil {
		return nil, err
	}
	released := time.Now()
	liveFrom.Store(released.UnixNano())
	release()
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	res.stream = time.Since(released)

	res.events = int(subs[0].last.Sequence)
	for i := range subs {
		sub := &subs[i]
		switch {
		case sub.last.Type != protocol.EventCompleted:
			return nil, fmt.Errorf("subscriber %d: execution %s ended with %q: %s", i+1, acc.ID, sub.last.Type, sub.last.Data)
		case sub.events != res.events || int(sub.last.Sequence) != res.events:
			return nil, fmt.Errorf("subscriber %d received %d events ending at sequence %d, subscriber 1 %d", i+1, sub.events, sub.last.Sequence, res.events)
		case i == 0 && sub.text.String() != text:
			return nil, fmt.Errorf("subscriber %d assembled %s, want %s", i+1, clip(sub.text.String()), clip(text))
		}
		res.deliveries += sub.events
		res.lags = append(res.lags, sub.lags...)
	}
	if res.deliveries != n*res.events {
		return nil, fmt.Errorf("%d deliveries, want %d subscribers × %d events", res.deliveries, n, res.events)
	}
	// Live deliveries are those with a lag: the events recorded before the gate opened
	// were delivered before the meter started.
	if res.cpu, err = cpu.perOp(1); err != nil {
		return nil, err
	}
	slices.Sort(res.lags)
	return res, nil
}

// follow reads the execution's whole event stream, signalling ready after the first
// event. It checks that sequences go 1, 2, 3… without gap, duplicate or reordering and
// reads each event's timestamp by a scan of its envelope: a subscriber shares the two
// CPUs with the runtime, so it does as little as a client can. Only the first one
// (full) decodes the deltas and assembles the text, which the caller checks.
func (s *subscriber) follow(ctx context.Context, hc *http.Client, api, id string, full bool, liveFrom *atomic.Int64, ready chan<- struct{}) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+api+"/v1/executions/"+id+"/events", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET events: %s", resp.Status)
	}
	dec := sse.NewDecoder(resp.Body)
	for {
		ev, err := dec.Next()
		if err != nil {
			return fmt.Errorf("stream ended before the terminal event: %w", err)
		}
		now := time.Now()
		seq, err := strconv.ParseUint(ev.ID, 10, 64)
		if err != nil || seq != s.last.Sequence+1 {
			return fmt.Errorf("event id %q after sequence %d: a gap, duplicate or reordering", ev.ID, s.last.Sequence)
		}
		ts, err := envelopeTimestamp(ev.Data)
		if err != nil {
			return err
		}
		if from := liveFrom.Load(); from != 0 && ts.UnixNano() >= from {
			s.lags = append(s.lags, now.Sub(ts))
		}
		if s.events == 0 {
			ready <- struct{}{}
		}
		s.events++
		s.last = protocol.Event{Sequence: seq, Type: protocol.EventType(ev.Type), Timestamp: ts, Data: json.RawMessage(ev.Data)}
		if full && s.last.Type == protocol.EventOutputDelta {
			var env struct {
				Data protocol.OutputDeltaData `json:"data"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &env); err != nil {
				return fmt.Errorf("decode output.delta: %w", err)
			}
			s.text.WriteString(env.Data.Text)
		}
		if s.last.Type.Terminal() {
			return nil
		}
	}
}

// envelopeTimestamp reads the "timestamp" member of an event envelope (spec/events.md),
// which the runtime writes before "data": the first occurrence is the envelope's.
func envelopeTimestamp(envelope string) (time.Time, error) {
	const key = `"timestamp":"`
	i := strings.Index(envelope, key)
	if i < 0 {
		return time.Time{}, fmt.Errorf("envelope without a timestamp: %s", clip(envelope))
	}
	rest := envelope[i+len(key):]
	end := strings.IndexByte(rest, '"')
	if end < 0 {
		return time.Time{}, fmt.Errorf("envelope with a cut timestamp: %s", clip(envelope))
	}
	return time.Parse(time.RFC3339Nano, rest[:end])
}

// waitFor waits for a value from ch, at most timeout.
func waitFor[T any](ctx context.Context, ch <-chan T, timeout time.Duration, what string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// gate is a reverse proxy in front of the demo provider that holds each upstream call
// of an armed round until the round is released, so that subscribers can connect
// before an execution produces output. Answers stream through unbuffered.
type gate struct {
	addr  string
	srv   *http.Server
	proxy *httputil.ReverseProxy
	log   *log.Logger
	// calls counts the calls being served: close waits for them, as the server's Close
	// does not, so that none logs after the run has returned.
	calls sync.WaitGroup

	mu     sync.Mutex
	round  *gateRound
	closed bool // calls are counted under mu until close sets it, then refused
}

// gateRound is one armed round: arrived is closed when its first call arrives.
type gateRound struct {
	arrived     chan struct{}
	arrivedOnce sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

func newGate(upstream string, stderr io.Writer) (*gate, error) {
	target := &url.URL{Scheme: "http", Host: upstream}
	g := &gate{log: log.New(stderr, "bench: gate: ", 0)}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1,
		// A transport of its own: nothing else in the process can close its
		// connections to the demo provider.
		Transport: newHTTPClient(8).Transport,
		ErrorLog:  g.log,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g.addr = ln.Addr().String()
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.srv.Serve(ln) }() // ends with ErrServerClosed on close
	return g, nil
}

// arm starts a round: calls from now on are held until release is called.
func (g *gate) arm() (arrived <-chan struct{}, release func()) {
	r := &gateRound{arrived: make(chan struct{}), release: make(chan struct{})}
	g.mu.Lock()
	g.round = r
	g.mu.Unlock()
	return r.arrived, func() { r.releaseOnce.Do(func() { close(r.release) }) }
}

func (g *gate) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	g.mu.Lock()
	r, closed := g.round, g.closed
	if !closed {
		g.calls.Add(1)
	}
	g.mu.Unlock()
	if closed {
		http.Error(w, "the gate is closed", http.StatusServiceUnavailable)
		return
	}
	defer g.calls.Done()
	if r != nil {
		r.arrivedOnce.Do(func() { close(r.arrived) })
		select {
		case <-r.release:
		case <-req.Context().Done():
			return
		}
	}
	// The demo provider answers as soon as it has decoded the request, which can be
	// before the proxy has read the runtime's request body to its end. net/http's server
	// would then close that body when the answer's head is flushed, the proxy's
	// transport would fail writing the request and close the connection, and the answer
	// would be cut short ("use of closed network connection", intermittently): the
	// request is read while the answer is written, as a proxy must allow.
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		g.log.Printf("full duplex: %v", err)
	}
	g.proxy.ServeHTTP(w, req)
	// The server ends a request's context only after ServeHTTP returns, so an ended
	// context here means the runtime's side went away during the answer: say why, as
	// the proxy then cuts the answer short.
	if err := context.Cause(req.Context()); err != nil {
		g.log.Printf("the runtime's request ended during the answer: %v", err)
	}
}

// close closes the gate's connections, which ends the calls being served, and waits for
// them to return.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	_ = g.srv.Close()
	g.calls.Wait()
}
