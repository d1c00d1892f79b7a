package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-dev/switchboard/runtime/client"
	postgresstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Restarting PostgreSQL under a load of streaming executions (spec/postgres.md,
// "Outages"): the replicas keep running, their appends wait for the database within
// the execution lease, their followers reconnect, and afterwards every execution has
// exactly one terminal event, nothing a follower saw is missing from the log, and both
// replicas are ready and accept executions again without being restarted.

const (
	// restartLease is the replicas' --execution-lease: appends are retried within it,
	// so an outage shorter than it delays events and loses none. A restart of the
	// local server takes one to two seconds; the lease leaves it ample room, so that
	// no renewal misses and no execution is taken for an orphan.
	restartLease = 10 * time.Second
	// restartExecutions streaming executions of restartPieces pieces, one every
	// restartPieceDelay (8 s each), submitted over about two seconds.
	restartExecutions = 20
	restartPieces     = 40
	restartPieceDelay = 200 * time.Millisecond
	restartSubmitGap  = 100 * time.Millisecond
)

// launchPostgresReplica starts a replica serving the manifests in dir on the PostgreSQL
// database at url, without waiting for it to be ready. The URL reaches it as
// $SWITCHBOARD_POSTGRES_URL, as the chart passes it.
func launchPostgresReplica(tb testing.TB, label, dir, url string, args ...string) *replica {
	tb.Helper()
	r := &replica{label: label, api: freeAddr(tb), probe: freeAddr(tb)}
	flags := []string{"--manifests", dir, "--runtime-bind-address", r.api,
		"--health-probe-bind-address", r.probe, "--metrics-bind-address", "0",
		"--event-store", "postgres", "--execution-lease", restartLease.String(),
		"--cleanup-grace", testCleanupGrace.String(), "--shutdown-grace", "1s"}
	cmd := exec.Command(filepath.Join(binDir, "switchboard"), append(flags, args...)...)
	cmd.Env = append(os.Environ(), postgresstore.EnvURL+"="+url)
	r.out, r.proc = startCommand(tb, "switchboard "+label, cmd)
	c, err := client.New("http://" + r.api)
	if err != nil {
		tb.Fatal(err)
	}
	r.client = c
	return r
}

// localCluster is the Debian cluster (pg_lsclusters) that serves the test database:
// its version and name, for pg_ctlcluster.
type localCluster struct{ version, name string }

// findLocalCluster returns the local cluster whose data directory is the one of the
// server at url. The test restarts it, so it must be that server, and pg_ctlcluster
// (Debian's postgresql-common) must be there: CI runs as root on a machine .ci/run set
// up with it. Anything else fails the test with what is missing.
func findLocalCluster(tb testing.TB, url string) localCluster {
	tb.Helper()
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		tb.Fatalf("this test restarts PostgreSQL with pg_ctlcluster (Debian's postgresql-common, installed by .ci/run), which is missing: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(context.Background())
	var dataDir string
	if err := c.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err != nil {
		tb.Fatalf("read the server's data_directory (the test needs a superuser, as .ci/run's postgres): %v", err)
	}
	out, err := exec.CommandContext(ctx, "pg_lsclusters", "--no-header").Output()
	if err != nil {
		tb.Fatalf("pg_lsclusters: %v", err)
	}
	// Ver Cluster Port Status Owner Data-directory Log-file
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 6 && f[5] == dataDir {
			return localCluster{version: f[0], name: f[1]}
		}
	}
	tb.Fatalf("no local cluster (pg_lsclusters) has the test server's data directory %s: this test can restart only a local Debian cluster\n%s", dataDir, out)
	return localCluster{}
}

// ctl runs pg_ctlcluster action on the cluster and returns how long it took.
func (lc localCluster) ctl(ctx context.Context, action string) (time.Duration, error) {
	begin := time.Now()
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", lc.version, lc.name, action).CombinedOutput()
	if err != nil {
		return time.Since(begin), fmt.Errorf("pg_ctlcluster %s %s %s: %w\n%s", lc.version, lc.name, action, err, out)
	}
	return time.Since(begin), nil
}

// running reports whether the cluster runs (pg_ctlcluster status exits 0).
func (lc localCluster) running(ctx context.Context) bool {
	return exec.CommandContext(ctx, "pg_ctlcluster", lc.version, lc.name, "status").Run() == nil
}

// postmasterStart returns when the server at url started: it changes with a restart.
func postmasterStart(tb testing.TB, url string) time.Time {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(context.Background())
	var at time.Time
	if err := c.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&at); err != nil {
		tb.Fatal(err)
	}
	return at
}

