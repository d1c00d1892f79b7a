package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Several replicas of the built binary sharing one Redis or one PostgreSQL database
// (spec/events.md, "Ownership and orphans", "Shutdown", "Idempotency"; spec/postgres.md):
// a replica killed with SIGKILL or drained with SIGTERM leaves its executions to the
// others, which end each exactly once — or adopt its remote job — with no gap or
// duplicate in any sequence; idempotency keys hold across replicas and survive a creator
// that died. Each test runs on both stores (eachStore).
//
// Each test owns one Redis database (the orphan index is shared by every execution in a
// database) and empties it first, and one PostgreSQL database it creates. Leases are
// short so that takeovers happen within seconds.

const (
	// testLease is the replicas' --execution-lease: a dead replica's executions are
	// taken over after at most this plus a sweep interval (a third of it).
	testLease = 2 * time.Second
	// testCleanupGrace is the replicas' --cleanup-grace.
	testCleanupGrace = time.Second
	// takeoverSlack is what a takeover may take beyond lease and cleanup grace: the
	// sweep interval, process scheduling on a loaded machine, the follower's wake-up.
	takeoverSlack = 3 * time.Second
	// orphanedMessage is the fixed message of an execution whose replica stopped
	// (spec/events.md, "Ownership and orphans").
	orphanedMessage = "the runtime replica running this execution stopped"
)

// Redis databases, one per test.
const (
	dbShutdownRedis = 1 + iota
	dbKillMidStream
	dbAdopt
	dbAdoptCancelled
	dbAdoptTwice
	dbDeadline
	dbDrain
	dbIdempotency
	dbSweepers
	dbBenchKill
	dbStreamLinks
	dbBudgetLimit
	dbBudgetKill
)

// redisURL empties Redis database db and returns its URL. The server is the one of
// $SWITCHBOARD_REDIS_URL, else 127.0.0.1:6379.
func redisURL(tb testing.TB, db int) string {
	tb.Helper()
	base := os.Getenv("SWITCHBOARD_REDIS_URL")
	if base == "" {
		base = "redis://127.0.0.1:6379/0"
	}
	u, err := neturl.Parse(base)
	if err != nil {
		tb.Fatalf("SWITCHBOARD_REDIS_URL: %v", err)
	}
	u.Path = "/" + strconv.Itoa(db)
	opts, err := goredis.ParseURL(u.String())
	if err != nil {
		tb.Fatal(err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.FlushDB(ctx).Err(); err != nil {
		tb.Fatalf("empty Redis database %d at %s (these tests need Redis; set SWITCHBOARD_REDIS_URL): %v", db, opts.Addr, err)
	}
	return u.String()
}

// openRedisStore opens the store the replicas share, to inspect or prepare it.
func openRedisStore(tb testing.TB, url string) *redisstore.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := redisstore.New(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// demoProvider is a running demo provider.
type demoProvider struct {
	addr string
	out  *lockedBuffer
}

// startDemoProvider runs the demo provider with args added to its flags.
func startDemoProvider(tb testing.TB, args ...string) *demoProvider {
	tb.Helper()
	p := &demoProvider{addr: freeAddr(tb)}
	p.out = start(tb, "demoprovider", append([]string{"--addr", p.addr, "--api-key", e2eKey}, args...)...)
	eventually(tb, 10*time.Second, "demo provider", func() bool {
		return strings.Contains(p.out.String(), "listening on")
	})
	return p
}

// providerStats is the demo provider's GET /stats (hack/demoprovider/README.md, "Stats").
type providerStats struct {
	PredictionsCreated  int64 `json:"replicate_predictions_created"`
	PredictionsCanceled int64 `json:"replicate_predictions_canceled"`
	OpenAIRequests      int64 `json:"openai_requests"`
	AnthropicRequests   int64 `json:"anthropic_requests"`
}

func (p *demoProvider) stats(tb testing.TB) providerStats {
	tb.Helper()
	resp, err := http.Get("http://" + p.addr + "/stats")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var st providerStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /stats: %d, %v", resp.StatusCode, err)
	}
	return st
}

// replicaManifests adds to the end-to-end models a slowly streaming one (ability
// stream: one piece every --slow-delay) and one that answers at once with a single
// provider call (ability quick).
func replicaManifests(provider string) string {
	return manifests(provider) + fmt.Sprintf(`---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: streamer, namespace: e2e}
spec:
  provider: openai-compatible
  model: echo-slow
  endpoint: http://%[1]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [stream]
  capabilities: {streaming: true}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: quick, namespace: e2e}
spec:
  provider: openai-compatible
  model: echo
  endpoint: http://%[1]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [quick]
  capabilities: {streaming: true}
`, provider)
}

// manifestsDir writes the replicas' manifests for the provider at address provider
// into a new folder.
func manifestsDir(tb testing.TB, provider string) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "models.yaml"), []byte(replicaManifests(provider)), 0o600); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// replica is one running switchboard process on a shared store.
type replica struct {
	label      string
	api, probe string
	out        *lockedBuffer
	proc       *process
	client     *client.Client
}

