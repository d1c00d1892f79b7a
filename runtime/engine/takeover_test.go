package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The orphan of TestTakeOverLargeOrphan: a replica died after recording 64 MiB of
// output, in deltas of 64 KiB.
const (
	orphanDeltas     = 1024
	orphanDeltaBytes = 64 << 10
	// maxTakeOverHeap bounds what taking the orphan over may allocate: far less than
	// its output, which the takeover must not read.
	maxTakeOverHeap = 32 << 20
	// maxCommand bounds the time Redis spends in any one command of the takeover
	// (SLOWLOG's unit is the microsecond): beyond it every other replica's commands
	// wait, and a read timeout makes the takeover fail at every sweep.
	maxCommand = 50 * time.Millisecond
)

// Taking over an orphan costs what its status costs, not what its log holds: the
// survivor neither reads the 64 MiB its peer recorded into its heap nor makes Redis
// serve them in one long command.
func TestTakeOverLargeOrphan(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		takeOverLargeOrphan(t, s, nil)
	})
	t.Run("redis", func(t *testing.T) {
		name := "takeover-" + randomHex(t)
		admin := redisClient(t)
		s, err := redisstore.New(t.Context(), redisURL(), redisstore.WithKeyPrefix("switchboard-test:"+name+":"),
			redisstore.WithClientOptions(func(o *goredis.Options) { o.ClientName = name }))
		if err != nil {
			t.Fatalf("Redis at %s is unreachable (start redis-server or set SWITCHBOARD_REDIS_URL): %v", redisURL(), err)
		}
		t.Cleanup(func() {
			_ = s.Close()
			deleteKeys(t, admin, "switchboard-test:"+name+":*")
		})
		takeOverLargeOrphan(t, s, func(takeOver func()) {
			for _, cmd := range slowCommands(t, admin, name, takeOver) {
				t.Errorf("Redis spent %v in one command of the takeover, want at most %v: %s", cmd.Duration, maxCommand, commandLine(cmd))
			}
		})
	})
}

// takeOverLargeOrphan records a 64 MiB orphan in s, as its dead replica did, and has a
// new engine take it over, through observe when it is not nil.
func takeOverLargeOrphan(t *testing.T, s engine.Store, observe func(takeOver func())) {
	ctx := t.Context()
	id, evs := recordOrphan(t, s, orphanDeltas, orphanDeltaBytes)
	table := new(routing.Holder)
	table.Store(routing.NewTable([]routing.Deployment{deployment("a")}))
	// A lease and grace of an hour keep the engine's own sweeps away: the test's Sweep
	// is the takeover.
	e := engine.New(engine.Config{Store: s, Table: table, Replica: "survivor", Lease: time.Hour,
		CleanupGrace: time.Hour, MaxOutputBytes: 2 * orphanDeltas * orphanDeltaBytes})
	t.Cleanup(func() { _ = e.Close() })

	taken := 0
	takeOver := func() {
		allocated := heapAllocated(func() { taken = e.Sweep(ctx) })
		t.Logf("the takeover allocated %.1f MiB", float64(allocated)/(1<<20))
		if allocated > maxTakeOverHeap {
			t.Errorf("the takeover allocated %.1f MiB, want at most %d MiB: it read the orphan's output",
				float64(allocated)/(1<<20), maxTakeOverHeap>>20)
		}
	}
	if observe != nil {
		observe(takeOver)
	} else {
		takeOver()
	}
	if taken != 1 {
		t.Fatalf("Sweep took over %d executions, want the orphan", taken)
	}
	st, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(len(evs) + 1); !st.Terminal || st.LastSequence != want || st.Error == nil ||
		st.Error.Code != protocol.CodeInternal || st.Error.Message != orphanMessage {
		t.Errorf("after the takeover: terminal %v, sequence %d, error %+v; want event %d ending it with internal %q",
			st.Terminal, st.LastSequence, st.Error, want, orphanMessage)
	}
	last, err := s.Read(ctx, id, uint64(len(evs)), 1)
	if err != nil || len(last) != 1 || last[0].Timestamp.Before(evs[len(evs)-1].Timestamp) {
		t.Errorf("terminal event %+v (%v): want one, not before the orphan's last event", last, err)
	}
}

