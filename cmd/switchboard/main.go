// Command switchboard runs the Switchboard controller manager and execution runtime: in a
// cluster (kubeconfig or service account) or standalone from manifest files
// (--manifests DIR).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/controllers"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "switchboard:", err)
		os.Exit(1)
	}
}

// options are the command-line flags (spec/http-api.md, spec/events.md).
type options struct {
	runtimeAddr     string
	probeAddr       string
	metricsAddr     string
	leaderElect     bool
	manifests       string
	maxRequestBytes int64
	readTimeout     time.Duration
	idleTimeout     time.Duration
	maxEvents       int
	maxOutputBytes  int64
	idempotencyTTL  time.Duration
	sseKeepAlive    time.Duration
	sseWriteTimeout time.Duration
	cleanupGrace    time.Duration
	maxConcurrent   int
	eventStore      string
	redisURL        string
	retention       time.Duration
	zap             zap.Options
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("switchboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.runtimeAddr, "runtime-bind-address", ":8080", "Address the execution HTTP API listens on.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address serving /healthz and /readyz.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address serving Prometheus /metrics; 0 disables it.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader among replicas; only the leader writes status.")
	fs.StringVar(&o.manifests, "manifests", "", "Standalone mode: read ModelDeployment, CapabilityPolicy and Secret manifests from this folder instead of a cluster, and apply changes to it.")
	fs.Int64Var(&o.maxRequestBytes, "max-request-bytes", httpapi.DefaultMaxRequestBytes, "Largest accepted request body; larger ones get 413.")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "Longest time to read a request, body included; a stalled upload is closed. Event streams are exempt.")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 120*time.Second, "Idle keep-alive connections are closed after this long.")
	fs.IntVar(&o.maxEvents, "max-events-per-execution", engine.DefaultMaxEvents, "Events one execution may record, its terminal event included; past it the execution fails with output_too_large.")
	fs.Int64Var(&o.maxOutputBytes, "max-output-bytes", engine.DefaultMaxOutputBytes, "Materialized output (text, tool arguments, result) one execution may record; past it the execution fails with output_too_large.")
	fs.DurationVar(&o.idempotencyTTL, "idempotency-ttl", httpapi.DefaultIdempotencyTTL, "How long an Idempotency-Key is remembered (at least 24h).")
	fs.DurationVar(&o.sseKeepAlive, "sse-keepalive", httpapi.DefaultSSEKeepAlive, "Idle time after which an event stream gets a keep-alive comment.")
	fs.DurationVar(&o.sseWriteTimeout, "sse-write-timeout", httpapi.DefaultSSEWriteTimeout, "Deadline of each event-stream write; a stalled reader is dropped.")
	fs.DurationVar(&o.cleanupGrace, "cleanup-grace", 10*time.Second, "Longest wait for an adapter's remote cleanup after cancellation or deadline.")
	fs.IntVar(&o.maxConcurrent, "max-concurrent-executions", 256, "Executions running at once on this replica; more are refused with rate_limited.")
	fs.StringVar(&o.eventStore, "event-store", "memory", "EventStore implementation: memory (one replica, lost on restart) or redis (several replicas, restarts).")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis URL for --event-store=redis, e.g. redis://redis:6379/0.")
	fs.DurationVar(&o.retention, "retention", 0, "How long terminal executions are kept (default 1h for memory, 24h for redis).")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.idempotencyTTL < 24*time.Hour {
		return nil, fmt.Errorf("--idempotency-ttl must be at least 24h, got %s", o.idempotencyTTL)
	}
	if o.maxEvents < engine.MinMaxEvents {
		return nil, fmt.Errorf("--max-events-per-execution must be at least %d, got %d", engine.MinMaxEvents, o.maxEvents)
	}
	if o.maxRequestBytes <= 0 || o.maxConcurrent <= 0 || o.cleanupGrace <= 0 || o.retention < 0 ||
		o.sseKeepAlive <= 0 || o.sseWriteTimeout <= 0 || o.readTimeout <= 0 || o.idleTimeout <= 0 ||
		o.maxOutputBytes <= 0 {
		return nil, errors.New("sizes, counts and durations must be positive")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.zap.DestWriter = stderr
	log := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(log)

	store, err := openStore(ctx, o)
	if err != nil {
		return err
	}
	defer store.Close()

	holder := &routing.Holder{}
	eng := engine.New(engine.Config{
		Store:          store,
		Table:          holder,
		Providers:      providers(),
		MaxConcurrent:  o.maxConcurrent,
		CleanupGrace:   o.cleanupGrace,
		MaxEvents:      o.maxEvents,
		MaxOutputBytes: o.maxOutputBytes,
		Logger:         log.WithName("engine"),
	})
	// Every request's context derives from streams, which ends as soon as shutdown
	// starts: open event streams close at once instead of holding the server's graceful
	// shutdown until their executions end. Submissions run on contexts detached from it.
	streams, endStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer endStreams()
	stopStreams := context.AfterFunc(ctx, endStreams)
	defer stopStreams()
	api := newHTTPServer(o, o.runtimeAddr, httpapi.NewServer(httpapi.Config{
		Engine:          eng,
		Store:           store,
		MaxRequestBytes: o.maxRequestBytes,
		IdempotencyTTL:  o.idempotencyTTL,
		SSEKeepAlive:    o.sseKeepAlive,
		SSEWriteTimeout: o.sseWriteTimeout,
		Logger:          log.WithName("httpapi"),
	}))
	api.BaseContext = func(net.Listener) context.Context { return streams }
	// Executions end with a terminal event before the store closes (deferred first, so
	// it runs after this). Shutdown is bounded by the engine itself: the cleanup grace
	// for each adapter to return, then the cleanup grace again to write the terminal
	// event, so no outer timeout can cut it short.
	defer func() {
		if err := eng.Close(); err != nil {
			log.Error(err, "Engine shutdown incomplete")
		}
	}()

	if o.manifests != "" {
		return runStandalone(ctx, o, holder, api, log)
	}
	return runInCluster(ctx, o, holder, api)
}