// launchReplica starts a replica serving the manifests in dir on the store at url (a
// Redis URL, or a PostgreSQL one: see storeFlags), without waiting for it to be ready;
// args are added to its flags.
func launchReplica(tb testing.TB, label, dir, url string, args ...string) *replica {
	tb.Helper()
	r := &replica{label: label, api: freeAddr(tb), probe: freeAddr(tb)}
	flags := []string{"--manifests", dir, "--runtime-bind-address", r.api,
		"--health-probe-bind-address", r.probe, "--metrics-bind-address", "0",
		"--execution-lease", testLease.String(), "--cleanup-grace", testCleanupGrace.String(),
		"--shutdown-grace", "1s"}
	flags = append(flags, storeFlags(url)...)
	r.out, r.proc = startLabeled(tb, "switchboard "+label, "switchboard", append(flags, args...)...)
	c, err := client.New("http://" + r.api)
	if err != nil {
		tb.Fatal(err)
	}
	r.client = c
	return r
}

// startReplica is launchReplica and waitReady.
func startReplica(tb testing.TB, label, dir, url string, args ...string) *replica {
	tb.Helper()
	r := launchReplica(tb, label, dir, url, args...)
	r.waitReady(tb)
	return r
}

func (r *replica) waitReady(tb testing.TB) {
	tb.Helper()
	eventually(tb, 15*time.Second, "switchboard "+r.label+" /readyz", func() bool {
		return r.readyz() == http.StatusOK
	})
}

// readyz returns the status of GET /readyz, 0 if it cannot be reached.
func (r *replica) readyz() int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + r.probe + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// kill ends the replica with SIGKILL: no drain, no handover, leases left to expire.
func (r *replica) kill(tb testing.TB) {
	tb.Helper()
	if err := r.proc.cmd.Process.Kill(); err != nil {
		tb.Fatal(err)
	}
	r.proc.Wait(tb, 5*time.Second)
}

// logLines counts the lines of the replica's log holding msg.
func (r *replica) logLines(msg string) int {
	return strings.Count(r.out.String(), msg)
}

// readRaw reads execution id's event stream from api with nothing but net/http and
// bufio, as any SSE consumer would, until the terminal event; it checks each frame's id
// against its event's sequence and leaves every other check to the caller.
func readRaw(ctx context.Context, api, id string) ([]protocol.Event, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+api+"/v1/executions/"+id+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET events: status %d", resp.StatusCode)
	}
	var (
		events       []protocol.Event
		frameID      string
		data         []string
		sc           = bufio.NewScanner(resp.Body)
		maxLineBytes = protocol.MaxEventBytes + 64<<10
	)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if len(data) == 0 {
				frameID = ""
				continue // a comment-only or retry-only frame
			}
			var ev protocol.Event
			if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &ev); err != nil {
				return events, fmt.Errorf("frame after %d events: %w", len(events), err)
			}
			if frameID != strconv.FormatUint(ev.Sequence, 10) {
				return events, fmt.Errorf("frame id %q for the event with sequence %d", frameID, ev.Sequence)
			}
			events = append(events, ev)
			if ev.Type.Terminal() {
				return events, nil
			}
			frameID, data = "", nil
		case field == "id":
			frameID = value
		case field == "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return events, fmt.Errorf("stream cut after %d events: %w", len(events), err)
	}
	return events, fmt.Errorf("stream ended after %d events without a terminal event", len(events))
}

// checkLog checks that events are a whole execution log: sequences 1, 2, … without gap
// or duplicate, exactly one terminal event, and it last.
func checkLog(tb testing.TB, what string, events []protocol.Event) {
	tb.Helper()
	if len(events) == 0 {
		tb.Errorf("%s: no events", what)
		return
	}
	for i, ev := range events {
		if ev.Sequence != uint64(i+1) {
			tb.Errorf("%s: event %d has sequence %d (%s): a gap or a duplicate", what, i+1, ev.Sequence, strings.Join(types(events), " "))
			return
		}
		if ev.Type.Terminal() && i != len(events)-1 {
			tb.Errorf("%s: terminal event %s at sequence %d, before the end (%s)", what, ev.Type, ev.Sequence, strings.Join(types(events), " "))
		}
	}
	if last := events[len(events)-1]; !last.Type.Terminal() {
		tb.Errorf("%s: the log ends on %s, not on a terminal event", what, last.Type)
	}
}

// failure returns the error of an execution.failed event; nil, with a test error, for
// any other event.
func failure(tb testing.TB, what string, ev protocol.Event) *protocol.Error {
	tb.Helper()
	var data protocol.FailedData
	if ev.Type != protocol.EventFailed || json.Unmarshal(ev.Data, &data) != nil || data.Error == nil {
		tb.Errorf("%s: last event %s %s, want execution.failed", what, ev.Type, ev.Data)
		return nil
	}
	return data.Error
}

// checkOrphaned checks the error of an execution whose replica stopped with it.
func checkOrphaned(tb testing.TB, what string, e *protocol.Error) {
	tb.Helper()
	if e == nil || e.Code != protocol.CodeInternal || e.Retryable || e.Message != orphanedMessage {
		tb.Errorf("%s: error %+v, want internal, not retryable, %q", what, e, orphanedMessage)
	}
}

