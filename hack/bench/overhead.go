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

	// One keep-alive client for both sides, with an idle connection kept per worker.
	hc := newHTTPClient(2 * slices.Max(concs))
	cl, err := newRuntimeClient(rt.api, hc)
	if err != nil {
		return err
	}
	text := promptText(4 * *chunks)
	direct, err := newDirectClient(hc, provider, overheadModel, text)
	if err != nil {
		return err
	}
	req := textRequest(text)
	sides := [2]func(context.Context) (callTimes, error){
		func(ctx context.Context) (callTimes, error) { return direct.call(ctx, text) },
		func(ctx context.Context) (callTimes, error) { return runtimeCall(ctx, cl, req, text) },
	}

	fmt.Fprintf(stdout, "overhead: echo of %d runes in %d deltas, upstream delay 0; %d calls per side per level, alternating batches\n",
		len(text), *chunks, *n)
	fmt.Fprintln(stdout, "  ttfo: POST sent → first text (direct: first content chunk; runtime: first output.delta)")
	fmt.Fprintln(stdout, "  end:  POST sent → end of stream (direct: data: [DONE]; runtime: execution.completed)")
	fmt.Fprintln(stdout, "  runtime: POST /v1/executions, then GET …/events; both sides over one keep-alive client")
	fmt.Fprintln(stdout)
	lat := newTable(stdout, "conc", "side", "calls", "ttfo_p50_ms", "ttfo_p99_ms", "end_p50_ms", "end_p99_ms")
	type procRow struct {
		conc, executions int
		accept           [2]time.Duration // POST → 202, p50 and p99
		cpu              time.Duration
		rss              int64
	}
	var procRows []procRow
	for _, c := range concs {
		fmt.Fprintf(stderr, "bench: overhead at concurrency %d\n", c)
		for _, side := range sides {
			if _, err := runConcurrent(ctx, c, *warmup, side); err != nil {
				return err
			}
		}
		size := *batch
		if size == 0 {
			size = max(100, 8*c)
		}
		cpu, err := startCPU(rt.pid())
		if err != nil {
			return err
		}
		var got [2][]callTimes
		for b := 0; len(got[0]) < *n; b++ {
			k := min(size, *n-len(got[0]))
			for j := range 2 {
				side := (b + j) % 2 // even batches start with the direct side, odd ones with the runtime
				times, err := runConcurrent(ctx, c, k, sides[side])
				if err != nil {
					return err
				}
				got[side] = append(got[side], times...)
			}
		}
		perExec, err := cpu.perOp(len(got[1]))
		if err != nil {
			return err
		}
		mem, err := rss(rt.pid())
		if err != nil {
			return err
		}
		var accept []time.Duration
		for _, t := range got[1] {
			accept = append(accept, t.accepted)
		}
		accept = sortedCopy(accept)
		procRows = append(procRows, procRow{conc: c, executions: len(got[1]), cpu: perExec, rss: mem,
			accept: [2]time.Duration{percentile(accept, .5), percentile(accept, .99)}})

		var ttfo, end [2][]time.Duration
		for side := range 2 {
			for _, t := range got[side] {
				ttfo[side] = append(ttfo[side], t.firstOutput)
				end[side] = append(end[side], t.end)
			}
			ttfo[side], end[side] = sortedCopy(ttfo[side]), sortedCopy(end[side])
		}
		cs := fmt.Sprint(c)
		p := func(side int) [4]time.Duration {
			return [4]time.Duration{percentile(ttfo[side], .5), percentile(ttfo[side], .99),
				percentile(end[side], .5), percentile(end[side], .99)}
		}
		d, r := p(0), p(1)
		lat.row(cs, "direct", fmt.Sprint(len(got[0])), ms(d[0]), ms(d[1]), ms(d[2]), ms(d[3]))
		lat.row(cs, "runtime", fmt.Sprint(len(got[1])), ms(r[0]), ms(r[1]), ms(r[2]), ms(r[3]))
		lat.row(cs, "added", "", signedMS(r[0]-d[0]), signedMS(r[1]-d[1]), signedMS(r[2]-d[2]), signedMS(r[3]-d[3]))
		lat.row(cs, "ratio", "", ratio(r[0], d[0]), ratio(r[1], d[1]), ratio(r[2], d[2]), ratio(r[3], d[3]))
	}
	if err := lat.flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "runtime calls and process over the measured batches (accept: POST sent → 202; CPU: utime+stime from /proc; RSS: VmRSS at the end of the level)")
	pt := newTable(stdout, "conc", "executions", "accept_p50_ms", "accept_p99_ms", "cpu_ms_per_exec", "rss_MiB")
	for _, r := range procRows {
		pt.row(fmt.Sprint(r.conc), fmt.Sprint(r.executions), ms(r.accept[0]), ms(r.accept[1]), ms(r.cpu), mib(r.rss))
	}
	return pt.flush()
}
