package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Budgets end to end (spec/budgets.md): the built binary enforcing Budgets read from the
// manifests folder against the store's counters — exactly the limit admitted when
// hundreds of requests race for it on two replicas; a stream cut by a replica's SIGKILL
// settled by the survivor to what it produced, once; routing falling back to a model
// with budget left, then 429 quota_exhausted, natively and through the OpenAI front
// door.
//
// The counters are read the way the runtime names them: a standalone Budget's uid is
// "file:<namespace>/<name>" (spec/budgets.md, "Windows": counters belong to the uid and
// the window's start). Every Budget here counts in a UTC Day window, and each test
// starts clear of midnight UTC (clearOfMidnight), so that its counters stay in one
// window.

// clearOfMidnight waits, when less than two minutes of the UTC day are left, until the
// next day has begun: a test that ran across midnight would split its counters over
// two Day windows.
func clearOfMidnight(t *testing.T) {
	t.Helper()
	now := time.Now().UTC()
	_, end := budget.Day.Bounds(now, time.UTC)
	if left := end.Sub(now); left < 2*time.Minute {
		t.Logf("waiting %s for the next UTC day", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}
}

// exhaustedMessage is the fixed message of a refusal a window's reset can lift
// (spec/budgets.md, "Admission").
const exhaustedMessage = "the budget for this request is exhausted"

// Prices of the metered models, in micro-units per 1,000,000 tokens (the manifests
// declare them as decimals: "2.50" is 2,500,000).
const (
	priceInput      = 2_500_000  // inputTokens "2.50"
	priceCacheWrite = 3_125_000  // cacheWriteTokens "3.125"
	priceOutput     = 10_000_000 // outputTokens "10.00"
	priceReasoning  = 12_000_000 // reasoningTokens "12.00"
	// meteredMaxOutput is the models' limits.maxOutputTokens.
	meteredMaxOutput = 64
)

// ceilDiv is ⌈a / b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// decimal writes micro-units m ≥ 0 as the decimal a manifest declares ("0.083100").
func decimal(m int64) string { return fmt.Sprintf("%d.%06d", m/1_000_000, m%1_000_000) }

// inputEstimate is admission's input estimate of a request sent as body: ⌈bytes / 4⌉
// tokens (spec/budgets.md, "Admission"). The spec counts the request's JSON bytes; the
// bodies here are written as the runtime encodes the request again, which the test
// checks, so that the two readings agree.
func inputEstimate(tb testing.TB, body string) int64 {
	tb.Helper()
	req, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		tb.Fatalf("body %s: %v", body, err)
	}
	again, err := json.Marshal(req)
	if err != nil || string(again) != body {
		tb.Fatalf("the request encodes as %s (%v), not as its body %s: choose a body in that form", again, err, body)
	}
	return ceilDiv(int64(len(body)), 4)
}

// meteredModel renders a priced ModelDeployment over the demo provider's model.
func meteredModel(provider, name, model, ability, labels string) string {
	return fmt.Sprintf(`---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: %[2]s, namespace: e2e, labels: %[5]s}
spec:
  provider: openai-compatible
  model: %[3]s
  endpoint: http://%[1]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [%[4]s]
  capabilities: {streaming: true}
  pricing: {currency: USD, inputTokens: "2.50", outputTokens: "10.00", cacheWriteTokens: "3.125", reasoningTokens: "12.00"}
  limits: {maxOutputTokens: %[6]d}
`, provider, name, model, ability, labels, meteredMaxOutput)
}

// writeBudgetManifests writes the replicas' manifests and extra into a new folder.
func writeBudgetManifests(tb testing.TB, provider, extra string) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "models.yaml"), []byte(replicaManifests(provider)+extra), 0o600); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// dayBudget is the runtime's view of a standalone Budget e2e/name with one UTC Day limit,
// to read its counters with budget.Report.
func dayBudget(name string, cost, requests int64) budget.Budget {
	return budget.Budget{UID: "file:e2e/" + name, Namespace: "e2e", Name: name,
		Limits: []budget.Limit{{Window: budget.Day, Location: time.UTC, Cost: cost, Requests: requests}}}
}

