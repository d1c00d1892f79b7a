// Package telemetry holds what Switchboard reports about itself (spec/observability.md):
// the Prometheus metrics of the runtime, recorded through the engine's, the HTTP API's,
// the EventStore's and the routing registry's observer hooks, and the OpenTelemetry
// tracer provider behind the runtime's spans.
//
// The packages it observes never import it: each declares the small interface it calls
// at the one place a fact is known, with a no-op default, and Metrics implements them
// all. Every label value comes from a bounded set — a deployment of the routing table, a
// routed ability, a portable error code, a route pattern, a fixed reason — never from
// caller content.
package telemetry

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/version"
)

// Buckets of the histograms. The GenAI ones are those the OpenTelemetry GenAI semantic
// conventions advise for these instruments.
var (
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	httpBuckets          = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	storeBuckets         = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// codeOK is the code label of a success.
const codeOK = "ok"

// tokenTypes maps the usage units that count tokens to their token_type label; other
// units (images, seconds, custom units) are not tokens and are not recorded.
var tokenTypes = map[string]string{
	protocol.UnitInputTokens:      "input",
	protocol.UnitOutputTokens:     "output",
	protocol.UnitCacheReadTokens:  "cache_read",
	protocol.UnitCacheWriteTokens: "cache_write",
	protocol.UnitReasoningTokens:  "reasoning",
}

// Metrics is the runtime's Prometheus instrumentation. Create it with NewMetrics and
// register Collectors in the registry /metrics serves; it is safe for concurrent use.
type Metrics struct {
	operationDuration *prometheus.HistogramVec
	timeToFirstChunk  *prometheus.HistogramVec
	tokenUsage        *prometheus.HistogramVec

	executions        *prometheus.CounterVec
	attempts          *prometheus.CounterVec
	fallbacks         *prometheus.CounterVec
	running           prometheus.Gauge
	httpRequests      *prometheus.CounterVec
	httpDuration      *prometheus.HistogramVec
	subscribers       prometheus.Gauge
	dropped           *prometheus.CounterVec
	storeDuration     *prometheus.HistogramVec
	tableModels       prometheus.Gauge
	tablePublished    prometheus.Gauge
	idempotentReplays prometheus.Counter
	orphans           *prometheus.CounterVec
	buildInfo         *prometheus.GaugeVec

	budgetUsed       *prometheus.GaugeVec
	budgetLimit      *prometheus.GaugeVec
	budgetRejections *prometheus.CounterVec
	cost             *prometheus.CounterVec

	// routes caches the series of each route: the API's patterns, a handful.
	routesMu sync.RWMutex
	routes   map[string]*routeSeries
}

// routeSeries are one route's HTTP series: its duration, and its count by status,
// resolved when first seen.
type routeSeries struct {
	duration prometheus.Observer
	byStatus [600]atomic.Pointer[prometheus.Counter]
}

// NewMetrics returns the runtime's metrics, none of them registered yet.
func NewMetrics() *Metrics {
	m := &Metrics{
		routes: make(map[string]*routeSeries),
		operationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_operation_duration_seconds",
			Help:    "Duration of each attempt at a provider (GenAI client operation); error_type is the portable error code of a failed attempt, empty on success.",
			Buckets: genAIDurationBuckets,
		}, []string{"deployment", "provider", "model", "error_type"}),
		timeToFirstChunk: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_operation_time_to_first_chunk_seconds",
			Help:    "Time from the start of an attempt to its first recorded output event, for attempts that produced output.",
			Buckets: genAIDurationBuckets,
		}, []string{"deployment", "provider", "model"}),
		tokenUsage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens reported per usage.reported entry, by token_type: input, output, cache_read, cache_write, reasoning.",
			Buckets: genAITokenBuckets,
		}, []string{"deployment", "provider", "model", "token_type"}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_executions_total",
			Help: "Executions that ended on this replica, by routed ability and outcome (code ok for success, else the portable error code).",
		}, []string{"ability", "code"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_attempts_total",
			Help: "Attempts that ended, by deployment and outcome (code ok for success, else the attempt's portable error code).",
		}, []string{"deployment", "code"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_fallbacks_total",
			Help: "Failed attempts followed by an attempt on the next candidate, by routed ability.",
		}, []string{"ability"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_executions_running",
			Help: "Executions running on this replica.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_http_requests_total",
			Help: "HTTP requests to the execution API, by route pattern and response status.",
		}, []string{"route", "status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_http_request_duration_seconds",
			Help:    "Duration of HTTP requests to the execution API by route pattern; an event stream lasts as long as its subscriber follows it.",
			Buckets: httpBuckets,
		}, []string{"route"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_sse_subscribers",
			Help: "Open server-sent event streams on this replica.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_sse_dropped_total",
			Help: "Event streams the server ended before the execution's terminal event, by reason: write_timeout, store_error, shutdown, removed.",
		}, []string{"reason"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_eventstore_operation_duration_seconds",
			Help:    "Duration of EventStore operations, by store (memory, redis) and operation; blocking waits are not timed.",
			Buckets: storeBuckets,
		}, []string{"store", "op"}),
		tableModels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_routing_table_models",
			Help: "Deployments in the routing table this replica serves from.",
		}),
		tablePublished: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_routing_table_publish_timestamp_seconds",
			Help: "Unix time at which this replica last published its routing table.",
		}),
		idempotentReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_idempotency_replays_total",
			Help: "Submissions answered with the execution an earlier request with the same Idempotency-Key created.",
		}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_orphans_recovered_total",
			Help: "Executions this replica took over from a replica that stopped, by outcome: adopted (its remote job resumed) or the code it was ended with.",
		}, []string{"outcome"}),
		budgetUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_budget_used",
			Help: "What a Budget's current window has used, by window and unit (cost in currency units, tokens, requests); reported by the replica that writes Budget status.",
		}, []string{"namespace", "name", "window", "unit"}),
		budgetLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_budget_limit",
			Help: "A Budget's limit in a window, by unit (cost in currency units, tokens, requests).",
		}, []string{"namespace", "name", "window", "unit"}),
		budgetRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_budget_rejections_total",
			Help: "Reservations a Budget refused on this replica: a candidate model skipped, or a request answered quota_exhausted.",
		}, []string{"namespace", "name"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_cost_total",
			Help: "Cost of the executions settled on this replica, by deployment and currency, in currency units (micro-unit precision).",
		}, []string{"deployment", "currency"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_build_info",
			Help: "Always 1; labelled with the running binary's version, commit and Go version.",
		}, []string{"version", "commit", "go_version"}),
	}
	v := version.Get()
	m.buildInfo.WithLabelValues(v.Version, v.Commit, runtime.Version()).Set(1)
	// The series of closed label sets exist from the start, at zero, so that rates and
	// alerts over them work before the first event.
	for _, reason := range []string{httpapi.DropWriteTimeout, httpapi.DropStoreError, httpapi.DropShutdown, httpapi.DropRemoved} {
		m.dropped.WithLabelValues(reason)
	}
	for _, outcome := range []string{engine.OrphanAdopted, string(protocol.CodeCancelled), string(protocol.CodeDeadlineExceeded), string(protocol.CodeInternal)} {
		m.orphans.WithLabelValues(outcome)
	}
	return m
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.operationDuration, m.timeToFirstChunk, m.tokenUsage,
		m.executions, m.attempts, m.fallbacks, m.running,
		m.httpRequests, m.httpDuration, m.subscribers, m.dropped,
		m.storeDuration, m.tableModels, m.tablePublished,
		m.idempotentReplays, m.orphans, m.buildInfo,
		m.budgetUsed, m.budgetLimit, m.budgetRejections, m.cost,
	}
}

