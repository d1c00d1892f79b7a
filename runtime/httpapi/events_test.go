package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// get opens a GET request and returns the response with its body unread.
func (e *env) get(t testing.TB, path string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// frames decodes an event stream to its end.
func frames(t testing.TB, r io.Reader) (events []sse.Event) {
	t.Helper()
	dec := sse.NewDecoder(r)
	for {
		ev, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return events
		}
		if err != nil {
			t.Fatalf("decode stream: %v", err)
		}
		events = append(events, ev)
	}
}

// envelopes decodes the data of frames and checks the frame fields against them.
func envelopes(t testing.TB, frs []sse.Event) []protocol.Event {
	t.Helper()
	out := make([]protocol.Event, len(frs))
	for i, fr := range frs {
		if strings.Contains(fr.Data, "\n") {
			t.Fatalf("frame %s: data spans several lines", fr.ID)
		}
		mustUnmarshal(t, fr.Data, &out[i])
		if fr.ID != strconv.FormatUint(out[i].Sequence, 10) || fr.Type != string(out[i].Type) {
			t.Fatalf("frame id %q event %q for envelope %d %s", fr.ID, fr.Type, out[i].Sequence, out[i].Type)
		}
	}
	return out
}

func sequences(evs []protocol.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Sequence
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func TestEventsReplayAndCursors(t *testing.T) {
	e := newEnv(t)
	e.setScript(reply("a", "b", "c", "d", "e", "f", "g", "h")) // 11 events
	id := e.submit(t, chat("cursor"))
	e.waitTerminal(t, id)
	stored, err := e.store.Read(context.Background(), id, 0, 0)
	if err != nil || len(stored) != 11 {
		t.Fatalf("stored %d events, %v", len(stored), err)
	}
	path := "/v1/executions/" + id + "/events"

	t.Run("full", func(t *testing.T) {
		resp := e.get(t, path, "Accept", "text/event-stream", "Accept-Encoding", "gzip")
		for h, want := range map[string]string{
			"Content-Type":      "text/event-stream",
			"Cache-Control":     "no-store",
			"X-Accel-Buffering": "no",
			"Content-Encoding":  "",
		} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("%s: %q, want %q", h, got, want)
			}
		}
		raw, _ := io.ReadAll(resp.Body)
		if !strings.HasPrefix(string(raw), "retry: 2000\n\n") {
			t.Errorf("stream starts with %q", raw[:min(len(raw), 20)])
		}
		frs := frames(t, strings.NewReader(string(raw)))
		got := envelopes(t, frs)
		if diff := cmp.Diff(stored, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("stream differs from the store (-store +stream):\n%s", diff)
		}
	})

	for _, tt := range []struct {
		name    string
		query   string
		headers []string
		from    uint64
	}{
		{"after", "?after=4", nil, 5},
		{"last event id", "", []string{"Last-Event-ID", "6"}, 7},
		{"both, header larger", "?after=4", []string{"Last-Event-ID", "6"}, 7},
		{"both, query larger", "?after=8", []string{"Last-Event-ID", "3"}, 9},
		{"zero", "?after=0", nil, 1},
		{"just before the end", "?after=10", nil, 11},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.get(t, path+tt.query, tt.headers...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			frs := frames(t, resp.Body)
			if diff := cmp.Diff(seqRange(tt.from, 11), sequences(envelopes(t, frs))); diff != "" {
				t.Errorf("sequences (-want +got):\n%s", diff)
			}
		})
	}

	for _, tt := range []struct {
		name    string
		query   string
		headers []string
	}{
		{"after the terminal event", "?after=11", nil},
		{"beyond the end", "?after=500", nil},
		{"last event id at the end", "", []string{"Last-Event-ID", "11"}},
		{"both, header at the end", "?after=2", []string{"Last-Event-ID", "11"}},
	} {
		t.Run("204 "+tt.name, func(t *testing.T) {
			resp := e.get(t, path+tt.query, tt.headers...)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
				t.Fatalf("status %d, body %q", resp.StatusCode, body)
			}
		})
	}

	t.Run("client sees 204 as a normal end", func(t *testing.T) {
		st, err := e.client.Events(context.Background(), id, 11)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if st.Next() || st.Err() != nil {
			t.Fatalf("Next after 204: err %v", st.Err())
		}
		if err := e.client.Follow(context.Background(), id, 11, func(protocol.Event) error { return errors.New("no event expected") }); err != nil {
			t.Fatalf("Follow after the end: %v", err)
		}
	})
}