// waitTerminal polls GET on c until every execution in ids is completed or failed and
// returns their statuses.
func waitTerminal(tb testing.TB, c *client.Client, ids []string, timeout time.Duration) map[string]*protocol.ExecutionStatus {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make(map[string]*protocol.ExecutionStatus, len(ids))
	eventually(tb, timeout, fmt.Sprintf("%d executions to end", len(ids)), func() bool {
		for _, id := range ids {
			if out[id] != nil {
				continue
			}
			st, err := c.Get(ctx, id)
			if err != nil {
				tb.Fatalf("GET %s: %v", id, err)
			}
			if st.Status == protocol.StatusCompleted || st.Status == protocol.StatusFailed {
				out[id] = st
			}
		}
		return len(out) == len(ids)
	})
	return out
}

// followed is what a follower saw: its events, its error and when it returned.
type followed struct {
	events []protocol.Event
	err    error
	at     time.Time
}

// followAsync follows execution id on r with the Go client from its first event; onEvent,
// if not nil, sees each event as it arrives.
func followAsync(ctx context.Context, r *replica, id string, onEvent func(protocol.Event)) <-chan followed {
	ch := make(chan followed, 1)
	go func() {
		var f followed
		f.err = r.client.Follow(ctx, id, 0, func(ev protocol.Event) error {
			f.events = append(f.events, ev)
			if onEvent != nil {
				onEvent(ev)
			}
			return nil
		})
		f.at = time.Now()
		ch <- f
	}()
	return ch
}

// rawAsync is followAsync with readRaw.
func rawAsync(ctx context.Context, r *replica, id string) <-chan followed {
	ch := make(chan followed, 1)
	go func() {
		events, err := readRaw(ctx, r.api, id)
		ch <- followed{events: events, err: err, at: time.Now()}
	}()
	return ch
}

// receive waits for a follower's outcome for at most timeout.
func receive(tb testing.TB, what string, ch <-chan followed, timeout time.Duration) followed {
	tb.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(timeout):
		tb.Fatalf("%s: no terminal event within %s", what, timeout)
		return followed{}
	}
}

// longText is a prompt the slow streaming model streams in as many pieces as the
// provider's --chunks allows.
var longText = strings.Repeat("abcdefghij", 4)

func TestKillMidStreamEndsExecutionOnSurvivor(t *testing.T) {
	eachStore(t, dbKillMidStream, func(t *testing.T, shared sharedStore) {
		provider := startDemoProvider(t, "--chunks", "40", "--slow-delay", "250ms") // 10 s of stream
		dir := manifestsDir(t, provider.addr)
		a := startReplica(t, "A", dir, shared.url)
		b := startReplica(t, "B", dir, shared.url)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		acc, err := a.client.Submit(ctx, textRequest("stream", longText))
		if err != nil {
			t.Fatal(err)
		}
		var deltas atomic.Int32
		viaClient := followAsync(ctx, b, acc.ID, func(ev protocol.Event) {
			if ev.Type == protocol.EventOutputDelta {
				deltas.Add(1)
			}
		})
		viaRaw := rawAsync(ctx, b, acc.ID)
		eventually(t, 10*time.Second, "output on B's follower", func() bool { return deltas.Load() >= 3 })

		a.kill(t)
		killed := time.Now()
		limit := testLease + testCleanupGrace + takeoverSlack
		var logs [][]protocol.Event
		for what, ch := range map[string]<-chan followed{"client Follow on B": viaClient, "raw SSE on B": viaRaw} {
			f := receive(t, what, ch, limit+5*time.Second)
			if f.err != nil {
				t.Errorf("%s returned %v after %d events", what, f.err, len(f.events))
				continue
			}
			took := f.at.Sub(killed)
			t.Logf("%s: terminal event %s after the kill", what, took.Round(time.Millisecond))
			if took > limit {
				t.Errorf("%s: terminal event %s after the kill, want within lease + cleanup grace (+%s)", what, took, takeoverSlack)
			}
			checkLog(t, what, f.events)
			checkOrphaned(t, what, failure(t, what, f.events[len(f.events)-1]))
			if n := slices.IndexFunc(f.events, func(ev protocol.Event) bool { return ev.Type == protocol.EventOutputDelta }); n < 0 {
				t.Errorf("%s: no output before the kill", what)
			}
			logs = append(logs, f.events)
		}
		if len(logs) == 2 && !slices.Equal(types(logs[0]), types(logs[1])) {
			t.Errorf("the two followers saw different logs:\n%s\n%s", strings.Join(types(logs[0]), " "), strings.Join(types(logs[1]), " "))
		}

		restarted := startReplica(t, "A restarted", dir, shared.url)
		for _, r := range []*replica{b, restarted} {
			st, err := r.client.Get(ctx, acc.ID)
			if err != nil {
				t.Fatalf("GET on %s: %v", r.label, err)
			}
			if st.Status != protocol.StatusFailed {
				t.Errorf("GET on %s: status %s, want failed", r.label, st.Status)
			}
			checkOrphaned(t, "GET on "+r.label, st.Error)
		}
	})
}

// waitRemoteJob waits until the execution's remote job handle is in the store: from
// then on a replica taking it over can adopt it.
func waitRemoteJob(tb testing.TB, store eventstore.Reader, id string) {
	tb.Helper()
	eventually(tb, 10*time.Second, "the remote job's handle in the store", func() bool {
		st, err := store.Get(context.Background(), id)
		return err == nil && len(st.Remote) > 0
	})
}

