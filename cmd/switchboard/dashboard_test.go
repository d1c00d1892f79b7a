package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The files the dashboard and documentation checks read, relative to this package; the
// golden scrape of /metrics is a variable so that a test can point it elsewhere.
var (
	metricsGolden     = "testdata/metrics.golden"
	dashboardJSON     = "../../charts/switchboard/dashboards/switchboard.json"
	observabilitySpec = "../../spec/observability.md"
)

// metricName matches the runtime's own metric names wherever they occur: in PromQL, in
// a scrape, in prose.
var metricName = regexp.MustCompile(`\b(?:switchboard|gen_ai)_[a-z0-9_]+\b`)

// metricFamily maps the series a histogram exposes (X_bucket, X_sum, X_count) to the
// histogram X; other names are their own family.
func metricFamily(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok {
			return f
		}
	}
	return name
}

// metricFamilies returns the families of the metric names in text.
func metricFamilies(text string) map[string]bool {
	fams := map[string]bool{}
	for _, name := range metricName.FindAllString(text, -1) {
		fams[metricFamily(name)] = true
	}
	return fams
}

// goldenFamilies returns the switchboard_ and gen_ai_ families of the golden scrape, whose
// lines are `name{label="v",...} value` or `name value`.
func goldenFamilies(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(metricsGolden)
	if os.IsNotExist(err) {
		t.Fatalf("the golden scrape of /metrics %s does not exist: it is written by the metrics golden test of this package; run that first", metricsGolden)
	}
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if metricName.FindString(name) == name {
			fams[metricFamily(name)] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", metricsGolden, err)
	}
	if len(fams) == 0 {
		t.Fatalf("%s holds no switchboard_ or gen_ai_ metric", metricsGolden)
	}
	return fams
}

// dashboardPanel is the part of a Grafana panel the checks read; rows may nest panels.
type dashboardPanel struct {
	ID      int              `json:"id"`
	Type    string           `json:"type"`
	Title   string           `json:"title"`
	Targets []dashboardQuery `json:"targets"`
	Panels  []dashboardPanel `json:"panels"`
}

type dashboardQuery struct {
	Expr string `json:"expr"`
}

// TestDashboardQueriesExistingMetrics checks that every metric the Grafana dashboard
// queries is one /metrics exposes (the golden scrape), and that the dashboard covers what
// an operator looks at first.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", dashboardJSON, err)
	}
	// Every PromQL of the dashboard: panel targets and template variables.
	var queries []string
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(k, x)
			}
		case []any:
			for _, x := range v {
				walk(key, x)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				queries = append(queries, v)
			}
		}
	}
	walk("", doc)
	queried := metricFamilies(strings.Join(queries, "\n"))
	if len(queried) == 0 {
		t.Fatalf("%s queries no switchboard_ or gen_ai_ metric", dashboardJSON)
	}

	golden := goldenFamilies(t)
	for _, f := range sortedNames(queried) {
		if !golden[f] {
			t.Errorf("the dashboard queries %s, which %s does not hold", f, metricsGolden)
		}
	}

	for _, r := range []struct{ panel, family string }{
		{"executions per second by outcome", "switchboard_executions_total"},
		{"time to first chunk p50/p99", "gen_ai_client_operation_time_to_first_chunk_seconds"},
		{"fallback rate", "switchboard_fallbacks_total"},
		{"tokens per minute", "gen_ai_client_token_usage"},
		{"running executions", "switchboard_executions_running"},
		{"SSE subscribers", "switchboard_sse_subscribers"},
		{"EventStore latency", "switchboard_eventstore_operation_duration_seconds"},
		{"routing table size", "switchboard_routing_table_models"},
		{"last routing table publish", "switchboard_routing_table_publish_timestamp_seconds"},
		{"budget used ÷ limit", "switchboard_budget_used"},
		{"budget used ÷ limit", "switchboard_budget_limit"},
		{"budget rejections", "switchboard_budget_rejections_total"},
		{"spend by deployment", "switchboard_cost_total"},
	} {
		if !queried[r.family] {
			t.Errorf("no panel shows %s: the dashboard never queries %s", r.panel, r.family)
		}
	}

	var dash struct {
		UID    string           `json:"uid"`
		Title  string           `json:"title"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID != "switchboard" || dash.Title != "Switchboard" {
		t.Errorf("uid %q, title %q; want switchboard, Switchboard", dash.UID, dash.Title)
	}
	ids := map[int]string{}
	var check func([]dashboardPanel)
	check = func(panels []dashboardPanel) {
		for _, p := range panels {
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && !slices.ContainsFunc(p.Targets, func(q dashboardQuery) bool { return q.Expr != "" }) {
				t.Errorf("panel %q has no query", p.Title)
			}
			check(p.Panels)
		}
	}
	check(dash.Panels)
}

// TestObservabilitySpecListsEveryMetric keeps spec/observability.md and /metrics in step:
// every metric the document names exists, and every metric that exists is documented.
func TestObservabilitySpecListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile(observabilitySpec)
	if err != nil {
		t.Fatal(err)
	}
	documented := metricFamilies(string(b))
	golden := goldenFamilies(t)
	for _, f := range sortedNames(documented) {
		if !golden[f] {
			t.Errorf("spec/observability.md names %s, which %s does not hold", f, metricsGolden)
		}
	}
	for _, f := range sortedNames(golden) {
		if !documented[f] {
			t.Errorf("/metrics exposes %s, which spec/observability.md does not document", f)
		}
	}
}

func sortedNames(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
