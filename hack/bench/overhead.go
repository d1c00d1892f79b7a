package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"
)

// overheadModel is the ModelDeployment's model name: any name without a scripted
// behaviour makes the demo provider echo.
const overheadModel = "bench-echo"

// runOverhead measures what a call through the runtime adds to the same call made to
// the provider directly: at each concurrency level, n calls per side, in batches that
// alternate between direct and runtime calls (and which side goes first), so that drift
// of the machine hits both sides alike.
func runOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf common
	cf.register(fs)
	levels := fs.String("c", "1,16,64", "concurrency levels, comma-separated")
	n := fs.Int("n", 2000, "measured calls per side at each level")
	batch := fs.Int("batch", 0, "calls per side in one batch (default: max(100, 8 × concurrency))")
	warmup := fs.Int("warmup", 200, "unmeasured calls per side before each level")
	chunks := fs.Int("chunks", 10, "text deltas per answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	concs, err := parseInts(*levels)
	if err != nil {
		return fmt.Errorf("-c: %w", err)
	}
	if *n < 1 || *batch < 0 || *warmup < 0 || *chunks < 1 {
		return errors.New("-n and -chunks must be positive, -batch and -warmup not negative")
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
	rt, err := s.startSwitchboard(ctx, "switchboard", "http://"+provider+"/openai/v1", overheadModel)
	if err != nil {
		return err
	}
	relay, err := s.startRelay("http://"+provider+"/openai/v1", overheadModel)
	if err != nil {
		return err
	}

	// One keep-alive client for every side, with an idle connection kept per worker.
	hc := newHTTPClient(2 * slices.Max(concs))
	cl, err := newRuntimeClient(rt.api, hc)
	if err != nil {
		return err
	}
	rcl, err := newRuntimeClient(relay.api, hc)
	if err != nil {
		return err
	}
	text := promptText(4 * *chunks)
	direct, err := newDirectClient(hc, provider, overheadModel, text)
	if err != nil {
		return err
	}
	req := textRequest(text)
	// The sides, in the order of the table: the direct call, then the servers a call
	// can go through, each with its process for CPU and memory.
	sides := []struct {
		name string
		proc *runtimeProc
		call func(context.Context) (callTimes, error)
	}{
		{"direct", nil, func(ctx context.Context) (callTimes, error) { return direct.call(ctx, text) }},
		{"relay", relay, func(ctx context.Context) (callTimes, error) { return runtimeCall(ctx, rcl, req, text) }},
		{"runtime", rt, func(ctx context.Context) (callTimes, error) { return runtimeCall(ctx, cl, req, text) }},
	}
	const (
		sideDirect  = 0
		sideRelay   = 1
		sideRuntime = 2
	)

	fmt.Fprintf(stdout, "overhead: echo of %d runes in %d deltas, upstream delay 0; %d calls per side per level, alternating batches\n",
		len(text), *chunks, *n)
	fmt.Fprintln(stdout, "  ttfo: POST sent → first text (direct: first content chunk; relay, runtime: first output.delta)")
	fmt.Fprintln(stdout, "  end:  POST sent → end of stream (direct: data: [DONE]; relay, runtime: execution.completed)")
	fmt.Fprintln(stdout, "  relay, runtime: POST /v1/executions, then GET …/events; every side over one keep-alive client")
	fmt.Fprintln(stdout, "  relay: the baseline (hack/relay), the same calls and events with net/http alone, events in memory")
	fmt.Fprintln(stdout, "  added: runtime − direct; relay added: relay − direct; ratio: runtime ÷ direct")
	fmt.Fprintln(stdout)
	lat := newTable(stdout, "conc", "side", "calls", "ttfo_p50_ms", "ttfo_p99_ms", "end_p50_ms", "end_p99_ms")
	type procRow struct {
		conc       int
		side       string
		executions int
		accept     [2]time.Duration // POST → 202, p50 and p99
		cpu        time.Duration
		rss        int64
	}
	var procRows []procRow
	for _, c := range concs {
		fmt.Fprintf(stderr, "bench: overhead at concurrency %d\n", c)
		for _, side := range sides {
			if _, err := runConcurrent(ctx, c, *warmup, side.call); err != nil {
				return fmt.Errorf("%s: %w", side.name, err)
			}
		}
		size := *batch
		if size == 0 {
			size = max(100, 8*c)
		}
		cpus := make([]*cpuMeter, len(sides))
		for i, side := range sides {
			if side.proc != nil {
				if cpus[i], err = startCPU(side.proc.pid()); err != nil {
					return err
				}
			}
		}
		got := make([][]callTimes, len(sides))
		for b := 0; len(got[0]) < *n; b++ {
			k := min(size, *n-len(got[0]))
			for j := range sides {
				side := (b + j) % len(sides) // each batch starts with the next side
				times, err := runConcurrent(ctx, c, k, sides[side].call)
				if err != nil {
					return fmt.Errorf("%s: %w", sides[side].name, err)
				}
				got[side] = append(got[side], times...)
			}
		}
		for i, side := range sides {
			if side.proc == nil {
				continue
			}
			perExec, err := cpus[i].perOp(len(got[i]))
			if err != nil {
				return err
			}
			mem, err := rss(side.proc.pid())
			if err != nil {
				return err
			}
			var accept []time.Duration
			for _, t := range got[i] {
				accept = append(accept, t.accepted)
			}
			accept = sortedCopy(accept)
			procRows = append(procRows, procRow{conc: c, side: side.name, executions: len(got[i]), cpu: perExec, rss: mem,
				accept: [2]time.Duration{percentile(accept, .5), percentile(accept, .99)}})
		}

		// p are a side's ttfo and end, p50 and p99.
		p := make([][4]time.Duration, len(sides))
		for i := range sides {
			var ttfo, end []time.Duration
			for _, t := range got[i] {
				ttfo = append(ttfo, t.firstOutput)
				end = append(end, t.end)
			}
			ttfo, end = sortedCopy(ttfo), sortedCopy(end)
			p[i] = [4]time.Duration{percentile(ttfo, .5), percentile(ttfo, .99), percentile(end, .5), percentile(end, .99)}
		}
		cs := fmt.Sprint(c)
		for i, side := range sides {
			lat.row(cs, side.name, fmt.Sprint(len(got[i])), ms(p[i][0]), ms(p[i][1]), ms(p[i][2]), ms(p[i][3]))
		}
		d, rl, r := p[sideDirect], p[sideRelay], p[sideRuntime]
		lat.row(cs, "added", "", signedMS(r[0]-d[0]), signedMS(r[1]-d[1]), signedMS(r[2]-d[2]), signedMS(r[3]-d[3]))
		lat.row(cs, "relay_added", "", signedMS(rl[0]-d[0]), signedMS(rl[1]-d[1]), signedMS(rl[2]-d[2]), signedMS(rl[3]-d[3]))
		lat.row(cs, "ratio", "", ratio(r[0], d[0]), ratio(r[1], d[1]), ratio(r[2], d[2]), ratio(r[3], d[3]))
	}
	if err := lat.flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "relay and runtime calls and processes over the measured batches (accept: POST sent → 202; CPU: utime+stime from /proc; RSS: VmRSS at the end of the level)")
	pt := newTable(stdout, "conc", "side", "executions", "accept_p50_ms", "accept_p99_ms", "cpu_ms_per_exec", "rss_MiB")
	for _, r := range procRows {
		pt.row(fmt.Sprint(r.conc), r.side, fmt.Sprint(r.executions), ms(r.accept[0]), ms(r.accept[1]), ms(r.cpu), mib(r.rss))
	}
	return pt.flush()
}
