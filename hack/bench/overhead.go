package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// overheadModel is the ModelDeployment's model name: any name without a scripted
// behaviour makes the demo provider echo.
const overheadModel = "bench-echo"

// frontDoorDefault is -front-door's default. "auto" measures each of the runtime's
// front doors (POST /v1/chat/completions and POST /v1/messages, spec/compat.md) when
// the binary serves it, and skips it, saying so, when the binary answers the plain 404
// of a route it does not have; "on" makes that an error, here and in the tiny mode of
// go test ./hack/bench/. Set it to "on" once every binary the bench is meant to measure
// has the front doors.
const frontDoorDefault = "on"

// executionIDHeader is the header in which a front door answers the execution's id.
const executionIDHeader = "Switchboard-Execution-Id"

// Side names of the table, as the test and the docs read them.
const (
	sideDirect    = "direct"
	sideRelay     = "relay"
	sideRuntime   = "runtime"
	sideTranslate = "translate"
	sideFrontDoor = "frontdoor"
	sideMessages  = "frontdoor-messages"
	sideBudget    = "native+budget"
)

// budgetDeployment and budgetCostMetric name the series of /metrics that counts what
// the budget side's executions settled: it grows only when an execution held a
// reservation and settled it (spec/budgets.md, "Metrics"), so the run checks at every
// level that the Budget was in the path.
const (
	budgetDeployment = benchNamespace + "/bench"
	budgetCostMetric = `switchboard_cost_total{currency="USD",deployment="` + budgetDeployment + `"}`
)

// doorSide is one of the runtime's front doors, measured in a switchboard process of
// its own so that its CPU time is its own.
type doorSide struct {
	side, route, process string
	// client returns the call of a side streaming from the door at url.
	client func(url string) (func(context.Context, string) (callTimes, error), error)
	// skipped, when set, is why the door is not measured.
	skipped string
}

// overheadSide is one way of making the call: the direct call, or through one server.
type overheadSide struct {
	name string
	// pid is the server process whose CPU time and memory are read; 0 for none (the
	// direct call, a peer without -peer-pid).
	pid  int
	call func(context.Context) (callTimes, error)
}

// peerFlags name an OpenAI-compatible gateway the user started, measured beside the
// others.
type peerFlags struct {
	url, model, key, name string
	pid                   int
}

func (p *peerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.url, "peer", "", "base URL of an OpenAI-compatible gateway to measure too (…/v1: POST …/chat/completions), pointed at the demo provider (-provider-addr)")
	fs.StringVar(&p.model, "peer-model", overheadModel, "model the peer is asked for (one that it sends upstream as "+overheadModel+")")
	fs.StringVar(&p.key, "peer-key", "", "bearer token for the peer, if it wants one")
	fs.IntVar(&p.pid, "peer-pid", 0, "process id of the peer, for its CPU time and memory (default: not measured)")
	fs.StringVar(&p.name, "peer-name", "peer", "the peer's name in the tables")
}

// peerName is what -peer-name may be: a word that is not another side's.
var peerName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)

func (p *peerFlags) check() error {
	if p.url == "" {
		return nil
	}
	u, err := url.Parse(p.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("-peer must be an http or https base URL, e.g. http://127.0.0.1:8080/v1")
	}
	if !peerName.MatchString(p.name) || slices.Contains([]string{sideDirect, sideRelay, sideRuntime, sideTranslate, sideFrontDoor, sideMessages, "added", "ratio"}, p.name) ||
		strings.HasSuffix(p.name, "_added") {
		return errors.New("-peer-name must be a lower-case word of up to 20 letters, digits and dashes, not another side's name")
	}
	if p.model == "" {
		return errors.New("-peer-model must not be empty")
	}
	if p.pid < 0 {
		return errors.New("-peer-pid must be a process id")
	}
	if p.pid > 0 {
		if _, err := cpuTime(p.pid); err != nil {
			return fmt.Errorf("-peer-pid: %w", err)
		}
	}
	return nil
}