// dayUsed reads what b's Day window has used from store.
func dayUsed(tb testing.TB, store eventstore.Budgets, b budget.Budget) budget.Amounts {
	tb.Helper()
	windows, err := budget.Report(context.Background(), store, &b, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return windows[0].Used
}

// waitSettled waits until store holds no reservation at all.
func waitSettled(tb testing.TB, store eventstore.Budgets, timeout time.Duration) {
	tb.Helper()
	eventually(tb, timeout, "every budget reservation to be settled", func() bool {
		pending, err := store.Pending(context.Background(), time.Now().Add(time.Hour), 0)
		if err != nil {
			tb.Fatal(err)
		}
		return len(pending) == 0
	})
}

// checkSettledOnce checks that none of ids holds a reservation any more: a second
// settlement reports false and changes nothing.
func checkSettledOnce(tb testing.TB, store eventstore.Budgets, ids []string) {
	tb.Helper()
	for _, id := range ids {
		settled, err := store.Settle(context.Background(), id, map[string]int64{budget.UnitCost: 0, budget.UnitRequests: 0})
		if err != nil || settled {
			tb.Errorf("settling %s again: %v, %v; want false (settled exactly once)", id, settled, err)
		}
	}
}

// checkExhausted checks a native 429 refusal a window's reset lifts: quota_exhausted,
// not retryable, retry_after_ms within the Day window and Retry-After its whole seconds,
// rounded up.
func checkExhausted(tb testing.TB, what string, status int, header http.Header, e *protocol.Error) {
	tb.Helper()
	if status != http.StatusTooManyRequests || e == nil || e.Code != protocol.CodeQuotaExhausted || e.Retryable || e.Message != exhaustedMessage {
		tb.Errorf("%s: %d %+v, want 429 quota_exhausted, not retryable, %q", what, status, e, exhaustedMessage)
		return
	}
	checkRetryAfter(tb, what, header, e.RetryAfterMs)
}

// checkRetryAfter checks that ms is the time to the next UTC midnight at most and that
// header's Retry-After is ms in whole seconds, rounded up.
func checkRetryAfter(tb testing.TB, what string, header http.Header, ms int64) {
	tb.Helper()
	if ms <= 0 || ms > (24*time.Hour).Milliseconds() {
		tb.Errorf("%s: retry_after_ms %d, want the time to the Day window's end (0 < ms ≤ 24h)", what, ms)
	}
	if got, want := header.Get("Retry-After"), strconv.FormatInt(ceilDiv(ms, 1000), 10); got != want {
		tb.Errorf("%s: Retry-After %q, want %q for retry_after_ms %d", what, got, want, ms)
	}
}

// acceptedID reads the execution id of a 202.
func acceptedID(tb testing.TB, p posted) string {
	tb.Helper()
	var acc struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(p.body, &acc); err != nil || acc.ID == "" {
		tb.Fatalf("202 body %s: no id (%v)", p.body, err)
	}
	return acc.ID
}

// costFacts sums the derived cost facts of a result (unit cost.usd, source derived) in
// micro-units, and counts them.
func costFacts(tb testing.TB, snap *protocol.Snapshot) (micro int64, n int) {
	tb.Helper()
	for _, u := range snap.Usage {
		if u.Unit != "cost.usd" {
			continue
		}
		if u.Source != protocol.SourceDerived {
			tb.Errorf("execution %s: cost fact %+v, want source derived", snap.ID, u)
		}
		m := math.Round(u.Quantity * 1_000_000)
		if m < 0 || math.Abs(m-u.Quantity*1_000_000) > 1e-6 {
			tb.Errorf("execution %s: cost fact %+v is not a whole number of micro-units", snap.ID, u)
		}
		micro += int64(m)
		n++
	}
	return micro, n
}

// edgeBody is the request of the concurrent test. Its worst case on the metered model
// (spec/budgets.md, "Admission"), which every admitted execution reserves:
//
//	input:  ⌈77 bytes / 4⌉ = 20 tokens at max(inputTokens 2.50, cacheWriteTokens 3.125) = 62.5
//	output: maxOutputTokens 64 at max(outputTokens 10.00, reasoningTokens 12.00)        = 768
//	        62.5 + 768 = 830.5 micro-units, rounded up to edgeWorst = 831
//
// The Budget's Day limit is room for exactly 100: cost 100 × 831 = 83,100 micro-units
// ("0.083100") and requests 100. An execution settles below its reservation (the demo
// reports 4 input tokens, one per word, and 5 output tokens, one per piece: 4 × 2.5 +
// 5 × 10 = 60), so cost alone would take more than 100 once the first ones settle;
// requests never give anything back, so exactly 100 are admitted, and the cost limit
// holds at the edge (100 running at once hold exactly 83,100).
const (
	edgeBody  = `{"ability":"metered","input":[{"type":"text","text":"one of three hundred"}]}`
	edgeWorst = 831
	edgeRoom  = 100
	edgeFired = 300
)

func TestBudgetAdmitsExactlyTheLimitAcrossReplicas(t *testing.T) {
	clearOfMidnight(t)
	input := inputEstimate(t, edgeBody)
	if worst := ceilDiv(input*max(priceInput, priceCacheWrite)+meteredMaxOutput*max(priceOutput, priceReasoning), 1_000_000); input != 20 || worst != edgeWorst {
		t.Fatalf("worst case %d micro-units for %d input tokens; the arithmetic documented at edgeBody says %d for 20", worst, input, edgeWorst)
	}
	limit := int64(edgeRoom * edgeWorst)
	if decimal(limit) != "0.083100" {
		t.Fatalf("limit %s, want 0.083100", decimal(limit))
	}
	edge := fmt.Sprintf(`---
apiVersion: ai.switchboard.dev/v1alpha1
kind: Budget
metadata: {name: edge, namespace: e2e}
spec:
  selector: {matchLabels: {budget: edge}}
  limits:
    - {window: Day, cost: "%s", requests: %d}
`, decimal(limit), edgeRoom)

	for _, tc := range []struct {
		name     string
		store    string
		replicas int
	}{
		{"two replicas sharing redis", "redis", 2},
		{"one replica on the memory store", "memory", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Five pieces 200 ms apart: an admitted execution runs for about a second,
			// while the rest of the 300 are decided.
			provider := startDemoProvider(t, "--delay", "200ms")
			dir := writeBudgetManifests(t, provider.addr, meteredModel(provider.addr, "metered", "echo", "metered", "{budget: edge}")+edge)
			// Room for all 300 at once: a slot is taken before the Budget is asked, and
			// a request without one is refused rate_limited.
			slots := []string{"--max-concurrent-executions", "400"}
			var (
				replicas    []*replica
				store       eventstore.Budgets
				metricsAddr string
			)
			if tc.store == "redis" {
				url := redisURL(t, dbBudgetLimit)
				rs := openRedisStore(t, url)
				store = rs
				for _, label := range []string{"A", "B"}[:tc.replicas] {
					replicas = append(replicas, startReplica(t, label, dir, url, slots...))
				}
			} else {
				metricsAddr = freeAddr(t)
				replicas = append(replicas, startMemoryReplica(t, dir, append(slots, "--metrics-bind-address", metricsAddr)...))
			}

			// All at once, alternating replicas.
			posts := make([]posted, edgeFired)
			errs := make([]error, edgeFired)
			fire := make(chan struct{})
			var wg sync.WaitGroup
			for i := range posts {
				wg.Go(func() {
					<-fire
					posts[i], errs[i] = postJSON(replicas[i%len(replicas)].api, edgeBody, nil)
				})
			}
			close(fire)
			wg.Wait()

			var ids []string
			refused := 0
			for i, p := range posts {
				what := fmt.Sprintf("POST %d on %s", i, replicas[i%len(replicas)].label)
				switch {
				case errs[i] != nil:
					t.Errorf("%s: %v", what, errs[i])
				case p.status == http.StatusAccepted:
					ids = append(ids, acceptedID(t, p))
				default:
					refused++
					checkExhausted(t, what, p.status, p.header, p.err)
				}
			}
			if len(ids) != edgeRoom || refused != edgeFired-edgeRoom {
				t.Fatalf("%d admitted and %d refused, want exactly %d and %d", len(ids), refused, edgeRoom, edgeFired-edgeRoom)
			}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			final := waitTerminal(t, replicas[0].client, ids, 30*time.Second)
			var spent int64
			for _, id := range ids {
				if st := final[id]; st.Status != protocol.StatusCompleted {
					t.Errorf("admitted execution %s: %s %+v, want completed", id, st.Status, st.Error)
				}
				snap, err := replicas[0].client.Result(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				cost, n := costFacts(t, snap)
				if n != 1 || cost <= 0 || cost > edgeWorst {
					t.Errorf("execution %s: %d cost facts totalling %d micro-units, want one, within (0, %d]", id, n, cost, edgeWorst)
				}
				spent += cost
			}
			t.Logf("%d admitted executions spent %s USD (cost facts)", len(ids), decimal(spent))

			if tc.store == "redis" {
				waitSettled(t, store, 30*time.Second)
				used := dayUsed(t, store, dayBudget("edge", limit, edgeRoom))
				if want := (budget.Amounts{Cost: spent, Requests: edgeRoom}); used != want {
					t.Errorf("the Budget's Day window used %+v, want %+v: the cost facts' sum and one request per admitted execution", used, want)
				}
				checkSettledOnce(t, store, ids)
				if again := dayUsed(t, store, dayBudget("edge", limit, edgeRoom)); again != used {
					t.Errorf("after settling again: used %+v, was %+v", again, used)
				}
				return
			}
			// The memory store lives in the replica: read its counters where it reports
			// them, the metrics (every 10 s in standalone mode).
			url := "http://" + metricsAddr + "/metrics"
			eventually(t, 30*time.Second, "the Budget's metrics to show the settled window", func() bool {
				fams := scrape(t, url)
				cost, okCost := budgetGauge(fams, "switchboard_budget_used", "edge", budget.UnitCost)
				requests, okRequests := budgetGauge(fams, "switchboard_budget_used", "edge", budget.UnitRequests)
				return okCost && okRequests && cost == float64(spent)/1_000_000 && requests == edgeRoom
			})
			fams := scrape(t, url)
			for unit, want := range map[string]float64{budget.UnitCost: float64(limit) / 1_000_000, budget.UnitRequests: edgeRoom} {
				if got, ok := budgetGauge(fams, "switchboard_budget_limit", "edge", unit); !ok || got != want {
					t.Errorf("switchboard_budget_limit{unit=%q} = %v (%v), want %v", unit, got, ok, want)
				}
			}
			if got, ok := counterValue(fams, "switchboard_budget_rejections_total", "edge"); !ok || got < edgeFired-edgeRoom {
				t.Errorf("switchboard_budget_rejections_total = %v (%v), want at least %d", got, ok, edgeFired-edgeRoom)
			}
		})
	}
}

// startMemoryReplica runs one switchboard on the memory store serving the manifests in
// dir; args are added to its flags.
func startMemoryReplica(tb testing.TB, dir string, args ...string) *replica {
	tb.Helper()
	r := &replica{label: "solo", api: freeAddr(tb), probe: freeAddr(tb)}
	flags := []string{"--manifests", dir, "--runtime-bind-address", r.api,
		"--health-probe-bind-address", r.probe, "--metrics-bind-address", "0",
		"--event-store", "memory", "--shutdown-grace", "1s"}
	r.out, r.proc = startLabeled(tb, "switchboard solo", "switchboard", append(flags, args...)...)
	c, err := client.New("http://" + r.api)
	if err != nil {
		tb.Fatal(err)
	}
	r.client = c
	r.waitReady(tb)
	return r
}

// budgetGauge returns the value of family name for Budget e2e/budgetName's Day window
// in unit.
func budgetGauge(fams map[string]*dto.MetricFamily, name, budgetName, unit string) (float64, bool) {
	for _, m := range metricsOf(fams, name, budgetName) {
		if label(m, "window") == string(budget.Day) && label(m, "unit") == unit && m.GetGauge() != nil {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// counterValue returns the value of counter family name for Budget e2e/budgetName.
func counterValue(fams map[string]*dto.MetricFamily, name, budgetName string) (float64, bool) {
	for _, m := range metricsOf(fams, name, budgetName) {
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

func metricsOf(fams map[string]*dto.MetricFamily, name, budgetName string) []*dto.Metric {
	var out []*dto.Metric
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			if label(m, "namespace") == "e2e" && label(m, "name") == budgetName {
				out = append(out, m)
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// cutBodies are the streams the kill test cuts: each of at least 40 runes, which the
// slow model streams in 10 pieces over 8 s; of different lengths, so that their input
// estimates and pieces differ.
var cutBodies = []string{
	`{"ability":"metered-stream","input":[{"type":"text","text":"` + strings.Repeat("abcdefghij", 4) + `"}]}`,
	`{"ability":"metered-stream","input":[{"type":"text","text":"` + strings.Repeat("klmnopqrst", 5) + `"}]}`,
	`{"ability":"metered-stream","input":[{"type":"text","text":"the quick brown fox jumps over the lazy dog, twice over"}]}`,
	`{"ability":"metered-stream","input":[{"type":"text","text":"` + strings.Repeat("uvwxyz0123", 7) + `"}]}`,
}

func TestBudgetSettledBySurvivorAfterKill(t *testing.T) {
	clearOfMidnight(t)
	url := redisURL(t, dbBudgetKill)
	store := openRedisStore(t, url)
	provider := startDemoProvider(t, "--chunks", "10", "--slow-delay", "800ms") // 8 s of stream
	extra := meteredModel(provider.addr, "metered-stream", "echo-slow", "metered-stream", "{budget: cut}") + `---
apiVersion: ai.switchboard.dev/v1alpha1
kind: Budget
metadata: {name: cut, namespace: e2e}
spec:
  selector: {matchLabels: {budget: cut}}
  limits:
    - {window: Day, cost: "1000.00", requests: 1000}
`
	dir := writeBudgetManifests(t, provider.addr, extra)
	a := startReplica(t, "A", dir, url)
	b := startReplica(t, "B", dir, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut := dayBudget("cut", 1000_000_000, 1000)

	ids := make([]string, len(cutBodies))
	inputs := map[string]int64{}
	var reserved int64
	for i, body := range cutBodies {
		p, err := postJSON(a.api, body, nil)
		if err != nil || p.status != http.StatusAccepted {
			t.Fatalf("POST %d on A: %d %+v %v", i, p.status, p.err, err)
		}
		ids[i] = acceptedID(t, p)
		inputs[ids[i]] = inputEstimate(t, body)
		// What admission reserved: the input estimate at the higher of the input and
		// cache write prices (3.125) and the output cap at the higher of the output and
		// reasoning prices (12.00), rounded up.
		reserved += ceilDiv(inputs[ids[i]]*max(priceInput, priceCacheWrite)+meteredMaxOutput*max(priceOutput, priceReasoning), 1_000_000)
	}
	eventually(t, 10*time.Second, "output on every stream", func() bool {
		for _, id := range ids {
			if len(outputDeltas(t, store, id)) < 3 {
				return false
			}
		}
		return true
	})
	// While they run, B sees what A reserved: the shared counters hold every worst case.
	if used := dayUsed(t, store, cut); used != (budget.Amounts{Cost: reserved, Requests: int64(len(ids))}) {
		t.Errorf("while the streams run, the Budget used %+v, want the reservations: cost %d, requests %d", used, reserved, len(ids))
	}

	a.kill(t)
	final := waitTerminal(t, b.client, ids, testLease+testCleanupGrace+takeoverSlack+10*time.Second)
	for _, id := range ids {
		checkOrphaned(t, "execution "+id, final[id].Error)
	}
	// B's sweep settles, every 5 s, the reservations older than that whose execution
	// ended.
	waitSettled(t, store, 30*time.Second)

	// What a cut stream costs (spec/budgets.md, "Settlement"): the demo provider sends
	// its usage only after the last piece, so nothing was reported and the runtime
	// derives it: the input estimate and ⌈output bytes / 4⌉ output tokens, at the
	// prices, rounded up once.
	var spent int64
	for _, id := range ids {
		events, err := store.Read(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkLog(t, id, events)
		for _, ev := range events {
			if ev.Type == protocol.EventUsageReported {
				t.Errorf("execution %s: %s %s before the cut; the demo provider reports usage only after the last piece", id, ev.Type, ev.Data)
			}
		}
		var outBytes int64
		deltas := outputDeltas(t, store, id)
		for _, d := range deltas {
			outBytes += int64(len(d))
		}
		if len(deltas) >= 10 {
			t.Errorf("execution %s: %d pieces, want a stream cut before its 10th", id, len(deltas))
		}
		cost := ceilDiv(inputs[id]*priceInput+ceilDiv(outBytes, 4)*priceOutput, 1_000_000)
		t.Logf("execution %s: %d input tokens, %d output bytes in %d pieces: %d micro-units", id, inputs[id], outBytes, len(deltas), cost)
		spent += cost
	}
	used := dayUsed(t, store, cut)
	if want := (budget.Amounts{Cost: spent, Requests: int64(len(ids))}); used != want {
		t.Errorf("after the survivor settled: used %+v, want %+v", used, want)
	}
	checkSettledOnce(t, store, ids)
	// Another sweep of B's, which must find nothing to settle.
	time.Sleep(6 * time.Second)
	if again := dayUsed(t, store, cut); again != used {
		t.Errorf("after another sweep: used %+v, was %+v", again, used)
	}
	if n := b.logLines("Cannot settle"); n != 0 {
		t.Errorf("B logged %d failed settlements", n)
	}
}

// outputDeltas returns the texts of execution id's output.delta events in store.
func outputDeltas(tb testing.TB, store eventstore.Reader, id string) []string {
	tb.Helper()
	events, err := store.Read(context.Background(), id, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		if ev.Type != protocol.EventOutputDelta {
			continue
		}
		var d protocol.OutputDeltaData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			tb.Fatalf("execution %s: output.delta %s: %v", id, ev.Data, err)
		}
		out = append(out, d.Text)
	}
	return out
}

// tieredModels are two lanes of two models each serving one ability with the same
// capabilities: the preferred model (priority 20, tier premium) under a Budget of 2
// requests a day, the other (tier standard) under one of 1. The native lane serves
// ability tiered, the front-door lane ability tiered-door; the models' provider ids
// (echo-premium, echo-standard: the demo echoes for both) tell which one answered.
func tieredModels(provider string) string {
	model := func(name, model, ability, tier, lane string, priority int) string {
		return fmt.Sprintf(`apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: %s, namespace: e2e, labels: {tier: %s, lane: %s}}
spec:
  provider: openai-compatible
  model: %s
  endpoint: http://%s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [%s]
  capabilities: {streaming: true}
  routing: {priority: %d}
---
`, name, tier, lane, model, provider, ability, priority)
	}
	budgetOf := func(name, tier, lane string, requests int) string {
		return fmt.Sprintf(`apiVersion: ai.switchboard.dev/v1alpha1
kind: Budget
metadata: {name: %s, namespace: e2e}
spec:
  selector: {matchLabels: {tier: %s, lane: %s}}
  limits:
    - {window: Day, requests: %d}
---
`, name, tier, lane, requests)
	}
	return model("premium", "echo-premium", "tiered", "premium", "native", 20) +
		model("standard", "echo-standard", "tiered", "standard", "native", 10) +
		model("door-premium", "echo-premium", "tiered-door", "premium", "door", 20) +
		model("door-standard", "echo-standard", "tiered-door", "standard", "door", 10) +
		budgetOf("premium", "premium", "native", 2) + budgetOf("standard", "standard", "native", 1) +
		budgetOf("door-premium", "premium", "door", 2) + budgetOf("door-standard", "standard", "door", 1)
}

func TestBudgetFallbackAndExhaustion(t *testing.T) {
	clearOfMidnight(t)
	e := setupWith(t, tieredModels)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("native", func(t *testing.T) {
		for i, want := range []string{"e2e/premium", "e2e/premium", "e2e/standard", ""} {
			body := fmt.Sprintf(`{"ability":"tiered","input":[{"type":"text","text":"submission %d"}]}`, i+1)
			p, err := postJSON(e.api, body, nil)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("submission %d", i+1)
			if want == "" {
				checkExhausted(t, what, p.status, p.header, p.err)
				continue
			}
			if p.status != http.StatusAccepted {
				t.Fatalf("%s: %d %+v, want 202 on %s", what, p.status, p.err, want)
			}
			id := acceptedID(t, p)
			events := follow(t, ctx, e.client, id)
			var routes []string
			for _, ev := range events {
				if ev.Type == protocol.EventRouteSelected {
					var d protocol.RouteSelectedData
					if err := json.Unmarshal(ev.Data, &d); err != nil {
						t.Fatal(err)
					}
					routes = append(routes, d.Deployment)
				}
			}
			// A model whose Budget refuses is skipped before any attempt on it.
			if len(routes) != 1 || routes[0] != want || events[len(events)-1].Type != protocol.EventCompleted {
				t.Errorf("%s: routes %v, events %s; want one attempt, on %s, completed", what, routes, strings.Join(types(events), " "), want)
			}
			if st, err := e.client.Get(ctx, id); err != nil || st.Route == nil || st.Route.Deployment != want {
				t.Errorf("%s: status %+v, %v; want route %s", what, st, err, want)
			}
		}
	})

	t.Run("OpenAI chat completions", func(t *testing.T) {
		for i, want := range []string{"echo-premium", "echo-premium", "echo-standard", ""} {
			what := fmt.Sprintf("completion %d", i+1)
			status, header, body := postChat(t, e.api, fmt.Sprintf(`{"model":"tiered-door","messages":[{"role":"user","content":"completion %d"}]}`, i+1))
			if want == "" {
				checkOpenAIExhausted(t, what, status, header, body)
				continue
			}
			var completion struct {
				Model string `json:"model"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &completion) != nil || completion.Model != want {
				t.Errorf("%s: %d %s, want 200 from %s", what, status, body, want)
				continue
			}
			id := header.Get("Switchboard-Execution-Id")
			wantRoute := map[string]string{"echo-premium": "e2e/door-premium", "echo-standard": "e2e/door-standard"}[want]
			if st, err := e.client.Get(ctx, id); err != nil || st.Route == nil || st.Route.Deployment != wantRoute || st.Attempts != 1 {
				t.Errorf("%s: execution %q status %+v, %v; want one attempt, on %s", what, id, st, err, wantRoute)
			}
		}
	})
}

// postChat posts body to the OpenAI front door of the runtime at api.
func postChat(t *testing.T, api, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+api+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

// checkOpenAIExhausted checks a quota_exhausted refusal in OpenAI's error shape
// (spec/compat.md, "Errors"): type insufficient_quota, code quota_exhausted, param null,
// the switchboard member with retryable false and retry_after_ms, and Retry-After.
func checkOpenAIExhausted(t *testing.T, what string, status int, header http.Header, body []byte) {
	t.Helper()
	var got struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if status != http.StatusTooManyRequests || dec.Decode(&got) != nil || got.Error == nil {
		t.Errorf("%s: %d %s, want 429 with an OpenAI error body", what, status, body)
		return
	}
	for field, want := range map[string]string{"type": `"insufficient_quota"`, "code": `"quota_exhausted"`,
		"param": `null`, "message": strconv.Quote(exhaustedMessage)} {
		if string(got.Error[field]) != want {
			t.Errorf("%s: error.%s = %s, want %s (body %s)", what, field, got.Error[field], want, body)
		}
	}
	var sb struct {
		Retryable    *bool `json:"retryable"`
		RetryAfterMs int64 `json:"retry_after_ms"`
	}
	if err := json.Unmarshal(got.Error["switchboard"], &sb); err != nil || sb.Retryable == nil || *sb.Retryable {
		t.Errorf("%s: error.switchboard = %s (%v), want retryable false", what, got.Error["switchboard"], err)
	}
	checkRetryAfter(t, what, header, sb.RetryAfterMs)
}