func openStore(ctx context.Context, o *options) (eventstore.Store, error) {
	switch o.eventStore {
	case "memory":
		retention := memory.DefaultRetention
		if o.retention > 0 {
			retention = o.retention
		}
		return memory.New(memory.WithRetention(retention)), nil
	case "redis":
		if o.redisURL == "" {
			return nil, errors.New("--event-store=redis needs --redis-url")
		}
		var opts []redisstore.Option
		if o.retention > 0 {
			opts = append(opts, redisstore.WithRetention(o.retention))
		}
		s, err := redisstore.New(ctx, o.redisURL, opts...)
		if err != nil {
			return nil, fmt.Errorf("open redis event store: %w", err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("--event-store: unknown store %q (want memory or redis)", o.eventStore)
}

// runInCluster runs the controller manager; the runtime's HTTP server is one of its
// runnables, on every replica.
func runInCluster(ctx context.Context, o *options, holder *routing.Holder, api *http.Server) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.probeAddr,
		LeaderElection:         o.leaderElect,
		LeaderElectionID:       "switchboard.ai.switchboard.dev",
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := controllers.Setup(mgr, routing.NewRegistry(holder)); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("routing-table", tableSynced(holder)); err != nil {
		return err
	}
	if err := mgr.Add(httpRunnable{api}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// runStandalone serves from manifest files: no cluster, the same table builder.
func runStandalone(ctx context.Context, o *options, holder *routing.Holder, api *http.Server, log logr.Logger) error {
	registry := routing.NewRegistry(holder)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return controllers.WatchManifests(ctx, o.manifests, registry, 0, log.WithName("manifests"))
	})

	probes := http.NewServeMux()
	probes.Handle("/healthz", http.StripPrefix("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}))
	probes.Handle("/readyz", http.StripPrefix("/readyz", &healthz.Handler{Checks: map[string]healthz.Checker{"routing-table": tableSynced(holder)}}))
	servers := []*http.Server{api, newHTTPServer(o, o.probeAddr, probes)}
	if o.metricsAddr != "0" {
		metrics := http.NewServeMux()
		metrics.Handle("/metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
		servers = append(servers, newHTTPServer(o, o.metricsAddr, metrics))
	}
	for _, srv := range servers {
		g.Go(func() error { return serve(ctx, srv) })
	}
	log.Info("Starting switchboard in standalone mode", "manifests", o.manifests, "runtime", o.runtimeAddr)
	return g.Wait()
}

// Connection hygiene (spec/http-api.md, "Connections"): request headers within
// headerTimeout and at most maxHeaderBytes (net/http answers 431 beyond, allowing itself
// 4 KiB of slack), the whole request within --read-timeout, idle keep-alive connections
// closed after --idle-timeout. There is no server-wide write timeout: the API bounds each
// response's writes itself, and each event-stream frame separately.
const (
	headerTimeout  = 10 * time.Second
	maxHeaderBytes = 64 << 10
)

// newHTTPServer returns a server for handler on addr with the connection limits.
func newHTTPServer(o *options, addr string, handler http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       o.readTimeout,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// serve runs srv until ctx ends, then shuts it down gracefully: it stops accepting,
// closes idle connections and waits for requests in flight. Event streams end at once
// (their BaseContext ended with ctx).
func serve(ctx context.Context, srv *http.Server) error {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", srv.Addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", srv.Addr, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	return nil
}

// httpRunnable runs the runtime's HTTP server inside the manager, on every replica.
type httpRunnable struct{ srv *http.Server }

func (h httpRunnable) Start(ctx context.Context) error { return serve(ctx, h.srv) }
func (httpRunnable) NeedLeaderElection() bool          { return false }

var _ manager.LeaderElectionRunnable = httpRunnable{}

// tableSynced is ready only once the first complete routing table is published.
func tableSynced(h *routing.Holder) healthz.Checker {
	return func(*http.Request) error {
		if !h.Synced() {
			return errors.New("routing table not synced")
		}
		return nil
	}
}