// runOverhead measures what a call through a server adds to the same call made to the
// provider directly: at each concurrency level, n calls per side, in batches that
// alternate between the sides (and which side goes first), so that drift of the machine
// hits every side alike.
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
	frontDoor := fs.String("front-door", frontDoorDefault, "the runtime's front doors, POST /v1/chat/completions and POST /v1/messages: on, off, or auto (each skipped, saying so, when the binary has no such route)")
	providerAddr := fs.String("provider-addr", "127.0.0.1:0", "listen address of the demo provider (fixed, so that a -peer can be pointed at it)")
	withBudget := fs.Bool("budget", true, "measure "+sideBudget+" too: the native path on a runtime whose model is priced, capped and governed by one Budget that never refuses (-budget=false for a binary without Budgets)")
	store := fs.String("event-store", "memory", "EventStore of every switchboard of the run, and so of the Budget's counters: memory or redis")
	redisURL := fs.String("redis-url", "redis://127.0.0.1:6379/15", "switchboard --redis-url for -event-store redis; nothing is flushed, executions expire after -retention, the Budget's counters after their month")
	var peer peerFlags
	peer.register(fs)
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
	if !slices.Contains([]string{"on", "off", "auto"}, *frontDoor) {
		return errors.New("-front-door must be on, off or auto")
	}
	if err := peer.check(); err != nil {
		return err
	}
	var storeFlags []string
	var rtt *redisPinger
	switch *store {
	case "memory":
		storeFlags = []string{"--event-store", "memory"}
	case "redis":
		storeFlags = []string{"--event-store", "redis", "--redis-url", *redisURL}
		if rtt, err = newRedisPinger(ctx, *redisURL); err != nil {
			return err
		}
		defer rtt.close()
	default:
		return errors.New("-event-store must be memory or redis")
	}

	s, err := newSession(ctx, cf, stdout, stderr)
	if err != nil {
		return err
	}
	defer s.close(&err)
	provider, err := s.startDemoProviderAt(*providerAddr, *chunks, 0)
	if err != nil {
		return err
	}
	endpoint := "http://" + provider + "/openai/v1"
	// Every server in a process of its own, so that each is idle during the other
	// sides' batches and its CPU time and memory are its own.
	rt, err := s.startSwitchboard(ctx, "switchboard", endpoint, storeFlags...)
	if err != nil {
		return err
	}
	relay, err := s.startRelay("relay", endpoint)
	if err != nil {
		return err
	}
	translate, err := s.startRelay("relay-translate", endpoint)
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
	direct, err := newChatClient(sideDirect, hc, endpoint+"/chat/completions", overheadModel, benchKey, text)
	if err != nil {
		return err
	}
	tcl, err := newChatClient(sideTranslate, hc, "http://"+translate.api+"/v1/chat/completions", benchAbility, "", text)
	if err != nil {
		return err
	}
	req := textRequest(text)
	// The sides, in the order of the table: the direct call, then the servers a call
	// can go through, each with its process for CPU and memory.
	sides := []overheadSide{
		{sideDirect, 0, func(ctx context.Context) (callTimes, error) { return direct.call(ctx, text) }},
		{sideRelay, relay.pid(), func(ctx context.Context) (callTimes, error) { return runtimeCall(ctx, rcl, req, text) }},
		{sideRuntime, rt.pid(), func(ctx context.Context) (callTimes, error) { return runtimeCall(ctx, cl, req, text) }},
		{sideTranslate, translate.pid(), func(ctx context.Context) (callTimes, error) { return tcl.call(ctx, text) }},
	}
	var budgetRT *runtimeProc
	if *withBudget {
		// The same native call to a runtime of its own whose manifests differ only by
		// the Budget and what it needs (pricing, the output cap), on the same store and
		// upstream, so that the difference between the two is the Budget's admission
		// and settlement.
		if budgetRT, err = s.startSwitchboardWith(ctx, "switchboard-budget", budgetManifest(endpoint, overheadModel), storeFlags...); err != nil {
			return err
		}
		bcl, err := newRuntimeClient(budgetRT.api, hc)
		if err != nil {
			return err
		}
		sides = slices.Insert(sides, 3, overheadSide{sideBudget, budgetRT.pid(), func(ctx context.Context) (callTimes, error) { return runtimeCall(ctx, bcl, req, text) }})
	}
	doors := []*doorSide{{
		side: sideFrontDoor, route: "/v1/chat/completions", process: "switchboard-frontdoor",
		client: func(url string) (func(context.Context, string) (callTimes, error), error) {
			c, err := newChatClient(sideFrontDoor, hc, url, benchAbility, "", text)
			if err != nil {
				return nil, err
			}
			c.idHeader = executionIDHeader
			return c.call, nil
		},
	}, {
		side: sideMessages, route: "/v1/messages", process: "switchboard-messages",
		client: func(url string) (func(context.Context, string) (callTimes, error), error) {
			c, err := newMessagesClient(sideMessages, hc, url, benchAbility, text)
			if err != nil {
				return nil, err
			}
			return c.call, nil
		},
	}}
	if *frontDoor == "off" {
		doors = nil
	}
	for _, door := range doors {
		fd, err := s.startSwitchboard(ctx, door.process, endpoint, storeFlags...)
		if err != nil {
			return err
		}
		call, err := door.client("http://" + fd.api + door.route)
		if err != nil {
			return err
		}
		switch err := probe(ctx, call, text); {
		case err == nil:
			sides = append(sides, overheadSide{door.side, fd.pid(), func(ctx context.Context) (callTimes, error) { return call(ctx, text) }})
		case *frontDoor == "auto" && noRoute(err):
			door.skipped = "POST " + door.route + " answered 404 with no error of the door's shape: this binary has no such front door"
			if err := fd.stop(); err != nil {
				return err
			}
		default:
			return err
		}
	}
	if peer.url != "" {
		pcl, err := newChatClient(peer.name, hc, strings.TrimSuffix(peer.url, "/")+"/chat/completions", peer.model, peer.key, text)
		if err != nil {
			return err
		}
		if err := probe(ctx, pcl.call, text); err != nil {
			return fmt.Errorf("peer (is it pointed at the demo provider, %s, with the key %q?): %w", endpoint, benchKey, err)
		}
		sides = append(sides, overheadSide{peer.name, peer.pid, func(ctx context.Context) (callTimes, error) { return pcl.call(ctx, text) }})
	}
	index := map[string]int{}
	for i, side := range sides {
		index[side.name] = i
	}

	fmt.Fprintf(stdout, "overhead: echo of %d runes in %d deltas, upstream delay 0; %d calls per side per level, alternating batches; %s EventStore\n",
		len(text), *chunks, *n, *store)
	fmt.Fprintln(stdout, "  direct:    POST /openai/v1/chat/completions to the demo provider, streamed with include_usage, until data: [DONE]")
	fmt.Fprintln(stdout, "  relay:     the baseline (hack/relay): POST /v1/executions, then GET …/events, with net/http alone, events in memory")
	fmt.Fprintln(stdout, "  runtime:   POST /v1/executions, then GET …/events until execution.completed (the native path)")
	if *withBudget {
		fmt.Fprintf(stdout, "  %s: the native path on a runtime of its own whose model is priced (USD), capped (maxOutputTokens 256) and governed by one Budget\n", sideBudget)
		fmt.Fprintln(stdout, "    (Month: cost 1000000.00, requests 1000000000; never refuses): each execution reserves and settles a cost and a request")
	}
	fmt.Fprintln(stdout, "  translate: the baseline's one-exchange mode: POST /v1/chat/completions, each upstream chunk re-emitted, until data: [DONE]")
	for _, door := range doors {
		switch {
		case door.skipped != "":
			fmt.Fprintf(stdout, "  %s: skipped: %s (-front-door=on makes it an error)\n", door.side, door.skipped)
		case door.side == sideFrontDoor:
			fmt.Fprintf(stdout, "  %s: POST /v1/chat/completions to the runtime (model %q), streamed with include_usage, until data: [DONE]\n", door.side, benchAbility)
		default:
			fmt.Fprintf(stdout, "  %s: POST /v1/messages to the runtime (model %q, anthropic-version %s), streamed, until message_stop\n", door.side, benchAbility, anthropicVersion)
		}
	}
	if peer.url != "" {
		fmt.Fprintf(stdout, "  %s: %s/chat/completions (model %q), streamed with include_usage, until data: [DONE]", peer.name, strings.TrimSuffix(peer.url, "/"), peer.model)
		if peer.pid == 0 {
			fmt.Fprint(stdout, "; CPU and memory not measured (no -peer-pid)")
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, "  ttfo: POST sent → first text (first content chunk, text_delta or output.delta); end: → data: [DONE], message_stop or execution.completed")
	fmt.Fprintln(stdout, "  added: runtime − direct; SIDE_added: SIDE − direct; ratio: runtime ÷ direct; every side over one keep-alive client")
	fmt.Fprintln(stdout)
	lat := newTable(stdout, "conc", "side", "calls", "ttfo_p50_ms", "ttfo_p99_ms", "end_p50_ms", "end_p99_ms")
	type procRow struct {
		conc   int
		side   string
		calls  int
		accept [2]time.Duration // POST → response head, p50 and p99
		cpu    time.Duration    // per call; -1 when not measured
		rss    int64
	}
	var procRows []procRow
	// cmp are, per level and side, the added p50 ttfo and the CPU time per call.
	type cmpRow struct {
		conc  int
		added []time.Duration
		cpu   []time.Duration
		p     [][4]time.Duration // ttfo and end, p50 and p99, per side
		rtt   time.Duration      // p50 round trip to Redis after the level; 0 without Redis
		ops   [2]time.Duration   // the budget side's mean hold and settle, as its store timed them; -1 when unknown
	}
	var cmps []cmpRow
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
		var costBefore float64
		var opsBefore []float64
		if budgetRT != nil {
			costBefore, _ = metricValue(ctx, budgetRT.metrics, budgetCostMetric) // absent before the first settlement
			opsBefore, _ = goMetrics(ctx, budgetRT.metrics, budgetOpSeries(*store)...)
		}
		cpus := make([]*cpuMeter, len(sides))
		for i, side := range sides {
			if side.pid != 0 {
				if cpus[i], err = startCPU(side.pid); err != nil {
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
		cr := cmpRow{conc: c, added: make([]time.Duration, len(sides)), cpu: make([]time.Duration, len(sides))}
		cr.ops = [2]time.Duration{-1, -1}
		if budgetRT != nil {
			if err := budgetSettled(ctx, budgetRT, costBefore); err != nil {
				return err
			}
			if after, ok := goMetrics(ctx, budgetRT.metrics, budgetOpSeries(*store)...); ok && opsBefore != nil {
				cr.ops = meanOps(opsBefore, after)
			}
		}
		if rtt != nil {
			if cr.rtt, err = rtt.p50(ctx, 1000); err != nil {
				return err
			}
		}
		for i, side := range sides {
			cr.cpu[i] = -1
			if side.name == sideDirect {
				continue
			}
			row := procRow{conc: c, side: side.name, calls: len(got[i]), cpu: -1}
			if side.pid != 0 {
				if row.cpu, err = cpus[i].perOp(len(got[i])); err != nil {
					return err
				}
				if row.rss, err = rss(side.pid); err != nil {
					return err
				}
				cr.cpu[i] = row.cpu
			}
			var accept []time.Duration
			for _, t := range got[i] {
				accept = append(accept, t.accepted)
			}
			accept = sortedCopy(accept)
			row.accept = [2]time.Duration{percentile(accept, .5), percentile(accept, .99)}
			procRows = append(procRows, row)
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
		d, r := p[index[sideDirect]], p[index[sideRuntime]]
		lat.row(cs, "added", "", signedMS(r[0]-d[0]), signedMS(r[1]-d[1]), signedMS(r[2]-d[2]), signedMS(r[3]-d[3]))
		for i, side := range sides {
			x := p[i]
			cr.added[i] = x[0] - d[0]
			if side.name != sideDirect && side.name != sideRuntime {
				lat.row(cs, side.name+"_added", "", signedMS(x[0]-d[0]), signedMS(x[1]-d[1]), signedMS(x[2]-d[2]), signedMS(x[3]-d[3]))
			}
		}
		lat.row(cs, "ratio", "", ratio(r[0], d[0]), ratio(r[1], d[1]), ratio(r[2], d[2]), ratio(r[3], d[3]))
		cr.p = p
		cmps = append(cmps, cr)
	}
	if err := lat.flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "servers over the measured batches (accept: POST sent → response head, the 202 of relay and runtime, the 200 of a stream; CPU: utime+stime from /proc; RSS: VmRSS at the end of the level)")
	pt := newTable(stdout, "conc", "side", "calls", "accept_p50_ms", "accept_p99_ms", "cpu_ms_per_call", "rss_MiB")
	for _, r := range procRows {
		cpu, mem := "n/a", "n/a"
		if r.cpu >= 0 {
			cpu, mem = ms(r.cpu), mib(r.rss)
		}
		pt.row(fmt.Sprint(r.conc), r.side, fmt.Sprint(r.calls), ms(r.accept[0]), ms(r.accept[1]), cpu, mem)
	}
	if err := pt.flush(); err != nil {
		return err
	}

	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "each server against the native path and the translating baseline (added: ttfo p50 − direct's; cpu: per call)")
	ct := newTable(stdout, "conc", "side", "added_ttfo_p50_ms", "added_vs_runtime", "added_vs_translate", "cpu_ms_per_call", "cpu_vs_runtime")
	iRT, iTr := index[sideRuntime], index[sideTranslate]
	for _, cr := range cmps {
		for i, side := range sides {
			if side.name == sideDirect {
				continue
			}
			cpu, cpuRatio := "n/a", "n/a"
			if cr.cpu[i] >= 0 {
				cpu, cpuRatio = ms(cr.cpu[i]), ratio(cr.cpu[i], cr.cpu[iRT])
			}
			ct.row(fmt.Sprint(cr.conc), side.name, signedMS(cr.added[i]), ratio(cr.added[i], cr.added[iRT]), ratio(cr.added[i], cr.added[iTr]), cpu, cpuRatio)
		}
	}
	if err := ct.flush(); err != nil {
		return err
	}
	if iB, ok := index[sideBudget]; ok {
		fmt.Fprintln(stdout)
		fmt.Fprintf(stdout, "the Budget's cost per execution: %s − runtime in this run (%s EventStore); vs_runtime: %s's added ttfo p50 or CPU ÷ the runtime's\n", sideBudget, *store, sideBudget)
		fmt.Fprintln(stdout, "  hold_us, settle_us: the mean reservation and settlement as the runtime's store timed them over the level (switchboard_eventstore_operation_duration_seconds)")
		fmt.Fprintln(stdout, "  redis_rtt_p50_us: PING from this process after the level; within_rtt: ttfo p50 added ≤ one Redis round trip (the target)")
		bt := newTable(stdout, "conc", "store", "ttfo_p50_added_us", "end_p50_added_us", "added_vs_runtime", "cpu_added_us_per_call", "cpu_vs_runtime", "hold_us", "settle_us", "redis_rtt_p50_us", "within_rtt")
		for _, cr := range cmps {
			b, r := cr.p[iB], cr.p[iRT]
			rttUS, within := "n/a", "n/a"
			if cr.rtt > 0 {
				rttUS, within = us(cr.rtt), "met"
				if b[0]-r[0] > cr.rtt {
					within = "missed"
				}
			}
			hold, settle := "n/a", "n/a"
			if cr.ops[0] >= 0 {
				hold, settle = us(cr.ops[0]), us(cr.ops[1])
			}
			bt.row(fmt.Sprint(cr.conc), *store, signedUS(b[0]-r[0]), signedUS(b[2]-r[2]), ratio(cr.added[iB], cr.added[iRT]),
				signedUS(cr.cpu[iB]-cr.cpu[iRT]), ratio(cr.cpu[iB], cr.cpu[iRT]), hold, settle, rttUS, within)
		}
		if err := bt.flush(); err != nil {
			return err
		}
	}
	var measured []string // the front doors measured
	for _, door := range doors {
		if _, ok := index[door.side]; ok {
			measured = append(measured, door.side)
		}
	}
	if len(measured) == 0 {
		return nil
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "front doors against their targets (spec/performance.md): added ≤ 0.60x runtime's and ≤ 1.20x translate's; cpu ≤ 0.70x runtime's")
	tt := newTable(stdout, "conc", "side", "added_vs_runtime", "added_vs_translate", "cpu_vs_runtime")
	for _, cr := range cmps {
		for _, side := range measured {
			i := index[side]
			tt.row(fmt.Sprint(cr.conc), side, target(cr.added[i], cr.added[iRT], 0.6), target(cr.added[i], cr.added[iTr], 1.2), target(cr.cpu[i], cr.cpu[iRT], 0.7))
		}
	}
	return tt.flush()
}

// target formats a/b and whether it is at most limit.
func target(a, b time.Duration, limit float64) string {
	if b <= 0 || a < 0 {
		return "n/a"
	}
	verdict := "met"
	if float64(a)/float64(b) > limit {
		verdict = "missed"
	}
	return ratio(a, b) + " " + verdict
}

// probe makes one call, so that a side that cannot answer fails before the levels, and
// a front door's absence is told apart from its failure.
func probe(ctx context.Context, call func(context.Context, string) (callTimes, error), text string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := call(ctx, text)
	return err
}

// noRoute reports whether err is a 404 without a front door's error shape: the answer
// of a binary that has no such route, where a front door that refuses the model answers
// a not_found_error in error.type, OpenAI's and Anthropic's alike (spec/compat.md).
func noRoute(err error) bool {
	var se *statusError
	if !errors.As(err, &se) || se.status != 404 {
		return false
	}
	var body struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	return json.Unmarshal(se.body, &body) != nil || body.Error.Type != "not_found_error"
}