// outageProbeInterval is how often probeOutage tries the server and the replicas.
const outageProbeInterval = 10 * time.Millisecond

// outageProbe measures an outage while it runs; stop ends it and returns what it saw.
type outageProbe struct {
	stop func() outageSeen
}

// outageSeen is what an outageProbe measured: the time from the first failed
// connection to the server to the last one, how many failed, and how often each
// replica's /readyz was seen failing (a measurement, never an assertion: a probe may
// fall between the outage's edges).
type outageSeen struct {
	down     time.Duration
	failures int
	unready  string
}

// probeOutage tries a new connection to the server at url, and each replica's
// /readyz, every outageProbeInterval until stopped, each on a goroutine of its own so
// that a slow answer of one does not space out the others.
func probeOutage(url string, replicas []*replica) outageProbe {
	done := make(chan struct{})
	var wg sync.WaitGroup
	// every runs try every outageProbeInterval until done and returns, through its
	// pointers, the times of the first and last failures and their count.
	every := func(try func() bool, first, last *time.Time, failures *int) {
		wg.Go(func() {
			t := time.NewTicker(outageProbeInterval)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				if try() {
					continue
				}
				if *failures == 0 {
					*first = time.Now()
				}
				*last = time.Now()
				*failures++
			}
		})
	}
	var first, last time.Time
	var failures int
	every(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return false
		}
		_ = c.Close(context.Background())
		return true
	}, &first, &last, &failures)
	unready := make([]int, len(replicas))
	unused := make([]time.Time, 2*len(replicas))
	for i, r := range replicas {
		every(func() bool { return r.readyz() == http.StatusOK }, &unused[2*i], &unused[2*i+1], &unready[i])
	}
	return outageProbe{stop: sync.OnceValue(func() outageSeen {
		close(done)
		wg.Wait()
		seen := outageSeen{failures: failures}
		if failures > 0 {
			seen.down = last.Sub(first) + outageProbeInterval
		}
		var parts []string
		for i, r := range replicas {
			parts = append(parts, fmt.Sprintf("/readyz of %s failed %d times", r.label, unready[i]))
		}
		seen.unready = strings.Join(parts, ", ")
		return seen
	})}
}

// observed is what one follower saw of an execution, with each event's arrival time.
type observed struct {
	mu      sync.Mutex
	events  []protocol.Event
	arrived []time.Time
}

func (o *observed) add(ev protocol.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, ev)
	o.arrived = append(o.arrived, time.Now())
}

// seen returns a copy of the events seen so far.
func (o *observed) seen() []protocol.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

// longestGap returns the longest wait between two consecutive events.
func (o *observed) longestGap() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(o.arrived); i++ {
		gap = max(gap, o.arrived[i].Sub(o.arrived[i-1]))
	}
	return gap
}

// sameEvent reports whether a and b are the same event: sequence, type, timestamp and
// data byte for byte.
func sameEvent(a, b protocol.Event) bool {
	return a.ExecutionID == b.ExecutionID && a.Sequence == b.Sequence && a.Type == b.Type &&
		a.Timestamp.Equal(b.Timestamp) && bytes.Equal(a.Data, b.Data)
}