func TestEventsBadCursor(t *testing.T) {
	e := newEnv(t)
	id := e.submit(t, chat("x"))
	for name, tt := range map[string]struct {
		query   string
		headers []string
	}{
		"letters":            {query: "?after=abc"},
		"negative":           {query: "?after=-1"},
		"fraction":           {query: "?after=1.5"},
		"empty":              {query: "?after="},
		"plus":               {query: "?after=%2B1"},
		"space":              {query: "?after=%201"},
		"hex":                {query: "?after=0x10"},
		"overflow":           {query: "?after=18446744073709551616"},
		"twice":              {query: "?after=1&after=2"},
		"bad last event id":  {headers: []string{"Last-Event-ID", "x"}},
		"two last event ids": {headers: []string{"Last-Event-ID", "1", "Last-Event-ID", "2"}},
		"good after, bad id": {query: "?after=1", headers: []string{"Last-Event-ID", "-1"}},
		"unknown execution":  {query: "?after=nope"},
	} {
		t.Run(name, func(t *testing.T) {
			path := "/v1/executions/" + id + "/events" + tt.query
			if name == "unknown execution" {
				path = "/v1/executions/exe_unknown/events" + tt.query
			}
			r := e.do(t, http.MethodGet, path, "", append([]string{"Accept", "text/event-stream"}, tt.headers...)...)
			wantError(t, r, http.StatusBadRequest, protocol.CodeInvalidRequest)
		})
	}
}

func TestEventsPolling(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("poll"))
	g.delta(t, "x")

	type page struct {
		Events    []protocol.Event `json:"events"`
		NextAfter uint64           `json:"next_after"`
		Terminal  bool             `json:"terminal"`
	}
	poll := func(after uint64, headers ...string) page {
		t.Helper()
		start := time.Now()
		r := e.do(t, http.MethodGet, fmt.Sprintf("/v1/executions/%s/events?after=%d", id, after), "",
			append([]string{"Accept", "application/json"}, headers...)...)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, type %q: %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatal("polling waited")
		}
		var p page
		mustUnmarshal(t, r.body, &p)
		if p.Events == nil {
			t.Fatalf("events is not an array: %s", r.body)
		}
		return p
	}

	p := poll(0)
	if diff := cmp.Diff([]uint64{1, 2, 3}, sequences(p.Events)); diff != "" || p.NextAfter != 3 || p.Terminal {
		t.Fatalf("running page: %+v %s", p, diff)
	}
	if p = poll(3); len(p.Events) != 0 || p.NextAfter != 3 || p.Terminal {
		t.Fatalf("caught-up page: %+v", p)
	}
	g.finish()
	e.waitTerminal(t, id)
	if p = poll(3); len(p.Events) != 1 || p.NextAfter != 4 || !p.Terminal {
		t.Fatalf("final page: %+v", p)
	}
	if p = poll(4); len(p.Events) != 0 || p.NextAfter != 4 || !p.Terminal {
		t.Fatalf("after the end: %+v", p)
	}
	// The polling form never answers 204, and honours Last-Event-ID too.
	if p = poll(0, "Last-Event-ID", "2"); len(p.Events) != 2 || p.NextAfter != 4 {
		t.Fatalf("with Last-Event-ID: %+v", p)
	}
}