func TestAdoptRemoteJobAfterKill(t *testing.T) {
	t.Run("the survivor completes the job", func(t *testing.T) {
		eachStore(t, dbAdopt, func(t *testing.T, shared sharedStore) {
			store := shared.open(t)
			provider := startDemoProvider(t, "--job-duration", "1s") // painter-slow: 5 s
			dir := manifestsDir(t, provider.addr)
			a := startReplica(t, "A", dir, shared.url)
			b := startReplica(t, "B", dir, shared.url)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			acc, err := a.client.Submit(ctx, textRequest("text-to-image", "a lighthouse"))
			if err != nil {
				t.Fatal(err)
			}
			waitRemoteJob(t, store, acc.ID)
			a.kill(t)

			f := receive(t, "Follow on B", followAsync(ctx, b, acc.ID, nil), 20*time.Second)
			if f.err != nil {
				t.Fatalf("Follow on B: %v", f.err)
			}
			checkLog(t, "Follow on B", f.events)
			if last := f.events[len(f.events)-1]; last.Type != protocol.EventCompleted {
				t.Errorf("the adopted execution ended with %s %s, want execution.completed", last.Type, last.Data)
			}
			results := 0
			for _, ev := range f.events {
				if ev.Type == protocol.EventOutputResult {
					results++
				}
			}
			if results != 1 {
				t.Errorf("%d output.result events, want 1: %s", results, strings.Join(types(f.events), " "))
			}
			snap, err := b.client.Result(ctx, acc.ID)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != protocol.StatusCompleted || len(snap.Result) == 0 || len(snap.Artifacts) == 0 {
				t.Errorf("GET /result on B: %+v, want completed with a result and artifacts", snap)
			}
			if b.logLines("Adopting an orphaned execution's remote job") != 1 {
				t.Errorf("B did not log the adoption")
			}
			if st := provider.stats(t); st.PredictionsCreated != 1 || st.PredictionsCanceled != 0 {
				t.Errorf("provider stats %+v, want one prediction created and none canceled", st)
			}
		})
	})

	t.Run("an adopter killed in turn leaves the job to the next", func(t *testing.T) {
		eachStore(t, dbAdoptTwice, func(t *testing.T, shared sharedStore) {
			store := shared.open(t)
			provider := startDemoProvider(t, "--job-duration", "1s")
			dir := manifestsDir(t, provider.addr)
			a := startReplica(t, "A", dir, shared.url)
			b := startReplica(t, "B", dir, shared.url)
			c := startReplica(t, "C", dir, shared.url)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			acc, err := a.client.Submit(ctx, textRequest("text-to-image", "a lighthouse"))
			if err != nil {
				t.Fatal(err)
			}
			waitRemoteJob(t, store, acc.ID)
			a.kill(t)
			adopter, survivor := b, c
			eventually(t, testLease+takeoverSlack, "an adoption", func() bool {
				if c.logLines("Adopting an orphaned execution's remote job") > 0 {
					adopter, survivor = c, b
				}
				return adopter.logLines("Adopting an orphaned execution's remote job") > 0
			})
			adopter.kill(t)

			f := receive(t, "Follow on "+survivor.label, followAsync(ctx, survivor, acc.ID, nil), 20*time.Second)
			if f.err != nil {
				t.Fatalf("Follow on %s: %v", survivor.label, f.err)
			}
			checkLog(t, "Follow on "+survivor.label, f.events)
			if last := f.events[len(f.events)-1]; last.Type != protocol.EventCompleted {
				t.Errorf("the execution adopted twice ended with %s %s, want execution.completed", last.Type, last.Data)
			}
			if n := survivor.logLines("Adopting an orphaned execution's remote job"); n != 1 {
				t.Errorf("%s adopted %d remote jobs, want 1", survivor.label, n)
			}
			if st := provider.stats(t); st.PredictionsCreated != 1 || st.PredictionsCanceled != 0 {
				t.Errorf("provider stats %+v, want one prediction created and none canceled", st)
			}
		})
	})

	t.Run("a cancel requested before the takeover cancels the job", func(t *testing.T) {
		eachStore(t, dbAdoptCancelled, func(t *testing.T, shared sharedStore) {
			store := shared.open(t)
			provider := startDemoProvider(t, "--job-duration", "1s")
			dir := manifestsDir(t, provider.addr)
			a := startReplica(t, "A", dir, shared.url)
			b := startReplica(t, "B", dir, shared.url)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			acc, err := a.client.Submit(ctx, textRequest("text-to-image", "a lighthouse"))
			if err != nil {
				t.Fatal(err)
			}
			waitRemoteJob(t, store, acc.ID)
			a.kill(t)
			if _, err := b.client.Cancel(ctx, acc.ID); err != nil {
				t.Fatal(err)
			}
			// The cancel must come before B took the execution over, while A's lease (the
			// first) still stands.
			if st, err := store.Get(ctx, acc.ID); err != nil || st.Lease.Fence != eventstore.FirstFence || st.Terminal {
				t.Fatalf("after the cancel: lease %+v, terminal %v, %v; want A's lease, not taken over yet", st.Lease, st.Terminal, err)
			}

			f := receive(t, "Follow on B", followAsync(ctx, b, acc.ID, nil), 20*time.Second)
			if f.err != nil {
				t.Fatalf("Follow on B: %v", f.err)
			}
			checkLog(t, "Follow on B", f.events)
			if e := failure(t, "Follow on B", f.events[len(f.events)-1]); e != nil && e.Code != protocol.CodeCancelled {
				t.Errorf("the execution ended with %+v, want cancelled", e)
			}
			eventually(t, 5*time.Second, "the remote job canceled at the provider", func() bool {
				return provider.stats(t).PredictionsCanceled == 1
			})
			if st := provider.stats(t); st.PredictionsCreated != 1 {
				t.Errorf("provider stats %+v, want one prediction created", st)
			}
		})
	})
}