// MustRegister registers every collector in reg; it panics if one is registered
// already, a programming error.
func (m *Metrics) MustRegister(reg prometheus.Registerer) { reg.MustRegister(m.Collectors()...) }

// Budget returns the Budget enforcer's observer.
func (m *Metrics) Budget() budget.Observer { return budgetObserver{m} }

// BudgetWindow records what a Budget's window has used and allows, by unit, in the
// units the metrics report (cost in currency units); the status writer calls it.
func (m *Metrics) BudgetWindow(b *budget.Budget, w budget.WindowUsage) {
	for _, u := range w.Units() {
		m.budgetUsed.WithLabelValues(b.Namespace, b.Name, string(w.Window), u.Unit).Set(u.Used)
		m.budgetLimit.WithLabelValues(b.Namespace, b.Name, string(w.Window), u.Unit).Set(u.Limit)
	}
}

// ForgetBudget removes the series of a Budget that no longer exists.
func (m *Metrics) ForgetBudget(namespace, name string) {
	labels := prometheus.Labels{"namespace": namespace, "name": name}
	m.budgetUsed.DeletePartialMatch(labels)
	m.budgetLimit.DeletePartialMatch(labels)
	m.budgetRejections.DeletePartialMatch(labels)
}

// budgetObserver implements budget.Observer.
type budgetObserver struct{ m *Metrics }