func TestEventsLiveTailAndKeepAlive(t *testing.T) {
	e := newEnv(t, withAPI(func(c *httpapi.Config) { c.SSEKeepAlive = 30 * time.Millisecond }))
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("live"))

	resp := e.get(t, "/v1/executions/"+id+"/events")
	keepAlives := make(chan string, 100)
	dec := sse.NewDecoder(resp.Body, sse.WithComments(func(c string) {
		select {
		case keepAlives <- c:
		default:
		}
	}))
	next := func() protocol.Event {
		t.Helper()
		fr, err := dec.Next()
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		return envelopes(t, []sse.Event{fr})[0]
	}
	for want := uint64(1); want <= 2; want++ {
		if ev := next(); ev.Sequence != want {
			t.Fatalf("got %d, want %d", ev.Sequence, want)
		}
	}
	// Idle: keep-alive comments arrive while the decoder waits for the next frame.
	go func() {
		time.Sleep(150 * time.Millisecond)
		done := make(chan error, 1)
		select {
		case g.steps <- step{"late", done}:
			if err := <-done; err != nil {
				t.Error(err)
			}
		case <-time.After(waitTimeout):
			t.Error("the gated attempt is not running")
		}
	}()
	if ev := next(); ev.Type != protocol.EventOutputDelta {
		t.Fatalf("got %s", ev.Type)
	}
	if len(keepAlives) == 0 {
		t.Error("no keep-alive comment while idle")
	} else if c := <-keepAlives; c != "keep-alive" {
		t.Errorf("comment %q", c)
	}
	g.finish()
	if ev := next(); ev.Type != protocol.EventCompleted {
		t.Fatalf("got %s", ev.Type)
	}
	if _, err := dec.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream not closed after the terminal event: %v", err)
	}
}

func TestEventsDisconnectDoesNotCancel(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("stay"))

	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.client.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // two events: the stream is live
		if !st.Next() {
			t.Fatalf("stream: %v", st.Err())
		}
	}
	cancel()
	st.Close()

	g.delta(t, "still running")
	status, err := e.client.Get(context.Background(), id)
	if err != nil || status.Status != protocol.StatusRunning {
		t.Fatalf("after the subscriber left: %+v, %v", status, err)
	}
	g.finish()
	if snap := e.waitTerminal(t, id); snap.Status != protocol.StatusCompleted {
		t.Fatalf("final: %+v", snap)
	}
}

// killingListener cuts every response in the middle of its (k+1)-th event frame: it
// writes what precedes that frame and the start of the frame, then closes the
// connection, as a crashing proxy would.
type killingListener struct {
	net.Listener
	k     int
	kills atomic.Int64
}

func (l *killingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &killingConn{Conn: c, l: l}, nil
}

type killingConn struct {
	net.Conn
	l      *killingListener
	frames int
	dead   bool
}

func (c *killingConn) Write(p []byte) (int, error) {
	if c.dead {
		return 0, net.ErrClosed
	}
	// A kept-alive connection carries several responses; each gets k frames.
	if strings.HasPrefix(string(p), "HTTP/1.1 ") {
		c.frames = 0
	}
	// One Write may hold several frames (a batch is written at once): count them, and
	// cut inside the (k+1)-th, in its event line.
	for off := 0; ; {
		i := strings.Index(string(p[off:]), "\nevent: ")
		if i < 0 {
			break
		}
		c.frames++
		if c.frames > c.l.k {
			c.dead = true
			c.l.kills.Add(1)
			_, _ = c.Conn.Write(p[:off+i+len("\nevent: ")])
			c.Conn.Close()
			return 0, net.ErrClosed
		}
		off += i + 1
	}
	return c.Conn.Write(p)
}