func TestDeadlinePassesAfterRunnerKilled(t *testing.T) {
	eachStore(t, dbDeadline, func(t *testing.T, shared sharedStore) {
		provider := startDemoProvider(t)
		dir := manifestsDir(t, provider.addr)
		a := startReplica(t, "A", dir, shared.url)
		b := startReplica(t, "B", dir, shared.url)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		// The deadline passes before A's lease can expire: the lease outlives a kill by at
		// least two thirds of its length.
		req := textRequest("stall", "never finishes")
		deadline := int64(testLease / 2 / time.Millisecond)
		req.DeadlineMs = &deadline
		acc, err := a.client.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the stalled execution's output", func() bool {
			st, err := b.client.Get(ctx, acc.ID)
			return err == nil && st.LastSequence >= 3 // accepted, route.selected, output.delta
		})
		a.kill(t)

		f := receive(t, "Follow on B", followAsync(ctx, b, acc.ID, nil), testLease+testCleanupGrace+takeoverSlack)
		if f.err != nil {
			t.Fatalf("Follow on B: %v", f.err)
		}
		checkLog(t, "Follow on B", f.events)
		if e := failure(t, "Follow on B", f.events[len(f.events)-1]); e != nil && e.Code != protocol.CodeDeadlineExceeded {
			t.Errorf("the execution ended with %+v, want deadline_exceeded", e)
		}
	})
}

// posted is the answer to a POST /v1/executions.
type posted struct {
	status int
	header http.Header
	body   []byte
	err    *protocol.Error // the error body's error, for a status >= 400
}

// postJSON posts body to the API at api. It may run on any goroutine: it returns
// failures instead of failing the test.
func postJSON(api, body string, header http.Header) (posted, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+api+"/v1/executions", strings.NewReader(body))
	if err != nil {
		return posted{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return posted{}, err
	}
	defer resp.Body.Close()
	p := posted{status: resp.StatusCode, header: resp.Header}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return p, err
	}
	p.body = buf.Bytes()
	if p.status >= 400 {
		var eb protocol.ErrorBody
		if err := json.Unmarshal(p.body, &eb); err != nil || eb.Error == nil {
			return p, fmt.Errorf("status %d without a JSON error body: %s", p.status, p.body)
		}
		p.err = eb.Error
	}
	return p, nil
}