func TestPostgresRestartUnderLoad(t *testing.T) {
	url := freshPostgresDatabase(t)
	cluster := findLocalCluster(t, url)
	// Whatever happens below, the server is running again when the test ends (before
	// its database is dropped: cleanups run last-registered first). Other tests share it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if cluster.running(ctx) {
			return
		}
		if _, err := cluster.ctl(ctx, "start"); err != nil {
			t.Errorf("restore PostgreSQL: %v", err)
		}
	})
	provider := startDemoProvider(t, "--chunks", fmt.Sprint(restartPieces), "--slow-delay", restartPieceDelay.String())
	dir := manifestsDir(t, provider.addr)
	replicas := []*replica{launchPostgresReplica(t, "A", dir, url), launchPostgresReplica(t, "B", dir, url)}
	for _, r := range replicas {
		r.waitReady(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The load: executions submitted to either replica, each followed on the other
	// with the client's resumable Follow.
	ids := make([]string, restartExecutions)
	submitted := make([]time.Time, restartExecutions)
	seen := make([]*observed, restartExecutions)
	outcomes := make([]<-chan followed, restartExecutions)
	for i := range ids {
		on, via := replicas[i%2], replicas[(i+1)%2]
		acc, err := on.client.Submit(ctx, textRequest("stream", longText))
		if err != nil {
			t.Fatalf("submit %d to %s: %v", i, on.label, err)
		}
		ids[i], submitted[i], seen[i] = acc.ID, time.Now(), &observed{}
		outcomes[i] = followAsync(ctx, via, acc.ID, seen[i].add)
		time.Sleep(restartSubmitGap)
	}
	// Mid-load: every execution has streamed output, none can have ended (each takes
	// restartPieces × restartPieceDelay).
	eventually(t, 10*time.Second, "output on every follower", func() bool {
		for _, o := range seen {
			if !slices.ContainsFunc(o.seen(), func(ev protocol.Event) bool { return ev.Type == protocol.EventOutputDelta }) {
				return false
			}
		}
		return true
	})

	before := make([][]protocol.Event, len(ids))
	for i, o := range seen {
		before[i] = o.seen()
	}
	started := postmasterStart(t, url)
	probe := probeOutage(url, replicas)
	restartAt := time.Now()
	took, err := cluster.ctl(ctx, "restart")
	if err != nil {
		probe.stop()
		t.Fatal(err)
	}
	// The server answers again: the end of the outage.
	eventually(t, 30*time.Second, "PostgreSQL to accept connections", func() bool {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return false
		}
		_ = c.Close(context.Background())
		return true
	})
	readyAgain := make([]time.Duration, len(replicas))
	for i, r := range replicas {
		r.waitReady(t)
		readyAgain[i] = time.Since(restartAt)
	}
	outage := probe.stop()
	if restarted := postmasterStart(t, url); !restarted.After(started) {
		t.Fatalf("the server's start time is still %s after pg_ctlcluster restart: nothing was restarted", started)
	}

	// Every follower reaches the terminal event, reconnecting as it needs to.
	after := make([]followed, len(ids))
	for i, ch := range outcomes {
		after[i] = receive(t, "follower of execution "+ids[i], ch, 2*time.Minute)
		if after[i].err != nil {
			t.Errorf("execution %s: Follow: %v after %s", ids[i], after[i].err, strings.Join(types(after[i].events), " "))
		}
	}

	// The log as the database holds it, read by a store of the test's own.
	store, err := postgresstore.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var durations []time.Duration
	var longest time.Duration
	for i, id := range ids {
		log, err := store.Read(ctx, id, 0, 0)
		if err != nil {
			t.Fatalf("read the log of %s: %v", id, err)
		}
		checkLog(t, "the log of "+id, log)
		checkLog(t, "what the follower of "+id+" saw", after[i].events)
		if len(log) == 0 {
			continue
		}
		// The restart came mid-stream: the execution ended after it.
		if last := seen[i].arrived[len(seen[i].arrived)-1]; !last.After(restartAt) {
			t.Errorf("execution %s ended before the restart: the test restarted too late", id)
		}
		// Nothing a follower was shown before the restart is missing or different.
		for _, ev := range before[i] {
			if ev.Sequence == 0 || ev.Sequence > uint64(len(log)) || !sameEvent(ev, log[ev.Sequence-1]) {
				t.Errorf("execution %s: event %d %s seen before the restart is not in the log as it was", id, ev.Sequence, ev.Type)
			}
		}
		// The follower saw the whole log, exactly once each event.
		if len(after[i].events) != len(log) {
			t.Errorf("execution %s: the follower saw %d events, the log holds %d", id, len(after[i].events), len(log))
		} else {
			for j := range log {
				if !sameEvent(after[i].events[j], log[j]) {
					t.Errorf("execution %s: the follower's event %d differs from the log's", id, j+1)
					break
				}
			}
		}
		// The outage (shorter than the lease, see restartLease) delays the events and
		// ends nothing: the one acceptable outcome is execution.completed. Failing it
		// with provider_unavailable or internal would lose an answer the provider gave
		// in full (spec/postgres.md, "Outages").
		if ev := log[len(log)-1]; ev.Type != protocol.EventCompleted {
			t.Errorf("execution %s ended with %s %s, want execution.completed: a short outage loses nothing", id, ev.Type, ev.Data)
		}
		if st, err := replicas[i%2].client.Get(ctx, id); err != nil || st.Status != protocol.StatusCompleted || st.LastSequence != uint64(len(log)) {
			t.Errorf("GET %s on %s: %+v, %v; want completed at sequence %d", id, replicas[i%2].label, st, err, len(log))
		}
		durations = append(durations, after[i].at.Sub(submitted[i]))
		longest = max(longest, seen[i].longestGap())
	}
	if took > restartLease {
		t.Errorf("the restart took %s, longer than the lease %s: this test then proves nothing about short outages", took, restartLease)
	}

	// Both replicas still run (the same processes), are ready and accept new work.
	for _, r := range replicas {
		select {
		case <-r.proc.done:
			t.Fatalf("replica %s exited:\n%s", r.label, r.out.String())
		default:
		}
		acc, err := r.client.Submit(ctx, textRequest("quick", "after the restart"))
		if err != nil {
			t.Errorf("submit to %s after the restart: %v", r.label, err)
			continue
		}
		f := receive(t, "new execution on "+r.label, followAsync(ctx, r, acc.ID, nil), 30*time.Second)
		if f.err != nil || len(f.events) == 0 || f.events[len(f.events)-1].Type != protocol.EventCompleted {
			t.Errorf("new execution on %s after the restart: %s, %v; want it completed", r.label, strings.Join(types(f.events), " "), f.err)
		}
	}

	slices.Sort(durations)
	nominal := time.Duration(restartPieces) * restartPieceDelay
	reconnects := 0
	for _, r := range replicas {
		reconnects += r.logLines("Event stream ended by a store failure")
	}
	t.Logf("PostgreSQL %s/%s restarted %s after the load began: pg_ctlcluster restart took %s; the server refused connections for %s (%d probes every %s failed); %s; replicas ready again %v after the command began",
		cluster.version, cluster.name, restartAt.Sub(submitted[0]).Round(time.Millisecond), took.Round(time.Millisecond),
		outage.down.Round(time.Millisecond), outage.failures, outageProbeInterval, outage.unready, readyAgain)
	if len(durations) > 0 {
		t.Logf("%d executions of %s nominal: submit to terminal min %s, median %s, max %s; longest wait between two events %s (nominal %s): events delayed by up to %s; %d streams cut by a store failure",
			len(durations), nominal, durations[0].Round(time.Millisecond), durations[len(durations)/2].Round(time.Millisecond),
			durations[len(durations)-1].Round(time.Millisecond), longest.Round(time.Millisecond), restartPieceDelay,
			(longest - restartPieceDelay).Round(time.Millisecond), reconnects)
	}
}