// richScript emits every kind of output the snapshot folds, with short pauses so that
// followers tail it live as well as replay it.
func richScript(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	pct := 50.0
	steps := []func(engine.Emitter) error{
		func(em engine.Emitter) error {
			return em.Progress(protocol.ProgressData{Stage: protocol.StageRunning, Percent: &pct})
		},
		func(em engine.Emitter) error { return em.ToolStarted(1, "call_1", "get_weather") },
		func(em engine.Emitter) error { return em.ToolArgs("call_1", `{"city":`) },
		func(em engine.Emitter) error { return em.ToolArgs("call_1", `"Paris <&> ü"}`) },
	}
	for i := range 40 {
		steps = append(steps, func(em engine.Emitter) error {
			return em.Text(i%2*2, fmt.Sprintf("chunk %d <b>\u2028 ", i))
		})
	}
	steps = append(steps,
		func(em engine.Emitter) error {
			return em.Result(protocol.OutputResultData{Result: json.RawMessage(`{"answer":"<42>","list":[1,2.50]}`), Artifacts: []protocol.Artifact{{URI: "https://example.com/a.png", MediaType: "image/png"}}})
		},
		func(em engine.Emitter) error {
			return em.Usage([]protocol.Usage{{Unit: protocol.UnitInputTokens, Quantity: 12, Source: protocol.SourceProvider}, {Unit: protocol.UnitOutputTokens, Quantity: 40, Source: protocol.SourceProvider}})
		},
	)
	for i, st := range steps {
		if err := st(emit); err != nil {
			return engine.Outcome{}, err
		}
		if i%5 == 0 {
			select {
			case <-ctx.Done():
				return engine.Outcome{}, ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	return engine.Outcome{FinishReason: "stop"}, nil
}

// TestFollowResumesAcrossDisconnects cuts the stream every few frames; Follow must
// deliver every event exactly once, in order, and its snapshot must equal the server's.
func TestFollowResumesAcrossDisconnects(t *testing.T) {
	var kl *killingListener
	e := newEnv(t, withListener(func(l net.Listener) net.Listener {
		kl = &killingListener{Listener: l, k: 7}
		return kl
	}))
	e.setScript(richScript)
	id := e.submit(t, chat("resume"))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var seqs []uint64
	snap := protocol.NewSnapshot(id)
	err := e.client.Follow(ctx, id, 0, func(ev protocol.Event) error {
		seqs = append(seqs, ev.Sequence)
		return snap.Apply(ev)
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if diff := cmp.Diff(seqRange(1, uint64(len(seqs))), seqs); diff != "" || len(seqs) < 40 {
		t.Fatalf("delivered sequences are not 1..n exactly once (n=%d):\n%s", len(seqs), diff)
	}
	if kl.kills.Load() < 3 {
		t.Fatalf("only %d connections were cut", kl.kills.Load())
	}
	if snap.Status != protocol.StatusCompleted {
		t.Fatalf("snapshot status %s", snap.Status)
	}

	server, err := e.client.Result(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ignore := cmpopts.IgnoreUnexported(protocol.Snapshot{})
	if diff := cmp.Diff(server, &snap, ignore); diff != "" {
		t.Errorf("client snapshot differs from GET /result (-server +client):\n%s", diff)
	}
	followed, err := e.client.FollowResult(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(server, followed, ignore); diff != "" {
		t.Errorf("FollowResult differs from GET /result (-server +client):\n%s", diff)
	}
}

func TestStreamTruncation(t *testing.T) {
	e := newEnv(t, withListener(func(l net.Listener) net.Listener { return &killingListener{Listener: l, k: 3} }))
	e.setScript(reply("a", "b", "c", "d"))
	id := e.submit(t, chat("cut"))
	// The killing listener also cuts FollowResult's connections, which it survives.
	e.waitTerminal(t, id)

	st, err := e.client.Events(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for ev, err := range st.All() {
		if err != nil {
			var trunc *client.TruncatedError
			if !errors.As(err, &trunc) || trunc.LastSequence != 3 {
				t.Fatalf("stream error %v, want truncation after 3", err)
			}
			break
		}
		got = append(got, ev.Sequence)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3}, got); diff != "" {
		t.Fatalf("half a frame was delivered (-want +got):\n%s", diff)
	}
}

// TestStoreUnavailableIs503: while the store's database cannot be reached, reads and
// event streams are answered 503 provider_unavailable, retryable, so that a client
// (the Go client's Follow, an SDK) tries again rather than giving up; nothing of the
// store's error reaches it.
func TestStoreUnavailableIs503(t *testing.T) {
	e := newEnv(t)
	id := e.submit(t, chat("hello"))
	e.waitTerminal(t, id)
	e.store.unavailable.Store(true)
	defer e.store.unavailable.Store(false)
	for _, path := range []string{"/v1/executions/" + id, "/v1/executions/" + id + "/events", "/v1/executions/" + id + "/result"} {
		r := e.do(t, http.MethodGet, path, "")
		want := `{"error":{"code":"provider_unavailable","message":"the event store cannot be reached; retry later","retryable":true}}`
		if r.status != http.StatusServiceUnavailable || strings.TrimSpace(r.body) != want {
			t.Errorf("GET %s: %d %s, want 503 %s", path, r.status, r.body, want)
		}
	}
	e.store.unavailable.Store(false)
	if r := e.do(t, http.MethodGet, "/v1/executions/"+id, ""); r.status != http.StatusOK {
		t.Errorf("after the outage: %d %s", r.status, r.body)
	}
}

// TestEventsStoreFailureAfterHeaders: once the stream's head is out, a store failure
// ends the stream; no JSON and no internal text follow.
func TestEventsStoreFailureAfterHeaders(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("fail"))
	g.delta(t, "one")
	e.store.failTail.Store(true)
	defer e.store.failTail.Store(false)

	resp := e.get(t, "/v1/executions/"+id+"/events")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	frs := frames(t, strings.NewReader(string(raw)))
	if diff := cmp.Diff([]uint64{1, 2, 3}, sequences(envelopes(t, frs))); diff != "" {
		t.Errorf("first batch (-want +got):\n%s", diff)
	}
	for _, leak := range []string{`"error"`, "injected", "secret-internal", "internal"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("stream contains %q:\n%s", leak, raw)
		}
	}

	st, err := e.client.Events(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for st.Next() {
	}
	var trunc *client.TruncatedError
	if !errors.As(st.Err(), &trunc) || trunc.LastSequence != 3 {
		t.Fatalf("client: %v, want truncation after 3", st.Err())
	}
	e.store.failTail.Store(false)
	g.finish()
}

// TestSlowSubscriberDropped: one subscriber stops reading; it is dropped after the write
// timeout, while 100 others get every event and the producer never waits. Afterwards the
// goroutine count returns to where it was.
func TestSlowSubscriberDropped(t *testing.T) {
	const (
		// The timeout counts from the start of each write, so it also covers the time the
		// writer's goroutine waits to be scheduled. Under -race, with 200 busy goroutines on
		// two shared cores, that wait has been seen to pass 350ms; 1s keeps healthy
		// subscribers from being dropped for it, while a stalled one is dropped all the same.
		writeTimeout = time.Second
		subscribers  = 100
		// Each stream carries about 50 KiB: far more than the stalled reader's buffers.
		deltas    = 40
		deltaSize = 1 << 10
	)
	var stalledPorts sync.Map // remote ports of connections that must not buffer much
	stalledDone := make(chan time.Duration, 1)
	e := newEnv(t,
		withAPI(func(c *httpapi.Config) { c.SSEWriteTimeout = writeTimeout }),
		withHandler(func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Test-Stalled") == "" {
					h.ServeHTTP(w, r)
					return
				}
				start := time.Now()
				h.ServeHTTP(w, r)
				stalledDone <- time.Since(start)
			})
		}),
		withServerHook(func(srv *http.Server) {
			srv.ConnState = func(c net.Conn, s http.ConnState) {
				if s != http.StateActive {
					return
				}
				tc := c.(*net.TCPConn)
				if _, ok := stalledPorts.Load(c.RemoteAddr().(*net.TCPAddr).Port); ok {
					// A small send buffer makes the stall reach the server's writes soon.
					_ = tc.SetWriteBuffer(4 << 10)
					return
				}
				// A healthy subscriber's whole stream fits in its send buffer, so its
				// writes never wait, however long the scheduler leaves its reader idle
				// (it can be a while with 200 busy goroutines on two cores under -race).
				_ = tc.SetWriteBuffer(1 << 20)
			}
		}),
	)
	baseline := runtime.NumGoroutine()

	start := make(chan struct{})
	var emitMax atomic.Int64
	e.setScript(func(ctx context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		select {
		case <-start:
		case <-ctx.Done():
			return engine.Outcome{}, ctx.Err()
		}
		text := strings.Repeat("x", deltaSize)
		for range deltas {
			t0 := time.Now()
			if err := emit.Text(0, text); err != nil {
				return engine.Outcome{}, err
			}
			if d := int64(time.Since(t0)); d > emitMax.Load() {
				emitMax.Store(d)
			}
		}
		return engine.Outcome{FinishReason: "stop"}, nil
	})
	id := e.submit(t, chat("fan-out"))
	const total = deltas + 3 // accepted, route.selected, deltas, completed

	// The stalled subscriber: a raw connection with a tiny receive buffer that sends its
	// request and never reads.
	stalled, err := dialSmallWindow(e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	stalledPorts.Store(stalled.LocalAddr().(*net.TCPAddr).Port, true)
	fmt.Fprintf(stalled, "GET /v1/executions/%s/events HTTP/1.1\r\nHost: test\r\nX-Test-Stalled: 1\r\n\r\n", id)

	// The healthy subscribers read with their own connections, closed after the stream.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var (
		wg        sync.WaitGroup
		connected sync.WaitGroup
		complete  atomic.Int64
	)
	for range subscribers {
		wg.Add(1)
		connected.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get(e.srv.URL + "/v1/executions/" + id + "/events")
			connected.Done()
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			dec := sse.NewDecoder(resp.Body)
			var want uint64 = 1
			var last string
			for {
				fr, err := dec.Next()
				if err != nil {
					break
				}
				if fr.ID != strconv.FormatUint(want, 10) {
					t.Errorf("subscriber got event %s, want %d", fr.ID, want)
					return
				}
				want++
				last = fr.Type
			}
			if want-1 != total || last != string(protocol.EventCompleted) {
				t.Errorf("subscriber got %d events ending with %q", want-1, last)
				return
			}
			complete.Add(1)
		}()
	}
	connected.Wait()
	close(start)

	select {
	case d := <-stalledDone:
		if d < writeTimeout {
			t.Errorf("stalled subscriber dropped after %v, before the write timeout", d)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the stalled subscriber was never dropped")
	}
	wg.Wait()
	if n := complete.Load(); n != subscribers {
		t.Fatalf("%d of %d subscribers got every event", n, subscribers)
	}
	if m := time.Duration(emitMax.Load()); m >= writeTimeout {
		t.Errorf("an emit took %v: the producer waited for a reader", m)
	}

	// What the stalled subscriber can still read ends before the terminal event.
	_ = stalled.SetReadDeadline(time.Now().Add(waitTimeout))
	rest, _ := io.ReadAll(bufio.NewReader(stalled))
	if strings.Contains(string(rest), string(protocol.EventCompleted)) {
		t.Error("the stalled subscriber received the terminal event")
	}
	stalled.Close()

	e.srv.Client().CloseIdleConnections()
	waitGoroutines(t, baseline)
}

// waitGoroutines waits until the goroutine count is back to baseline: every stream
// handler and connection of the test has ended.
func waitGoroutines(t testing.TB, baseline int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), baseline, buf[:n])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGoroutinesReturnAfterSubscribersLeave(t *testing.T) {
	e := newEnv(t)
	g := newGate()
	e.setScript(g.script)
	baseline := runtime.NumGoroutine()
	id := e.submit(t, chat("leave"))

	tr := &http.Transport{DisableKeepAlives: true}
	c, err := client.New(e.srv.URL, client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	var streams []*client.Stream
	for range 50 {
		st, err := c.Events(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Next() {
			t.Fatal(st.Err())
		}
		streams = append(streams, st)
	}
	for _, st := range streams {
		st.Close() // subscribers leave while the execution runs
	}
	g.finish()
	e.waitTerminal(t, id)
	e.srv.Client().CloseIdleConnections()
	waitGoroutines(t, baseline)
}