func (o budgetObserver) Rejected(b *budget.Budget) {
	o.m.budgetRejections.WithLabelValues(b.Namespace, b.Name).Inc()
}

func (o budgetObserver) Spent(d *routing.Deployment, currency string, cost pricing.Micro) {
	o.m.cost.WithLabelValues(d.RefString(), currency).Add(float64(cost) / pricing.MicroPerUnit)
}

// Engine returns the engine's observer.
func (m *Metrics) Engine() engine.Observer { return engineObserver{m} }

// HTTP returns the HTTP API's observer.
func (m *Metrics) HTTP() httpapi.Observer { return httpObserver{m} }

// Store returns the timer of the roles of an EventStore (eventstore.InstrumentLog and
// the others) whose implementation is named store ("memory", "redis"). The label values
// are resolved once, so timing an operation costs one histogram observation.
func (m *Metrics) Store(store string) eventstore.Timer {
	ops := eventstore.Ops()
	byOp := make([]prometheus.Observer, len(ops))
	for _, op := range ops {
		byOp[op] = m.storeDuration.WithLabelValues(store, op.String())
	}
	return func(op eventstore.Op, d time.Duration) { byOp[op].Observe(d.Seconds()) }
}

// TablePublished records a routing table of models deployments published now; it is the
// registry's routing.OnPublish hook.
func (m *Metrics) TablePublished(models int) {
	m.tableModels.Set(float64(models))
	m.tablePublished.SetToCurrentTime()
}

// engineObserver implements engine.Observer.
type engineObserver struct{ m *Metrics }

func (o engineObserver) Running(delta int) { o.m.running.Add(float64(delta)) }

func (o engineObserver) ExecutionEnded(ability string, code protocol.Code) {
	o.m.executions.WithLabelValues(ability, codeLabel(code)).Inc()
}

func (o engineObserver) Fallback(ability string) { o.m.fallbacks.WithLabelValues(ability).Inc() }

func (o engineObserver) AttemptEnded(r engine.AttemptReport) {
	d := r.Deployment
	ref := d.RefString()
	o.m.attempts.WithLabelValues(ref, codeLabel(r.Code)).Inc()
	o.m.operationDuration.WithLabelValues(ref, d.Provider, d.Model, string(r.Code)).Observe(r.Duration.Seconds())
}

func (o engineObserver) FirstChunk(d *routing.Deployment, latency time.Duration) {
	o.m.timeToFirstChunk.WithLabelValues(d.RefString(), d.Provider, d.Model).Observe(latency.Seconds())
}

func (o engineObserver) Usage(d *routing.Deployment, usage []protocol.Usage) {
	for _, u := range usage {
		if typ, ok := tokenTypes[u.Unit]; ok {
			o.m.tokenUsage.WithLabelValues(d.RefString(), d.Provider, d.Model, typ).Observe(u.Quantity)
		}
	}
}

func (o engineObserver) OrphanRecovered(outcome string) { o.m.orphans.WithLabelValues(outcome).Inc() }

// codeLabel is the code label of an outcome: ok for success.
func codeLabel(code protocol.Code) string {
	if code == "" {
		return codeOK
	}
	return string(code)
}

// httpObserver implements httpapi.Observer.
type httpObserver struct{ m *Metrics }

func (o httpObserver) Request(route string, status int, d time.Duration) {
	rs := o.m.route(route)
	rs.duration.Observe(d.Seconds())
	if status < 0 || status >= len(rs.byStatus) {
		o.m.httpRequests.WithLabelValues(route, strconv.Itoa(status)).Inc()
		return
	}
	c := rs.byStatus[status].Load()
	if c == nil {
		counter := o.m.httpRequests.WithLabelValues(route, statusLabels[status])
		c = &counter
		rs.byStatus[status].Store(c)
	}
	(*c).Inc()
}

// route returns the series of route.
func (m *Metrics) route(route string) *routeSeries {
	m.routesMu.RLock()
	rs := m.routes[route]
	m.routesMu.RUnlock()
	if rs != nil {
		return rs
	}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	if rs = m.routes[route]; rs == nil {
		rs = &routeSeries{duration: m.httpDuration.WithLabelValues(route)}
		m.routes[route] = rs
	}
	return rs
}

func (o httpObserver) Subscribers(delta int)       { o.m.subscribers.Add(float64(delta)) }
func (o httpObserver) StreamDropped(reason string) { o.m.dropped.WithLabelValues(reason).Inc() }
func (o httpObserver) IdempotencyReplay()          { o.m.idempotentReplays.Inc() }

// statusLabels holds the status label of every status below 600.
var statusLabels = func() (l [600]string) {
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	return l
}()
