package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// runThroughput measures executions per second for each EventStore: c submitters each
// submit an execution, follow its event stream to execution.completed, and submit the
// next. Over a window that starts after a warm-up, it counts the 202s received
// (accepted/s) and the terminal events observed (completed/s), and the CPU time per
// completed execution of the runtime and of the store's server (Redis, PostgreSQL).
func runThroughput(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("throughput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf common
	cf.register(fs)
	conc := fs.Int("c", 64, "concurrent submitters")
	duration := fs.Duration("duration", 10*time.Second, "measured window per store")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured load before the window")
	stores := fs.String("stores", "memory,redis,postgres", "EventStores to measure, comma-separated (memory, redis, postgres)")
	redisURL := fs.String("redis-url", "redis://127.0.0.1:6379/15", "switchboard --redis-url for the redis store; nothing is flushed, keys expire after -retention")
	postgresURL := fs.String("postgres-url", "postgres://postgres@127.0.0.1:5432/sb_bench", "switchboard --postgres-url for the postgres store; its database, named sb_bench…, is dropped and created before the round and dropped after it; the round is skipped when no server answers")
	chunks := fs.Int("chunks", 10, "text deltas per answer")
	baseline := fs.Bool("baseline", true, "measure the relay (hack/relay) first: the same exchanges with net/http alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *conc < 1 || *duration <= 0 || *warmup < 0 || *chunks < 1 {
		return errors.New("-c, -duration and -chunks must be positive, -warmup not negative")
	}
	names := strings.Split(*stores, ",")
	var pgConfig *pgx.ConnConfig
	for _, st := range names {
		switch st {
		case "memory", "redis":
		case "postgres":
			if pgConfig, err = parsePostgresURL(*postgresURL); err != nil {
				return err
			}
		default:
			return fmt.Errorf("-stores: unknown EventStore %q", st)
		}
	}

	s, err := newSession(ctx, cf, stdout, stderr)
	if err != nil {
		return err
	}
	defer s.close(&err)
	provider, err := s.startDemoProvider(*chunks, 0)
	if err != nil {
		return err
	}
	text := promptText(4 * *chunks)

	// The PostgreSQL round runs when a server answers; the servers' CPU is metered when
	// they run on this machine.
	var notes []string
	var pg *pgBench
	if pgConfig != nil {
		var why string
		if pg, why, err = openPGBench(ctx, pgConfig); err != nil {
			return err
		}
		if pg == nil {
			notes = append(notes, "postgres: skipped: "+why)
			names = slices.DeleteFunc(names, func(n string) bool { return n == "postgres" })
		} else {
			defer pg.close()
		}
	}
	meters := map[string]*serverMeter{}
	for _, store := range names {
		var m *serverMeter
		var why string
		switch store {
		case "redis":
			m, why, err = redisServerMeter(ctx, *redisURL)
		case "postgres":
			m, why, err = pgServerMeter(ctx, pg.admin, pg.database)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if m == nil {
			notes = append(notes, fmt.Sprintf("%s: server CPU n/a: %s", store, why))
		}
		meters[store] = m
	}

	fmt.Fprintf(stdout, "throughput: %d submitters, each: POST /v1/executions, follow …/events to execution.completed, repeat; echo in %d deltas, upstream delay 0\n",
		*conc, *chunks)
	fmt.Fprintf(stdout, "  window %s after %s of warm-up; accepted = 202s received in the window, completed = terminal events received in it\n", *duration, *warmup)
	fmt.Fprintln(stdout, "  accept: POST sent → 202; end: POST sent → execution.completed (executions submitted in the window)")
	fmt.Fprintln(stdout, "  per exec: the server's CPU time and heap allocations (Go metrics of /metrics) in the window, per completed execution")
	fmt.Fprintln(stdout, "  store_cpu: the store server's CPU time in the window per completed execution (utime+stime from /proc): redis-server's whole;")
	fmt.Fprintln(stdout, "    PostgreSQL's postmaster, its background processes and the backends of the bench database, listed every 100ms")
	for _, n := range notes {
		fmt.Fprintln(stdout, "  "+n)
	}
	if *baseline {
		fmt.Fprintln(stdout, "  relay: the baseline (hack/relay), the same calls and events with net/http alone, events in memory")
	}
	fmt.Fprintln(stdout)
	tab := newTable(stdout, "store", "submitters", "accepted_per_s", "completed_per_s", "accept_p50_ms", "accept_p99_ms",
		"end_p50_ms", "end_p99_ms", "cpu_ms_per_exec", "store_cpu_ms_per_exec", "alloc_KiB_per_exec", "mallocs_per_exec", "rss_MiB")
	if *baseline {
		names = append([]string{"relay"}, names...)
	}
	results := map[string]*throughputResult{}
	for _, store := range names {
		var rt *runtimeProc
		if store == "relay" {
			fmt.Fprintln(stderr, "bench: throughput of the relay")
			rt, err = s.startRelay("relay", "http://"+provider+"/openai/v1")
		} else {
			fmt.Fprintf(stderr, "bench: throughput with the %s EventStore\n", store)
			flags := []string{"--event-store", store}
			switch store {
			case "redis":
				flags = append(flags, "--redis-url", *redisURL)
			case "postgres":
				if err := pg.recreate(ctx); err != nil {
					return err
				}
				flags = append(flags, "--postgres-url", *postgresURL)
			}
			rt, err = s.startSwitchboard(ctx, "switchboard-"+store, "http://"+provider+"/openai/v1", flags...)
		}
		if err != nil {
			return err
		}
		r, err := throughputRound(ctx, rt, meters[store], *conc, *warmup, *duration, text)
		if err != nil {
			return fmt.Errorf("%s: %w", store, err)
		}
		if err := rt.stop(); err != nil {
			return err
		}
		if store == "postgres" {
			if err := pg.drop(ctx); err != nil {
				return err
			}
		}
		results[store] = r
		secs := duration.Seconds()
		kib, mallocs := r.allocColumns()
		tab.row(store, fmt.Sprint(*conc),
			fmt.Sprintf("%.0f", float64(r.accepted)/secs), fmt.Sprintf("%.0f", float64(r.completed)/secs),
			ms(percentile(r.acceptLat, .5)), ms(percentile(r.acceptLat, .99)),
			ms(percentile(r.endLat, .5)), ms(percentile(r.endLat, .99)),
			ms(r.cpuPerExec), r.storeCPUColumn(), kib, mallocs, mib(r.rss))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	base := results["relay"]
	if base == nil {
		return nil
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "each store against the relay (ratio of the figures above)")
	fmt.Fprintln(stdout, "  cpu_with_store: the runtime's and the store server's CPU per execution against the relay's")
	vs := newTable(stdout, "store", "completed_per_s", "cpu_per_exec", "cpu_with_store", "alloc_per_exec", "mallocs_per_exec")
	for _, store := range names[1:] {
		r := results[store]
		allocs, mallocs := "n/a", "n/a"
		if r.allocsOK && base.allocsOK {
			allocs, mallocs = fmt.Sprintf("%.2fx", r.allocKiB/base.allocKiB), fmt.Sprintf("%.2fx", r.mallocs/base.mallocs)
		}
		withStore := "n/a"
		if r.storeCPUOK || store == "memory" {
			withStore = ratio(r.cpuPerExec+r.storeCPUPerExec, base.cpuPerExec)
		}
		vs.row(store, fmt.Sprintf("%.2fx", float64(r.completed)/float64(base.completed)),
			ratio(r.cpuPerExec, base.cpuPerExec), withStore, allocs, mallocs)
	}
	return vs.flush()
}

// throughputResult is one store's measurement.
type throughputResult struct {
	accepted, completed int
	acceptLat, endLat   []time.Duration // sorted
	cpuPerExec          time.Duration
	rss                 int64
	// storeCPUPerExec is the store server's CPU time per completed execution
	// (storeCPUOK false when it is not measured: no server, or not on this machine).
	storeCPUPerExec time.Duration
	storeCPUOK      bool
	// allocKiB and mallocs are the runtime's heap allocations per completed execution,
	// from its Go metrics (allocsOK false when it has none).
	allocKiB, mallocs float64
	allocsOK          bool
}

// allocColumns formats the allocations per execution, or n/a.
func (r *throughputResult) allocColumns() (kib, mallocs string) {
	if !r.allocsOK {
		return "n/a", "n/a"
	}
	return fmt.Sprintf("%.1f", r.allocKiB), fmt.Sprintf("%.0f", r.mallocs)
}

// storeCPUColumn formats the store server's CPU per execution, or n/a.
func (r *throughputResult) storeCPUColumn() string {
	if !r.storeCPUOK {
		return "n/a"
	}
	return ms(r.storeCPUPerExec)
}

// throughputRound runs conc submitters against rt and measures the window; store, when
// not nil, meters the store server's CPU time in it.
func throughputRound(ctx context.Context, rt *runtimeProc, store *serverMeter, conc int, warmup, duration time.Duration, text string) (*throughputResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hc := newHTTPClient(2 * conc)
	defer hc.CloseIdleConnections()
	cl, err := newRuntimeClient(rt.api, hc)
	if err != nil {
		return nil, err
	}
	req := textRequest(text)
	from := time.Now().Add(warmup)
	to := from.Add(duration)
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }

	var mu sync.Mutex
	res := &throughputResult{}
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(to) {
				cctx, done := context.WithTimeout(ctx, callTimeout)
				t, err := runtimeCall(cctx, cl, req, text)
				done()
				if err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				if in(t.start.Add(t.accepted)) {
					res.accepted++
				}
				if in(t.start.Add(t.end)) {
					res.completed++
				}
				if in(t.start) {
					res.acceptLat = append(res.acceptLat, t.accepted)
					res.endLat = append(res.endLat, t.end)
				}
				mu.Unlock()
			}
		})
	}

	// CPU time is read at the window's edges, while the submitters run.
	cpu, err := sampleWindow(ctx, rt, store, from, to)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil {
		return nil, cause
	}
	if err != nil {
		return nil, err
	}
	if res.completed == 0 {
		return nil, errors.New("no execution completed in the window")
	}
	res.cpuPerExec = cpu.cpu / time.Duration(res.completed)
	res.rss = cpu.rss
	if store != nil {
		res.storeCPUOK = true
		res.storeCPUPerExec = cpu.storeCPU / time.Duration(res.completed)
	}
	if cpu.allocsOK {
		res.allocsOK = true
		res.allocKiB = cpu.allocBytes / 1024 / float64(res.completed)
		res.mallocs = cpu.mallocs / float64(res.completed)
	}
	res.acceptLat, res.endLat = sortedCopy(res.acceptLat), sortedCopy(res.endLat)
	return res, nil
}

