package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/metrics.golden from this run's scrape")

// TestMetricsGolden runs a scripted set of executions through the built binary — a
// success, a fallback from a 503, a tool call, a 422, a cancel, a deadline, an async job,
// an idempotent replay, and a priced model whose Budget admits one execution and
// refuses the next — then scrapes /metrics and compares the runtime's series
// (switchboard_* and gen_ai_*), their label sets and every deterministic value with
// testdata/metrics.golden. Durations and timestamps are not deterministic: for them only
// the count of observations, or the series' existence, is compared (see normalize).
func TestMetricsGolden(t *testing.T) {
	metricsAddr := freeAddr(t)
	e := setupWith(t, goldenBudget, "--metrics-bind-address", metricsAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	finish := func(t *testing.T, id string, want protocol.Status, code protocol.Code) {
		t.Helper()
		snap, err := e.client.FollowResult(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Status != want || (code != "" && (snap.Error == nil || snap.Error.Code != code)) {
			t.Errorf("execution %s ended %s %+v, want %s %s", id, snap.Status, snap.Error, want, code)
		}
	}
	submit := func(t *testing.T, req *protocol.Request, opts ...client.SubmitOption) string {
		t.Helper()
		acc, err := e.client.Submit(ctx, req, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return acc.ID
	}

	// The async job takes five job durations: it runs while the rest of the script does.
	var async sync.WaitGroup
	async.Go(func() {
		finish(t, submit(t, textRequest("text-to-image", "a lighthouse")), protocol.StatusCompleted, "")
	})

	// Fallback from the 503 deployment to echo, streamed text.
	finish(t, submit(t, textRequest("chat", "hello metrics")), protocol.StatusCompleted, "")
	// A tool call, after the same fallback.
	finish(t, submit(t, textRequest("chat", "Weather in Paris?", protocol.Part{Type: protocol.PartTool, Name: "get_weather",
		Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)})), protocol.StatusCompleted, "")
	// A success on the first attempt, submitted twice with one Idempotency-Key.
	id := submit(t, textRequest("summarize", "short text"), client.WithIdempotencyKey("golden-1"))
	if again := submit(t, textRequest("summarize", "short text"), client.WithIdempotencyKey("golden-1")); again != id {
		t.Fatalf("replay gave %s, want %s", again, id)
	}
	finish(t, id, protocol.StatusCompleted, "")
	// No deployment serves the ability: 422, and no execution.
	var ce *client.Error
	if _, err := e.client.Submit(ctx, textRequest("no-such-ability", "x")); !errors.As(err, &ce) || ce.Code() != protocol.CodeUnsupportedCapability {
		t.Fatalf("Submit = %v, want unsupported_capability", err)
	}
	// Cancelled once its first output arrived.
	id = submit(t, textRequest("stall", "stop me"))
	cancelled := false
	if err := e.client.Follow(ctx, id, 0, func(ev protocol.Event) error {
		if ev.Type == protocol.EventOutputDelta && !cancelled {
			cancelled = true
			_, err := e.client.Cancel(ctx, id)
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	finish(t, id, protocol.StatusFailed, protocol.CodeCancelled)
	// Past its deadline.
	req := textRequest("stall", "too slow")
	deadline := int64(1000)
	req.DeadlineMs = &deadline
	finish(t, submit(t, req), protocol.StatusFailed, protocol.CodeDeadlineExceeded)
	// The Budget's one request: settled (switchboard_cost_total), then a refusal
	// (switchboard_budget_rejections_total).
	finish(t, submit(t, textRequest("priced", "what does it cost")), protocol.StatusCompleted, "")
	if _, err := e.client.Submit(ctx, textRequest("priced", "and again")); !errors.As(err, &ce) || ce.Code() != protocol.CodeQuotaExhausted {
		t.Fatalf("Submit past the Budget = %v, want quota_exhausted", err)
	}
	async.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// A request's metrics are recorded once its handler returns, a moment after the
	// client has read the response: scrape until the values settle.
	url := "http://" + metricsAddr + "/metrics"
	// A standalone replica reports its Budgets' windows every 10 s, the first time when
	// it starts, possibly before it has read the manifests: wait for the first report.
	eventually(t, 15*time.Second, "the Budget's report", func() bool {
		return scrape(t, url)["switchboard_budget_limit"] != nil
	})
	if *updateGolden {
		var got string
		eventually(t, 10*time.Second, "two equal scrapes", func() bool {
			prev := got
			time.Sleep(200 * time.Millisecond)
			got = normalize(t, scrape(t, url))
			return got == prev
		})
		if err := os.WriteFile(metricsGolden, []byte(got), 0o644); err != nil { //nolint:gosec // G306: a checked-in golden file, world-readable like the rest of the tree
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(metricsGolden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	var got string
	settle := time.Now().Add(5 * time.Second)
	for got = normalize(t, scrape(t, url)); got != string(want) && time.Now().Before(settle); got = normalize(t, scrape(t, url)) {
		time.Sleep(50 * time.Millisecond)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("scrape differs from %s (-want +got); rerun with -update if the change is intended:\n%s", metricsGolden, diff)
	}
	if strings.Contains(e.runtime.String(), "hello metrics") {
		t.Error("the runtime's log holds prompt text")
	}
}

// goldenBudget is the golden run's priced model, ability "priced", and a Budget over it
// that admits one request a month: the first execution settles, the second is refused.
func goldenBudget(provider string) string {
	return fmt.Sprintf(`apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: priced, namespace: e2e, labels: {budget: golden}}
spec:
  provider: openai-compatible
  model: echo
  endpoint: http://%s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [priced]
  capabilities: {streaming: true}
  pricing: {currency: USD, inputTokens: "2.50", outputTokens: "10.00"}
  limits: {maxOutputTokens: 256}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: Budget
metadata: {name: golden, namespace: e2e}
spec:
  selector: {matchLabels: {budget: golden}}
  limits:
    - {window: Month, cost: "1000.00", requests: 1}
`, provider)
}

// scrape reads url's Prometheus text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // G107: the URL of the test's own runtime
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// Values that differ from run to run. nondeterministic histograms keep only their
// observation count; volatile families keep their series but not their values; store
// operations keep only those every run performs, with their values hidden (renewals and
// sweeps depend on timing).
var (
	timeHistograms = map[string]bool{
		"gen_ai_client_operation_duration_seconds":            true,
		"gen_ai_client_operation_time_to_first_chunk_seconds": true,
		"switchboard_http_request_duration_seconds":           true,
	}
	volatile = map[string]bool{
		"switchboard_routing_table_publish_timestamp_seconds": true,
		"switchboard_eventstore_operation_duration_seconds":   true,
		"switchboard_build_info":                              true,
		// Reported every 10 s (spec/budgets.md, "Metrics"): before or after the scripted
		// request settled.
		"switchboard_budget_used": true,
	}
	scriptedStoreOps = []string{"create", "append", "get", "read", "snapshot", "reserve", "request_cancel"}
)

// normalize renders the runtime's series of fams one per line, sorted, as
// `name{label="value",…} value`; histograms as their _count and _sum lines (the _sum only
// when it is deterministic: token counts), with "*" for values that vary between runs.
func normalize(t *testing.T, fams map[string]*dto.MetricFamily) string {
	t.Helper()
	var lines []string
	for name, fam := range fams {
		if !strings.HasPrefix(name, "switchboard_") && !strings.HasPrefix(name, "gen_ai_") {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if name == "switchboard_eventstore_operation_duration_seconds" && !slices.Contains(scriptedStoreOps, labels["op"]) {
				continue
			}
			if name == "switchboard_build_info" {
				for k := range labels {
					labels[k] = "*"
				}
			}
			ls := renderLabels(labels)
			value := func(v float64) string {
				if volatile[name] {
					return "*"
				}
				return fmt.Sprint(v)
			}
			switch fam.GetType() {
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				lines = append(lines, name+"_count"+ls+" "+value(float64(h.GetSampleCount())))
				if !timeHistograms[name] && !volatile[name] {
					lines = append(lines, name+"_sum"+ls+" "+value(h.GetSampleSum()))
				}
			case dto.MetricType_COUNTER:
				lines = append(lines, name+ls+" "+value(m.GetCounter().GetValue()))
			case dto.MetricType_GAUGE:
				lines = append(lines, name+ls+" "+value(m.GetGauge().GetValue()))
			default:
				t.Fatalf("%s: unexpected metric type %s", name, fam.GetType())
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func renderLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, labels[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