func TestDrainHandsStalledExecutionsToPeer(t *testing.T) {
	eachStore(t, dbDrain, func(t *testing.T, shared sharedStore) {
		store := shared.open(t)
		// A stream takes 2 s, within the grace; a painter-slow job 5 s, beyond it.
		provider := startDemoProvider(t, "--chunks", "5", "--slow-delay", "400ms", "--job-duration", "1s")
		dir := manifestsDir(t, provider.addr)
		const grace = 3 * time.Second
		a := startReplica(t, "A", dir, shared.url, "--shutdown-grace", grace.String())
		b := startReplica(t, "B", dir, shared.url)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		var short, stalled []string
		for i := range 20 {
			ability, text, ids := "stream", "short and sweet", &short
			if i%2 == 1 {
				ability, text, ids = "stall", "never finishes", &stalled
			}
			acc, err := a.client.Submit(ctx, textRequest(ability, text))
			if err != nil {
				t.Fatal(err)
			}
			*ids = append(*ids, acc.ID)
		}
		// And a remote job that outlasts the grace: handed over, B adopts it.
		job, err := a.client.Submit(ctx, textRequest("text-to-image", "a lighthouse"))
		if err != nil {
			t.Fatal(err)
		}
		all := append(slices.Concat(short, stalled), job.ID)
		eventually(t, 10*time.Second, "every stream running with output", func() bool {
			for _, id := range slices.Concat(short, stalled) {
				st, err := store.Get(ctx, id)
				if err != nil || st.LastSequence < 3 {
					return false
				}
			}
			return true
		})
		waitRemoteJob(t, store, job.ID)

		// A key used before the drain, to be replayed during it.
		keyedBody := `{"ability":"quick","input":[{"type":"text","text":"before the drain"}]}`
		keyed := postIdempotent(a.api, "before-drain", keyedBody)
		if keyed.failed != nil || keyed.status != http.StatusAccepted {
			t.Fatalf("POST with a key: %d %+v %v", keyed.status, keyed.err, keyed.failed)
		}

		// Followers on A itself: its event streams stay open while it drains.
		shortOnA, stalledOnA := rawAsync(ctx, a, short[0]), rawAsync(ctx, a, stalled[0])

		if err := a.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		signalled := time.Now()
		for a.readyz() == http.StatusOK {
			if time.Since(signalled) > 200*time.Millisecond {
				t.Fatal("A's /readyz still answered 200 200ms after SIGTERM")
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("A unready %s after SIGTERM", time.Since(signalled).Round(time.Millisecond))
		body := `{"ability":"quick","input":[{"type":"text","text":"too late"}]}`
		p, err := postJSON(a.api, body, nil)
		if err != nil {
			t.Fatalf("POST to the draining A: %v", err)
		}
		if p.status != http.StatusServiceUnavailable || p.err == nil || p.err.Code != protocol.CodeProviderUnavailable || !p.err.Retryable {
			t.Errorf("POST to the draining A: %d %+v, want 503 provider_unavailable, retryable", p.status, p.err)
		}
		t.Logf("POST to the draining A: %d, Retry-After %q", p.status, p.header.Get("Retry-After"))
		// Reads and replays are still served: idempotency answers before anything is created
		// (spec/http-api.md, "Idempotency").
		if replay := postIdempotent(a.api, "before-drain", keyedBody); replay.failed != nil || replay.status != http.StatusAccepted || !replay.replayed || replay.id != keyed.id {
			t.Errorf("replay on the draining A: %d, replayed %v, id %s, %+v %v; want a 202 replay of %s", replay.status, replay.replayed, replay.id, replay.err, replay.failed, keyed.id)
		}
		if st, err := a.client.Get(ctx, stalled[0]); err != nil || st.Status != protocol.StatusRunning {
			t.Errorf("GET on the draining A: %+v, %v; want running", st, err)
		}

		a.proc.Wait(t, grace+5*time.Second)
		t.Logf("A exited %s after SIGTERM", time.Since(signalled).Round(time.Millisecond))
		if f := receive(t, "short execution followed on A", shortOnA, time.Second); f.err != nil || f.events[len(f.events)-1].Type != protocol.EventCompleted {
			t.Errorf("the stream of a short execution on the draining A: %s, %v; want it to end with execution.completed", strings.Join(types(f.events), " "), f.err)
		}
		// A handed the stalled execution over: its stream on A ends with A, cut.
		if f := receive(t, "stalled execution followed on A", stalledOnA, time.Second); f.err == nil {
			t.Errorf("the stream of a stalled execution on A ended normally (%s), want it cut when A exited", strings.Join(types(f.events), " "))
		}

		final := waitTerminal(t, b.client, all, 10*time.Second)
		for _, id := range short {
			if st := final[id]; st.Status != protocol.StatusCompleted {
				t.Errorf("short execution %s: %s %+v, want completed within the grace", id, st.Status, st.Error)
			}
		}
		for _, id := range stalled {
			checkOrphaned(t, "stalled execution "+id, final[id].Error)
			// Ended by B: under a lease taken after A's.
			if st, err := store.Get(ctx, id); err != nil || st.Lease.Fence <= eventstore.FirstFence {
				t.Errorf("stalled execution %s ended under lease %+v (%v), want one B acquired", id, st.Lease, err)
			}
		}
		if n := b.logLines("Ending an orphaned execution"); n != len(stalled) {
			t.Errorf("B ended %d orphans, want %d", n, len(stalled))
		}
		if st := final[job.ID]; st.Status != protocol.StatusCompleted {
			t.Errorf("handed-over remote job: %s %+v, want completed by B", st.Status, st.Error)
		}
		if n := b.logLines("Adopting an orphaned execution's remote job"); n != 1 {
			t.Errorf("B adopted %d remote jobs, want 1", n)
		}
		if st := provider.stats(t); st.PredictionsCreated != 1 || st.PredictionsCanceled != 0 {
			t.Errorf("provider stats %+v, want the handed-over prediction created once and not canceled", st)
		}
	})
}

// idempotentPost is what one POST with an Idempotency-Key got.
type idempotentPost struct {
	status   int
	id       string
	replayed bool
	err      *protocol.Error
	failed   error // the POST itself failed
}

// postIdempotent posts body with key to api; like postJSON it may run on any goroutine.
func postIdempotent(api, key, body string) idempotentPost {
	p, err := postJSON(api, body, http.Header{"Idempotency-Key": {key}})
	if err != nil {
		return idempotentPost{failed: err}
	}
	ip := idempotentPost{status: p.status, replayed: p.header.Get("Idempotent-Replayed") == "true", err: p.err}
	if p.status == http.StatusAccepted {
		var acc struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(p.body, &acc); err != nil {
			ip.failed = fmt.Errorf("202 body %s: %w", p.body, err)
		} else if acc.ID == "" {
			ip.failed = fmt.Errorf("202 body %s without an id", p.body)
		}
		ip.id = acc.ID
	}
	return ip
}

// reserve writes a reservation for key and body straight into the store, as a replica
// that died right after reserving would have left it (spec/http-api.md, "Idempotency").
func reserve(t *testing.T, store eventstore.Reservations, key, body string, createdAt time.Time) string {
	t.Helper()
	fp, err := protocol.Fingerprint([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	id := engine.NewExecutionID()
	r := eventstore.Reservation{Fingerprint: fp, ExecutionID: id, CreatedAt: createdAt,
		Response: json.RawMessage(`{"id":"` + id + `","status":"accepted"}`)}
	// The runtime's scope: no authentication (runtime/httpapi idempotencyScope).
	if _, ok, err := store.Reserve(context.Background(), "runtime "+key, r, 24*time.Hour, 0); err != nil || !ok {
		t.Fatalf("reserve %s: %v, %v", key, ok, err)
	}
	return id
}

func TestIdempotencyAcrossReplicas(t *testing.T) {
	eachStore(t, dbIdempotency, func(t *testing.T, shared sharedStore) {
		store := shared.open(t)
		provider := startDemoProvider(t)
		dir := manifestsDir(t, provider.addr)
		// A lease longer than a duplicate waits for its reservation's outcome, so that a
		// young reservation is still young when the wait ends.
		const lease = "15s"
		replicas := []*replica{
			startReplica(t, "A", dir, shared.url, "--execution-lease", lease),
			startReplica(t, "B", dir, shared.url, "--execution-lease", lease),
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		// A reservation made just now whose execution does not exist (yet): its creator may
		// be between Reserve and Create, so a duplicate waits, then gets 409, retryable.
		// This takes the runtime's replay wait (10 s), so it runs alongside the rest.
		youngBody := `{"ability":"quick","input":[{"type":"text","text":"young"}]}`
		reserve(t, store, "young", youngBody, time.Now())
		young := make(chan idempotentPost, 1)
		go func() { young <- postIdempotent(replicas[0].api, "young", youngBody) }()

		t.Run("concurrent duplicates on two replicas create one execution", func(t *testing.T) {
			before := provider.stats(t)
			body := `{"ability":"quick","input":[{"type":"text","text":"exactly once"}]}`
			posts := make([]idempotentPost, 50)
			var wg sync.WaitGroup
			for i := range posts {
				wg.Go(func() { posts[i] = postIdempotent(replicas[i%2].api, "fifty", body) })
			}
			wg.Wait()
			ids := map[string]int{}
			replays := 0
			for i, p := range posts {
				if p.failed != nil || p.status != http.StatusAccepted {
					t.Errorf("POST %d on %s: %d %+v %v, want 202", i, replicas[i%2].label, p.status, p.err, p.failed)
					continue
				}
				ids[p.id]++
				if p.replayed {
					replays++
				}
			}
			if len(ids) != 1 || replays != len(posts)-1 {
				t.Fatalf("execution ids %v, %d replays: want one id and %d replays", ids, replays, len(posts)-1)
			}
			for id := range ids {
				f := receive(t, "Follow", followAsync(ctx, replicas[1], id, nil), 10*time.Second)
				if f.err != nil || f.events[len(f.events)-1].Type != protocol.EventCompleted {
					t.Errorf("the execution ended %v, %v", types(f.events), f.err)
				}
			}
			if after := provider.stats(t); after.OpenAIRequests-before.OpenAIRequests != 1 {
				t.Errorf("%d provider calls, want 1", after.OpenAIRequests-before.OpenAIRequests)
			}
		})

		t.Run("a reservation left by a dead creator is released after the lease", func(t *testing.T) {
			body := `{"ability":"quick","input":[{"type":"text","text":"orphaned key"}]}`
			dead := reserve(t, store, "orphaned", body, time.Now().Add(-time.Minute))
			p := postIdempotent(replicas[1].api, "orphaned", body)
			if p.failed != nil || p.status != http.StatusAccepted || p.replayed || p.id == dead {
				t.Fatalf("POST: %d, replayed %v, id %s (dead creator's %s), %+v; want 202 for a new execution", p.status, p.replayed, p.id, dead, p.err)
			}
			again := postIdempotent(replicas[0].api, "orphaned", body)
			if again.status != http.StatusAccepted || !again.replayed || again.id != p.id {
				t.Errorf("second POST: %d, replayed %v, id %s; want a replay of %s", again.status, again.replayed, again.id, p.id)
			}
		})

		select {
		case p := <-young:
			if p.failed != nil || p.status != http.StatusConflict || p.err == nil || p.err.Code != protocol.CodeConflict || !p.err.Retryable {
				t.Errorf("POST with a young reservation: %d %+v %v, want 409 conflict, retryable", p.status, p.err, p.failed)
			}
		case <-time.After(20 * time.Second):
			t.Error("POST with a young reservation: no answer within 20s")
		}
	})
}

func TestRacingSweepersEndEachOrphanOnce(t *testing.T) {
	eachStore(t, dbSweepers, func(t *testing.T, shared sharedStore) {
		store := shared.open(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		// Executions as a replica that died at once would leave them: created, accepted,
		// leased to nobody alive.
		const orphans = 100
		now := time.Now().UTC().Truncate(time.Microsecond)
		ids := make([]string, orphans)
		for i := range ids {
			id := engine.NewExecutionID()
			ids[i] = id
			info, err := json.Marshal(engine.Info{Ability: "chat", DeadlineAt: now.Add(10 * time.Minute), CreatedAt: now})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Create(ctx, eventstore.Record{ID: id, CreatedAt: now, Info: info}, "dead", time.Millisecond); err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(protocol.AcceptedData{Ability: "chat", DeadlineAt: now.Add(10 * time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			ev := protocol.Event{ExecutionID: id, Sequence: 1, Timestamp: now, Type: protocol.EventAccepted, Data: data}
			if err := store.Append(ctx, eventstore.FirstFence, ev); err != nil {
				t.Fatal(err)
			}
		}

		// No provider is needed: nothing runs. All three start together to race.
		dir := manifestsDir(t, freeAddr(t))
		var replicas []*replica
		for _, label := range []string{"A", "B", "C"} {
			replicas = append(replicas, launchReplica(t, label, dir, shared.url))
		}
		for _, r := range replicas {
			r.waitReady(t)
		}
		eventually(t, 20*time.Second, "every orphan to end", func() bool {
			for _, id := range ids {
				st, err := store.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if !st.Terminal {
					return false
				}
			}
			return true
		})
		// Another round of sweeps, which must find nothing to end.
		time.Sleep(testLease / 3 * 2)

		terminals := 0
		for _, id := range ids {
			events, err := store.Read(ctx, id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkLog(t, id, events)
			for _, ev := range events {
				if ev.Type.Terminal() {
					terminals++
				}
			}
			checkOrphaned(t, id, failure(t, id, events[len(events)-1]))
		}
		if terminals != orphans {
			t.Errorf("%d terminal events for %d orphans", terminals, orphans)
		}
		ended := 0
		for _, r := range replicas {
			n := r.logLines("Ending an orphaned execution")
			t.Logf("replica %s ended %d orphans", r.label, n)
			ended += n
		}
		if ended != orphans {
			t.Errorf("the replicas logged %d orphans ended, want %d", ended, orphans)
		}
	})
}

// BenchmarkKillToTerminal measures how long after a replica's SIGKILL a follower on a
// surviving replica sees the terminal event of the stream it ran, with the test lease
// (the contract's bound: lease + cleanup grace). It reports the 50th and 99th
// percentiles over 20 kills per iteration (with 20 kills, the 99th is the slowest).
func BenchmarkKillToTerminal(b *testing.B) {
	url := redisURL(b, dbBenchKill)
	provider := startDemoProvider(b, "--chunks", "40", "--slow-delay", "250ms")
	dir := manifestsDir(b, provider.addr)
	survivor := startReplica(b, "survivor", dir, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	const kills = 20
	var took []time.Duration
	for i := range b.N * kills {
		victim := startReplica(b, fmt.Sprintf("victim %d", i), dir, url)
		// The victim renews its lease, and the survivor sweeps, every third of the
		// lease, each from its own start: without random pauses this loop would lock
		// the two cycles' phases and measure one point of the distribution.
		time.Sleep(rand.N(testLease / 3))
		acc, err := victim.client.Submit(ctx, textRequest("stream", longText))
		if err != nil {
			b.Fatal(err)
		}
		var output atomic.Bool
		ch := followAsync(ctx, survivor, acc.ID, func(ev protocol.Event) {
			if ev.Type == protocol.EventOutputDelta {
				output.Store(true)
			}
		})
		eventually(b, 10*time.Second, "output", output.Load)
		time.Sleep(rand.N(testLease / 3))
		victim.kill(b)
		killed := time.Now()
		f := receive(b, "Follow on the survivor", ch, time.Minute)
		if f.err != nil {
			b.Fatal(f.err)
		}
		checkOrphaned(b, acc.ID, failure(b, acc.ID, f.events[len(f.events)-1]))
		took = append(took, f.at.Sub(killed))
	}
	slices.Sort(took)
	b.Logf("kill to terminal event, sorted: %v", took)
	percentile := func(p float64) time.Duration {
		return took[int(math.Ceil(p*float64(len(took))))-1]
	}
	b.ReportMetric(float64(percentile(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(percentile(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// TestStreamLinksAcrossReplicas: the signed link a replica returns opens the execution
// on another replica (both keep the keys in the shared store), names no principal, and
// the keys expire from the store (spec/authentication.md, "Signed stream links").
func TestStreamLinksAcrossReplicas(t *testing.T) {
	eachStore(t, dbStreamLinks, func(t *testing.T, shared sharedStore) {
		p := startDemoProvider(t)
		dir := manifestsDir(t, p.addr)
		c := newAuthClient()
		alice := c.secret("alice's token", "tok-alice-"+strconv.FormatUint(rand.Uint64(), 16))
		tokens := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(tokens, []byte(alice+",alice,e2e\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		flags := []string{"--auth=static", "--auth-tokens-file", tokens, "--zap-log-level", "10"}
		a := startReplica(t, "A", dir, shared.url, flags...)
		b := startReplica(t, "B", dir, shared.url, flags...)

		acc := c.submit(t, "http://"+a.api, alice, `{"ability":"quick","input":[{"type":"text","text":"links"}]}`)
		c.waitTerminal(t, "http://"+a.api, alice, acc.ID)
		for _, link := range []string{acc.Links.Events, acc.Links.Result} {
			if r := c.do(t, http.MethodGet, "http://"+b.api+link, "", "", "Accept", "application/json"); r.status != http.StatusOK {
				t.Errorf("replica B refuses replica A's link %s: %s", pathOf(link), r)
			}
			tok, err := linkToken(link)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := base64.RawURLEncoding.DecodeString(tok)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(raw, []byte("alice")) {
				t.Errorf("the link's token holds the principal: %q", raw)
			}
		}

		// Every key of stream links in the store expires: within a rotation period (24h),
		// the token lifetime (15m) and the clock skew allowed (1m).
		ttls := shared.secretTTLs(t, "stream-token-key")
		if len(ttls) == 0 {
			t.Fatalf("no stream token key in %s", shared.name)
		}
		for k, ttl := range ttls {
			if ttl <= 0 || ttl > 24*time.Hour+16*time.Minute {
				t.Errorf("key %s expires in %v, want within 24h16m", k, ttl)
			}
		}
		c.canary(t, "switchboard", a.out.String()+b.out.String())
	})
}