// windowSample is the runtime's CPU time used and bytes and objects it allocated on
// the heap between two instants, and its RSS at the second; storeCPU is the store
// server's CPU time between them.
type windowSample struct {
	cpu, storeCPU       time.Duration
	rss                 int64
	allocBytes, mallocs float64
	allocsOK            bool
}

// allocMetrics are the runtime's counters of heap allocations, from Go's collector.
var allocMetrics = []string{"go_memstats_alloc_bytes_total", "go_memstats_mallocs_total"}

func sampleWindow(ctx context.Context, rt *runtimeProc, store *serverMeter, from, to time.Time) (windowSample, error) {
	var w windowSample
	if err := sleepUntil(ctx, from); err != nil {
		return w, err
	}
	start, err := cpuTime(rt.pid())
	if err != nil {
		return w, err
	}
	allocStart, okStart := goMetrics(ctx, rt.metrics, allocMetrics...)
	if store != nil {
		if err := store.start(); err != nil {
			return w, err
		}
		// The server's processes are listed through the window (servercpu.go), the
		// last time at its end.
		for next := from.Add(pollInterval); next.Before(to); next = next.Add(pollInterval) {
			if err := sleepUntil(ctx, next); err != nil {
				return w, err
			}
			if err := store.poll(); err != nil {
				return w, err
			}
		}
	}
	if err := sleepUntil(ctx, to); err != nil {
		return w, err
	}
	end, err := cpuTime(rt.pid())
	if err != nil {
		return w, err
	}
	if store != nil {
		if err := store.poll(); err != nil {
			return w, err
		}
		w.storeCPU = store.used()
	}
	allocEnd, okEnd := goMetrics(ctx, rt.metrics, allocMetrics...)
	w.cpu = end - start
	if w.allocsOK = okStart && okEnd; w.allocsOK {
		w.allocBytes, w.mallocs = allocEnd[0]-allocStart[0], allocEnd[1]-allocStart[1]
	}
	w.rss, err = rss(rt.pid())
	return w, err
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