// The output an orphan recorded counts against the output limit of the attempt its
// adopter resumes, as if the execution had run on one replica: the adopter takes it
// from the status, without reading the events.
func TestAdoptedAttemptCountsRecordedOutput(t *testing.T) {
	const recorded = 1000
	a := newRemoteAdapter()
	close(a.finish) // the job is done: resuming it emits its result, "done" (6 bytes)
	r := newReplicas(t, 1, remoteProvider(a), func(c *engine.Config) {
		c.Lease, c.CleanupGrace = time.Hour, time.Hour // no sweeps but the test's
		c.MaxOutputBytes = recorded + 5
	})
	id, _ := recordOrphan(t, r.store, 1, recorded)
	job := json.RawMessage(`{"attempt":1,"deployment":"ai/a","handle":{"job":"j-1"}}`)
	if err := r.store.SetRemote(t.Context(), id, eventstore.FirstFence, job); err != nil {
		t.Fatal(err)
	}
	if n := r.engines[0].Sweep(t.Context()); n != 1 {
		t.Fatalf("Sweep took over %d executions, want the orphan", n)
	}
	evs := r.finish(id)
	if e := terminalError(t, evs); e.Code != protocol.CodeOutputTooLarge {
		t.Errorf("terminal error %+v, want output_too_large: %d bytes recorded before and 6 after, limit %d",
			e, recorded, recorded+5)
	}
	if resumed, _, _ := a.counts(); resumed != 1 {
		t.Errorf("resumed %d times, want the recorded job adopted once", resumed)
	}
}

// recordOrphan records in s what a replica that died while streaming left behind: an
// execution whose lease has expired, with execution.accepted, route.selected (attempt 1
// on ai/a) and the given number of output.delta events of size bytes of text each. It
// returns the execution's id and its events.
func recordOrphan(t *testing.T, s eventstore.Log, deltas, size int) (string, []protocol.Event) {
	t.Helper()
	ctx := t.Context()
	id := engine.NewExecutionID()
	created := time.Now().UTC().Truncate(time.Microsecond)
	info, err := json.Marshal(engine.Info{Ability: "chat", DeadlineAt: created.Add(time.Hour), CreatedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, eventstore.Record{ID: id, CreatedAt: created, Info: info}, "dead", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	evs := []protocol.Event{
		{Type: protocol.EventAccepted, Data: mustJSON(t, protocol.AcceptedData{Ability: "chat", DeadlineAt: created.Add(time.Hour)})},
		{Type: protocol.EventRouteSelected, Data: mustJSON(t, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/a", Provider: "fake", Model: "a-model"})},
	}
	delta := mustJSON(t, protocol.OutputDeltaData{Type: "text", Text: strings.Repeat("x", size)})
	for range deltas {
		evs = append(evs, protocol.Event{Type: protocol.EventOutputDelta, Data: delta})
	}
	for i := range evs {
		evs[i].ExecutionID, evs[i].Sequence = id, uint64(i+1)
		evs[i].Timestamp = created.Add(time.Duration(i) * time.Microsecond)
		// The dead replica's appends carry its fence: nobody has acquired the lease
		// since it expired.
		if err := s.Append(ctx, eventstore.FirstFence, evs[i]); err != nil {
			t.Fatalf("Append %d: %v", i+1, err)
		}
	}
	time.Sleep(5 * time.Millisecond) // past the lease's expiry
	return id, evs
}

// heapAllocated returns the bytes f allocated on the heap (all goroutines'): an upper
// bound of how far it made the heap grow.
func heapAllocated(f func()) uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	runtime.GC()
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	f()
	metrics.Read(sample)
	return sample[0].Value.Uint64() - before
}

// slowCommands returns the commands of the client named client that Redis logged as
// taking longer than maxCommand while f ran. The slow log is the server's: its
// threshold is set for the call and restored after, and other clients' entries (other
// packages' tests share the server) are left out.
func slowCommands(t *testing.T, admin *goredis.Client, client string, f func()) []goredis.SlowLog {
	t.Helper()
	ctx := context.Background()
	saved, err := admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
			if err := admin.ConfigSet(ctx, k, saved[k]).Err(); err != nil {
				t.Errorf("restore %s: %v", k, err)
			}
		}
	}()
	for k, v := range map[string]string{"slowlog-log-slower-than": fmt.Sprint(maxCommand.Microseconds()), "slowlog-max-len": "1024"} {
		if err := admin.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	f()
	logged, err := admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine []goredis.SlowLog
	for _, l := range logged {
		if l.ClientName == client {
			mine = append(mine, l)
		}
	}
	return mine
}

// commandLine shows a logged command's first arguments, short.
func commandLine(l goredis.SlowLog) string {
	args := l.Args[:min(len(l.Args), 6)]
	for i, a := range args {
		if len(a) > 40 {
			args[i] = a[:40] + "…"
		}
	}
	return strings.Join(args, " ")
}

// redisURL is the Redis of the tests, as for the Redis store's own tests.
func redisURL() string {
	if u := os.Getenv("SWITCHBOARD_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// redisClient returns a client of the test Redis, failing the test if it does not
// answer.
func redisClient(t *testing.T) *goredis.Client {
	t.Helper()
	o, err := goredis.ParseURL(redisURL())
	if err != nil {
		t.Fatalf("SWITCHBOARD_REDIS_URL: %v", err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("Redis at %s is unreachable (start redis-server or set SWITCHBOARD_REDIS_URL): %v", redisURL(), err)
	}
	return c
}

// deleteKeys deletes the keys matching pattern.
func deleteKeys(t *testing.T, c *goredis.Client, pattern string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("delete test key: %v", err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan test keys: %v", err)
	}
}

func randomHex(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
