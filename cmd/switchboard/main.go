// Command switchboard runs the Switchboard controller manager and execution runtime: in a
// cluster (kubeconfig or service account) or standalone from manifest files
// (--manifests DIR).
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	uberzap "go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/controllers"
	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/auth/kubeauth"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	postgresstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/redisconn"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/telemetry"
	"github.com/switchboard-dev/switchboard/runtime/version"
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
	pprofAddr       string
	leaderElect     bool
	leaderElectNS   string
	manifests       string
	maxRequestBytes int64
	readTimeout     time.Duration
	idleTimeout     time.Duration
	maxEvents       int
	maxOutputBytes  int64
	idempotencyTTL  time.Duration
	maxReservations int
	sseKeepAlive    time.Duration
	sseWriteTimeout time.Duration
	cleanupGrace    time.Duration
	executionLease  time.Duration
	shutdownGrace   time.Duration
	maxConcurrent   int
	eventStore      string
	redis           redisconn.Config
	postgres        postgresstore.URLConfig
	redisWait       int
	retention       time.Duration
	authMode        string
	authAudiences   string
	authTokensFile  string
	authInFlight    int
	authFailures    int
	tokenKeyFile    string
	tokenTTL        time.Duration
	tokenRotation   time.Duration
	maxPerPrincipal int
	metricsSecure   bool
	metricsCertPath string
	metricsCertName string
	metricsCertKey  string
	tlsCertFile     string
	tlsKeyFile      string
	otelEndpoint    string
	allowLoopback   bool
	watchNamespaces []string
	zap             zap.Options
	version         bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("switchboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.runtimeAddr, "runtime-bind-address", ":8080", "Address the execution HTTP API listens on.")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "PEM certificate (chain) of the execution API, which is then served over HTTPS; with --tls-key-file. Both files are read again when they change (cert-manager renews them); a pair that does not load keeps the previous one.")
	fs.StringVar(&o.tlsKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address serving /healthz and /readyz.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "", "Address serving Prometheus /metrics; 0 disables it. Default :8443, but 127.0.0.1:8443 in standalone mode with --auth=none, where nothing checks who scrapes.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address serving Go's profiles at /debug/pprof/ (net/http/pprof), unauthenticated: bind it to loopback, e.g. 127.0.0.1:6060; 0 disables it.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader among replicas; only the leader writes status.")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", "", "Namespace of the leader-election Lease. Default: $POD_NAMESPACE, else the kubeconfig context's namespace, else the pod's own namespace.")
	fs.StringVar(&o.manifests, "manifests", "", "Standalone mode: read ModelDeployment, CapabilityPolicy and Secret manifests from this folder instead of a cluster, and apply changes to it.")
	fs.Int64Var(&o.maxRequestBytes, "max-request-bytes", httpapi.DefaultMaxRequestBytes, "Largest accepted request body; larger ones get 413.")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "Longest time to read a request, body included; a stalled upload is closed. Event streams are exempt.")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 120*time.Second, "Idle keep-alive connections are closed after this long.")
	fs.IntVar(&o.maxEvents, "max-events-per-execution", engine.DefaultMaxEvents, "Events one execution may record, its terminal event included; past it the execution fails with output_too_large.")
	fs.Int64Var(&o.maxOutputBytes, "max-output-bytes", engine.DefaultMaxOutputBytes, "Materialized output (text, tool arguments, result) one execution may record; past it the execution fails with output_too_large.")
	fs.DurationVar(&o.idempotencyTTL, "idempotency-ttl", engine.DefaultIdempotencyTTL, "How long an Idempotency-Key is remembered (at least 24h).")
	fs.IntVar(&o.maxReservations, "max-reservations-per-principal", engine.DefaultMaxReservationsPerPrincipal, "Idempotency-Keys one caller (with --auth=none: all callers together) may have remembered at once, counted by the EventStore for all replicas; a new key beyond it is refused with rate_limited until the caller's earliest key expires. A key at the longest (255 characters) costs about 0.9 KB of the memory store (1.2 KB of Redis), so the default bounds one caller to about 9 MB (12 MB): a new key every 8.6 s sustained over the default --idempotency-ttl of 24h. 0: no limit.")
	fs.DurationVar(&o.sseKeepAlive, "sse-keepalive", httpapi.DefaultSSEKeepAlive, "Idle time after which an event stream gets a keep-alive comment.")
	fs.DurationVar(&o.sseWriteTimeout, "sse-write-timeout", httpapi.DefaultSSEWriteTimeout, "Deadline of each event-stream write; a stalled reader is dropped.")
	fs.DurationVar(&o.cleanupGrace, "cleanup-grace", 10*time.Second, "Longest wait for an adapter's remote cleanup after cancellation or deadline.")
	fs.DurationVar(&o.executionLease, "execution-lease", engine.DefaultLease, "Lease of the replica running an execution, renewed every third of it; when a replica stops renewing, another one ends or adopts its executions after this long.")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 30*time.Second, "On SIGTERM, how long running executions may go on before they are handed over to other replicas (redis, postgres) or ended (memory).")
	fs.IntVar(&o.maxConcurrent, "max-concurrent-executions", 256, "Executions running at once on this replica; more are refused with rate_limited.")
	fs.StringVar(&o.eventStore, "event-store", "memory", "EventStore implementation: memory (one replica, lost on restart), redis (several replicas, restarts) or postgres (several replicas, durable: nothing acknowledged is lost).")
	o.redis.RegisterFlags(fs)
	o.postgres.RegisterFlags(fs)
	fs.IntVar(&o.redisWait, "redis-wait-replicas", 0, "With --event-store=redis: after every terminal event, wait (Redis WAIT) until this many Redis replicas have it, narrowing what a failover can lose (spec/redis.md).")
	fs.StringVar(&o.authMode, "auth", "", "How callers are identified: none, kubernetes (TokenReview and RBAC) or static (--auth-tokens-file). Default: kubernetes in cluster mode, none standalone.")
	fs.StringVar(&o.authAudiences, "auth-audiences", "switchboard", "Comma-separated audiences a caller's token must be issued for (--auth=kubernetes).")
	fs.IntVar(&o.authInFlight, "auth-reviews-in-flight", kubeauth.DefaultReviewsInFlight, "TokenReviews, and SubjectAccessReviews, one replica has in flight at most, each (--auth=kubernetes); a request that needs one more gets 503 provider_unavailable at once.")
	fs.IntVar(&o.authFailures, "auth-failures-per-address", kubeauth.DefaultFailureBurst, "Failed authentications a client address may make in a row (--auth=kubernetes); past them one more a second, and meanwhile 429 rate_limited without a review. 0: no limit.")
	fs.StringVar(&o.authTokensFile, "auth-tokens-file", "", "File of lines token,principal,namespace[;namespace…][,read][,cancel][,metrics] (* for all namespaces) for --auth=static; re-read when it changes.")
	fs.StringVar(&o.tokenKeyFile, "stream-token-key-file", "", "File holding the key (at least 32 bytes) from which the keys that sign the read tokens of stream links are derived, the same on every replica; re-read when it changes (the new key signs, the previous one verifies for --stream-token-ttl). Default: a random key per rotation period, shared by all replicas through the EventStore.")
	fs.DurationVar(&o.tokenTTL, "stream-token-ttl", auth.DefaultStreamTokenTTL, "Lifetime of the signed read tokens in the links of a new execution.")
	fs.DurationVar(&o.tokenRotation, "stream-token-key-rotation", auth.DefaultStreamTokenKeyRotation, "How long one key signs stream links; the previous key verifies the links it signed for --stream-token-ttl more. Whole seconds, at least --stream-token-ttl.")
	fs.IntVar(&o.maxPerPrincipal, "max-concurrent-per-principal", 0, "Executions one caller may run at once on this replica; more are refused with rate_limited. 0: no limit.")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose ModelDeployments, CapabilityPolicies, Budgets and Secrets the manager watches; objects elsewhere are ignored. Empty: all namespaces.", func(s string) error {
		ns, err := controllers.ParseWatchNamespaces(s)
		o.watchNamespaces = ns
		return err
	})
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "In cluster mode, serve /metrics over TLS to callers whose token RBAC allows get on /metrics; false serves plain HTTP.")
	fs.StringVar(&o.metricsCertPath, "metrics-cert-path", "", "In cluster mode with --metrics-secure, the directory holding the serving certificate of /metrics (read again when it changes); default: a self-signed certificate.")
	fs.StringVar(&o.metricsCertName, "metrics-cert-name", "tls.crt", "The certificate's file name in --metrics-cert-path.")
	fs.StringVar(&o.metricsCertKey, "metrics-cert-key", "tls.key", "The private key's file name in --metrics-cert-path.")
	fs.StringVar(&o.otelEndpoint, "otel-endpoint", "", "Base URL of the OTLP endpoint to export traces to, e.g. http://otel-collector:4318 (spans go to its /v1/traces); default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT; none of them: tracing is off.")
	fs.DurationVar(&o.retention, "retention", 0, "How long terminal executions are kept (default 1h for memory, 24h for redis and postgres).")
	fs.BoolVar(&o.allowLoopback, "allow-loopback-endpoints", false, "Let provider endpoints and token endpoints resolve to loopback (127.0.0.0/8, ::1). Default: true in standalone mode (--manifests), false in cluster mode. Link-local, cloud metadata, multicast and unspecified addresses are never dialled (spec/modeldeployments.md).")
	o.zap.BindFlags(fs)
	fs.BoolVar(&o.version, "version", false, "Print the version, commit, build date and Go version, and exit.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.version {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	loopbackSet := false
	fs.Visit(func(f *flag.Flag) { loopbackSet = loopbackSet || f.Name == "allow-loopback-endpoints" })
	if !loopbackSet {
		// Standalone manifests are the operator's; cluster ones any namespace's writer's.
		o.allowLoopback = o.manifests != ""
	}
	if o.idempotencyTTL < 24*time.Hour {
		return nil, fmt.Errorf("--idempotency-ttl must be at least 24h, got %s", o.idempotencyTTL)
	}
	if o.authMode == "" {
		o.authMode = "kubernetes"
		if o.manifests != "" {
			o.authMode = "none"
		}
	}
	switch o.authMode {
	case "none", "kubernetes":
	case "static":
		if o.authTokensFile == "" {
			return nil, errors.New("--auth=static needs --auth-tokens-file")
		}
	default:
		return nil, fmt.Errorf("--auth: unknown mode %q (want none, kubernetes or static)", o.authMode)
	}
	if o.authMode == "kubernetes" && o.manifests != "" {
		return nil, errors.New("--auth=kubernetes needs cluster mode; use none or static with --manifests")
	}
	if o.metricsAddr == "" {
		// Without authentication nothing guards /metrics, which names every deployment
		// and model: only this host reaches it unless the operator says otherwise.
		o.metricsAddr = ":8443"
		if o.manifests != "" && o.authMode == "none" {
			o.metricsAddr = "127.0.0.1:8443"
		}
	}
	if (o.tlsCertFile == "") != (o.tlsKeyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if o.metricsCertPath != "" && (o.manifests != "" || !o.metricsSecure) {
		return nil, errors.New("--metrics-cert-path needs cluster mode with --metrics-secure")
	}
	if o.maxEvents < engine.MinMaxEvents {
		return nil, fmt.Errorf("--max-events-per-execution must be at least %d, got %d", engine.MinMaxEvents, o.maxEvents)
	}
	if o.maxRequestBytes <= 0 || o.maxConcurrent <= 0 || o.cleanupGrace <= 0 || o.retention < 0 ||
		o.sseKeepAlive <= 0 || o.sseWriteTimeout <= 0 || o.readTimeout <= 0 || o.idleTimeout <= 0 ||
		o.maxOutputBytes <= 0 || o.executionLease <= 0 || o.shutdownGrace < 0 || o.redisWait < 0 ||
		o.tokenTTL <= 0 || o.maxPerPrincipal < 0 || o.maxReservations < 0 {
		return nil, errors.New("sizes, counts and durations must be positive")
	}
	if o.tokenRotation < o.tokenTTL || o.tokenRotation%time.Second != 0 {
		return nil, fmt.Errorf("--stream-token-key-rotation must be whole seconds and at least --stream-token-ttl (%s), got %s", o.tokenTTL, o.tokenRotation)
	}
	if o.authInFlight <= 0 || o.authFailures < 0 {
		return nil, errors.New("--auth-reviews-in-flight must be positive, --auth-failures-per-address not negative")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(os.Stdout, "switchboard", version.Get())
		return err
	}
	o.zap.DestWriter = stderr
	capVerbosity(&o.zap)
	log := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(log)

	// In cluster mode the API server holds the models and reviews the callers' tokens.
	var kubeConfig *rest.Config
	if o.manifests == "" {
		if kubeConfig, err = ctrl.GetConfig(); err != nil {
			return fmt.Errorf("load kubeconfig: %w", err)
		}
	}

	// Runtime metrics go to controller-runtime's registry, which /metrics serves in both
	// modes (spec/observability.md).
	metrics := telemetry.NewMetrics()
	for _, c := range metrics.Collectors() {
		if err := ctrlmetrics.Registry.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	tp, err := telemetry.Tracing(ctx, telemetry.TracingConfig{Endpoint: o.otelEndpoint, Logger: log.WithName("tracing")})
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	if tp != nil {
		log.Info("Exporting traces over OTLP")
		defer func() {
			// Flush what is buffered, briefly: the process is stopping.
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(flush); err != nil {
				log.Error(err, "Cannot flush spans")
			}
		}()
	}
	tracer := telemetry.Tracer(tp)
	accessLog := telemetry.NewAccessLog(o.zap)
	defer accessLog.Close()

	opened, closeStore, err := openStore(ctx, o, log)
	if err != nil {
		return err
	}
	defer closeStore()
	store := opened.timed(metrics.Store(o.eventStore))
	callers, tokens, err := openAuth(logr.NewContext(ctx, log.WithName("auth")), o, kubeConfig, store)
	if err != nil {
		return err
	}

	holder := &routing.Holder{}
	// Budgets (spec/budgets.md) are enforced on every replica, from the Budgets the
	// controllers (or the manifests) publish and the store's shared counters.
	budgets := &budget.Holder{}
	adapters := providers(o.allowLoopback)
	enforcer := budget.New(budget.Config{
		Counting: func(provider string) pricing.Counting { return adapters[provider].Counting },
		Store:    budgetStore{store.Budgets, store.Log},
		Budgets:  budgets,
		Table:    holder,
		Observer: metrics.Budget(),
		Logger:   log.WithName("budget"),
	})
	go enforcer.Sweep(ctx, budgetSweepInterval)
	eng := engine.New(engine.Config{
		Store:           store,
		Table:           holder,
		Providers:       adapters,
		MaxConcurrent:   o.maxConcurrent,
		MaxPerPrincipal: o.maxPerPrincipal,
		CleanupGrace:    o.cleanupGrace,
		MaxEvents:       o.maxEvents,
		MaxOutputBytes:  o.maxOutputBytes,
		IdempotencyTTL:  o.idempotencyTTL,
		MaxReservations: o.maxReservations,
		Replica:         replicaName(),
		Lease:           o.executionLease,
		// Replicas share a Redis or PostgreSQL store: the executions a stopping replica
		// still runs are handed over to the others. The memory store has no others.
		HandOver:  o.eventStore != "memory",
		Logger:    log.WithName("engine"),
		Observer:  metrics.Engine(),
		Tracer:    tracer,
		Admission: enforcer,
	})
	// Executions end, or are handed over, before the store closes (deferred first, so
	// this runs after it); normally drain has done it already.
	defer func() {
		if err := eng.Close(); err != nil {
			log.Error(err, "Engine shutdown incomplete")
		}
	}()

	// Shutdown is a drain (spec/events.md, "Shutdown"): on SIGTERM the replica turns
	// unready at once and refuses new executions, while its servers keep serving
	// reads and event streams, so that followers see their executions end; once the
	// engine has drained, serving ends.
	var draining atomic.Bool
	serving, endServing := context.WithCancel(context.WithoutCancel(ctx))
	defer endServing()
	go func() {
		select {
		case <-serving.Done():
			return
		case <-ctx.Done():
		}
		draining.Store(true)
		log.Info("Draining: refusing new executions", "grace", o.shutdownGrace)
		grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownGrace)
		defer cancel()
		if err := eng.Shutdown(grace); err != nil {
			log.Info("Shutdown grace over: executions still running were handed over or ended")
		}
		endServing()
	}()

	// Every request's context derives from serving, which ends when the drain is over:
	// open event streams close then instead of holding the server's graceful shutdown.
	// Submissions run on contexts detached from it.
	api := newHTTPServer(o, o.runtimeAddr, httpapi.NewServer(httpapi.Config{
		Engine:          eng,
		Store:           store,
		Announcer:       store.announcer,
		MaxRequestBytes: o.maxRequestBytes,
		SSEKeepAlive:    o.sseKeepAlive,
		SSEWriteTimeout: o.sseWriteTimeout,
		Auth:            callers,
		StreamTokens:    tokens,
		Logger:          log.WithName("httpapi"),
		AccessLog:       accessLog.Write,
		Observer:        metrics.HTTP(),
		Tracer:          tracer,
		Table:           holder,
		FrontDoors:      frontDoors(),
	}))
	api.BaseContext = func(net.Listener) context.Context { return serving }
	var certs []*certwatcher.CertWatcher
	if o.tlsCertFile != "" {
		w, err := servingTLS(api, o.tlsCertFile, o.tlsKeyFile)
		if err != nil {
			return fmt.Errorf("--tls-cert-file: %w", err)
		}
		certs = append(certs, w)
	}

	ready := readiness{holder: holder, draining: &draining, store: store.pinger}
	registry := routing.NewRegistry(holder, routing.OnPublish(metrics.TablePublished))
	budgetOpts := controllers.BudgetOptions{Holder: budgets, Table: holder, Store: store.Budgets, Metrics: metrics}
	if o.manifests != "" {
		return runStandalone(serving, o, registry, budgetOpts, ready, api, callers, certs, log)
	}
	return runInCluster(serving, o, kubeConfig, registry, budgetOpts, ready, api, certs)
}

// servingTLS makes srv serve HTTPS with the key pair of certFile and keyFile, and returns
// the watcher that reloads it when the files change (controller-runtime's certwatcher, as
// kubebuilder's scaffold uses for webhooks and metrics): it polls the files and follows
// their file-system events, and a pair that does not load is logged and leaves the
// previous one in force. The watcher serves nothing until it is started.
func servingTLS(srv *http.Server, certFile, keyFile string) (*certwatcher.CertWatcher, error) {
	w, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}
	return w, nil
}

// openAuth builds what --auth selects (spec/authentication.md): nil for none, and the
// signer of stream links, whose keys derive from --stream-token-key-file or are generated
// per rotation period and shared by every replica through the store.
// It logs through the logger of ctx.
func openAuth(ctx context.Context, o *options, kubeConfig *rest.Config, store auth.SecretStore) (*auth.Auth, *auth.StreamTokens, error) {
	var a auth.Auth
	switch o.authMode {
	case "none":
		return nil, nil, nil
	case "static":
		var err error
		if a, err = auth.Static(ctx, o.authTokensFile, logr.FromContextOrDiscard(ctx)); err != nil {
			return nil, nil, fmt.Errorf("--auth-tokens-file: %w", err)
		}
	case "kubernetes":
		client, err := kubeauth.NewClient(kubeConfig, o.authInFlight)
		if err != nil {
			return nil, nil, fmt.Errorf("kubernetes client for authentication: %w", err)
		}
		var audiences []string
		for a := range strings.SplitSeq(o.authAudiences, ",") {
			if a = strings.TrimSpace(a); a != "" {
				audiences = append(audiences, a)
			}
		}
		failures := o.authFailures
		if failures == 0 {
			failures = -1 // no limit
		}
		if a, err = kubeauth.New(ctx, kubeauth.Config{Client: client, Audiences: audiences, FailureBurst: failures}); err != nil {
			return nil, nil, fmt.Errorf("--auth=kubernetes: %w", err)
		}
	}
	tokens, err := auth.NewStreamTokens(ctx, auth.StreamTokenConfig{
		TTL:         o.tokenTTL,
		KeyRotation: o.tokenRotation,
		KeyFile:     o.tokenKeyFile,
		Store:       store,
		Logger:      logr.FromContextOrDiscard(ctx),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("stream tokens: %w", err)
	}
	return &a, tokens, nil
}

// leaderElectionNamespace is where the leader-election Lease lives: the flag, else the
// POD_NAMESPACE the chart sets from the downward API, else the namespace of the
// kubeconfig's context (a replica run outside a pod), else "" — controller-runtime then
// reads the pod's ServiceAccount namespace.
func leaderElectionNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	if ns, _, err := loader.Namespace(); err == nil && ns != "" {
		if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err != nil || ns != "default" {
			return ns
		}
	}
	return ""
}

// maxVerbosity is the most verbose log level the binary allows: from level 8 on,
// client-go logs the bodies of API responses, and with them the Secrets the manager reads.
const maxVerbosity = 7

// capVerbosity lowers a --zap-log-level above maxVerbosity to it: credentials never reach
// the log (spec/modeldeployments.md).
func capVerbosity(o *zap.Options) {
	if l, ok := o.Level.(uberzap.AtomicLevel); ok && l.Level() < -maxVerbosity {
		l.SetLevel(-maxVerbosity)
	}
}

// replicaName names this replica as the holder of execution leases: the host name (the
// pod's name in a cluster) and a random suffix, so that a restarted replica is not
// mistaken for its predecessor.
func replicaName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "switchboard"
	}
	return host + "-" + rand.Text()[:8]
}

// eventStore is the EventStore as the runtime's parts use it: by role (package
// eventstore), every field the same store.
type eventStore struct {
	eventstore.Log
	eventstore.Reservations
	eventstore.Cancels
	eventstore.Leases
	eventstore.Secrets
	eventstore.Budgets
	// announcer is the store when its wake-ups carry the events they announce (Redis);
	// nil otherwise.
	announcer eventstore.Announcer
	// pinger checks that the store's backend answers, for /readyz (PostgreSQL: while
	// the database is unreachable the replica is not ready); nil for none.
	pinger interface{ Ping(context.Context) error }
}

// budgetStore is the store as the Budget enforcer uses it.
type budgetStore struct {
	eventstore.Budgets
	eventstore.Reader
}

// budgetReportInterval is how often a standalone replica records what its Budgets used
// in the metrics (in a cluster, the leader's status writer does).
const budgetReportInterval = 10 * time.Second

// budgetSweepInterval is how often a replica settles the reservations of executions
// whose runner stopped before settling them (budget.Enforcer.Sweep).
const budgetSweepInterval = 5 * time.Second

// timed returns s with the operations of every role timed by timer
// (spec/observability.md, "Metrics").
func (s eventStore) timed(timer eventstore.Timer) eventStore {
	return eventStore{
		Log:          eventstore.InstrumentLog(s.Log, timer),
		Reservations: eventstore.InstrumentReservations(s.Reservations, timer),
		Cancels:      eventstore.InstrumentCancels(s.Cancels, timer),
		Leases:       eventstore.InstrumentLeases(s.Leases, timer),
		Secrets:      eventstore.InstrumentSecrets(s.Secrets, timer),
		Budgets:      eventstore.InstrumentBudgets(s.Budgets, timer),
		announcer:    s.announcer, // never timed: it never calls the backend
		pinger:       s.pinger,
	}
}

// openStore opens the EventStore the flags select, and returns it with the function
// that closes it (and its connection).
func openStore(ctx context.Context, o *options, log logr.Logger) (eventStore, func(), error) {
	switch o.eventStore {
	case "memory":
		retention := memory.DefaultRetention
		if o.retention > 0 {
			retention = o.retention
		}
		s := memory.New(memory.WithRetention(retention))
		roles := eventStore{Log: s, Reservations: s, Cancels: s, Leases: s, Secrets: s, Budgets: s}
		return roles, func() { _ = s.Close() }, nil
	case "redis":
		target, err := o.redis.Resolve(nil)
		if err != nil {
			return eventStore{}, nil, fmt.Errorf("--event-store=redis: %w", err)
		}
		log.Info("Connecting to Redis", "redis", target.String(), "source", target.Source())
		client, err := target.Connect(ctx)
		if err != nil {
			return eventStore{}, nil, fmt.Errorf("open redis event store: %w", err)
		}
		var opts []redisstore.Option
		if o.retention > 0 {
			opts = append(opts, redisstore.WithRetention(o.retention))
		}
		if o.redisWait > 0 {
			opts = append(opts, redisstore.WithWaitReplicas(o.redisWait, 0))
		}
		s, err := redisstore.NewFromClient(client, opts...)
		if err != nil {
			_ = client.Close()
			return eventStore{}, nil, fmt.Errorf("open redis event store: %w", err)
		}
		roles := eventStore{Log: s, Reservations: s, Cancels: s, Leases: s, Secrets: s, Budgets: s, announcer: s}
		return roles, func() { _ = s.Close(); _ = client.Close() }, nil
	case "postgres":
		url, source, err := o.postgres.Resolve(nil)
		if err != nil {
			return eventStore{}, nil, fmt.Errorf("--event-store=postgres: %w", err)
		}
		log.Info("Connecting to PostgreSQL", "source", source)
		var opts []postgresstore.Option
		if o.retention > 0 {
			opts = append(opts, postgresstore.WithRetention(o.retention))
		}
		// A short outage (a restart) delays a running execution's events and loses
		// none: appends are retried within the execution's lease (spec/postgres.md).
		opts = append(opts, postgresstore.WithRetryFor(o.executionLease))
		s, err := postgresstore.Open(ctx, url, opts...)
		if err != nil {
			return eventStore{}, nil, fmt.Errorf("open postgres event store: %w", err)
		}
		roles := eventStore{Log: s, Reservations: s, Cancels: s, Leases: s, Secrets: s, Budgets: s, pinger: s}
		return roles, func() { _ = s.Close() }, nil
	}
	return eventStore{}, nil, fmt.Errorf("--event-store: unknown store %q (want memory, redis or postgres)", o.eventStore)
}

// runInCluster runs the controller manager; the runtime's HTTP server is one of its
// runnables, on every replica.
func runInCluster(ctx context.Context, o *options, cfg *rest.Config, registry *routing.Registry, budgets controllers.BudgetOptions,
	ready readiness, api *http.Server, certs []*certwatcher.CertWatcher) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	// /metrics over TLS, for callers whose token RBAC allows get on /metrics, as
	// kubebuilder scaffolds it (spec/authentication.md, "Metrics"); a self-signed
	// certificate unless one is mounted. The filter works like controller-runtime's but
	// answers a refused token 401 rather than 500.
	metrics := metricsserver.Options{BindAddress: o.metricsAddr}
	if o.metricsSecure {
		metrics.SecureServing = true
		metrics.FilterProvider = kubeauth.MetricsFilter
	}
	if o.metricsCertPath != "" {
		// A mounted certificate (cert-manager's), reloaded when it is renewed, as
		// kubebuilder's cmd/main.go wires --metrics-cert-path.
		w, err := certwatcher.New(filepath.Join(o.metricsCertPath, o.metricsCertName), filepath.Join(o.metricsCertPath, o.metricsCertKey))
		if err != nil {
			return fmt.Errorf("--metrics-cert-path: %w", err)
		}
		metrics.TLSOpts = append(metrics.TLSOpts, func(c *tls.Config) { c.GetCertificate = w.GetCertificate })
		certs = append(certs, w)
	}
	mgrOpts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metrics,
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         o.leaderElect,
		LeaderElectionID:       "switchboard.ai.switchboard.dev",
	}
	if o.leaderElect {
		mgrOpts.LeaderElectionNamespace = leaderElectionNamespace(o.leaderElectNS)
	}
	// Secrets are read uncached and watched as metadata only; --watch-namespaces limits
	// the caches (spec/modeldeployments.md, "What the manager reads").
	controllers.Options{WatchNamespaces: o.watchNamespaces}.ApplyTo(&mgrOpts)
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := controllers.Setup(mgr, registry); err != nil {
		return err
	}
	budgetsSynced, err := controllers.SetupBudgets(mgr, budgets)
	if err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("budgets", func(*http.Request) error {
		if !budgetsSynced() {
			return errors.New("budgets not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("routing-table", ready.tableSynced); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("not-draining", ready.notDraining); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("event-store", ready.storeReachable); err != nil {
		return err
	}
	for _, w := range certs {
		if err := mgr.Add(w); err != nil {
			return err
		}
	}
	if err := mgr.Add(httpRunnable{api}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// runStandalone serves from manifest files: no cluster, the same table builder. callers
// is what --auth selected (nil for none).
func runStandalone(ctx context.Context, o *options, registry *routing.Registry, budgets controllers.BudgetOptions, ready readiness, api *http.Server,
	callers *auth.Auth, certs []*certwatcher.CertWatcher, log logr.Logger) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return controllers.WatchManifests(ctx, o.manifests, registry, budgets.Holder, 0, log.WithName("manifests"))
	})
	g.Go(func() error {
		controllers.ReportBudgets(ctx, budgets, budgetReportInterval, log.WithName("budget"))
		return nil
	})
	for _, w := range certs {
		g.Go(func() error { return w.Start(ctx) })
	}

	probes := http.NewServeMux()
	probes.Handle("/healthz", http.StripPrefix("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}))
	probes.Handle("/readyz", http.StripPrefix("/readyz", &healthz.Handler{Checks: map[string]healthz.Checker{
		"routing-table": ready.tableSynced,
		"not-draining":  ready.notDraining,
		"event-store":   ready.storeReachable,
	}}))
	servers := []*http.Server{api, newHTTPServer(o, o.probeAddr, probes)}
	if o.metricsAddr != "0" {
		h := promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{})
		if callers != nil {
			// Static mode: only tokens with the grant metrics (spec/authentication.md,
			// "Metrics").
			h = auth.MetricsFilter(*callers, log.WithName("metrics"), h)
		}
		metrics := http.NewServeMux()
		metrics.Handle("/metrics", h)
		servers = append(servers, newHTTPServer(o, o.metricsAddr, metrics))
	}
	if o.pprofAddr != "0" && o.pprofAddr != "" {
		servers = append(servers, newHTTPServer(o, o.pprofAddr, pprofHandler()))
	}
	for _, srv := range servers {
		g.Go(func() error { return serve(ctx, srv) })
	}
	log.Info("Starting switchboard in standalone mode", "manifests", o.manifests, "runtime", o.runtimeAddr, "metrics", o.metricsAddr)
	return g.Wait()
}

// pprofHandler serves net/http/pprof's handlers under /debug/pprof/, as
// controller-runtime's manager does for --pprof-bind-address in cluster mode.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
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
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig.GetCertificate
			return
		}
		errc <- srv.Serve(ln)
	}()
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

// readiness holds the replica's readiness checks.
type readiness struct {
	holder   *routing.Holder
	draining *atomic.Bool
	// store pings the EventStore's backend; nil when it has none to ping.
	store interface{ Ping(context.Context) error }
}

// storeReachable is unready while the EventStore's database cannot be reached
// (spec/postgres.md, "Outages"): new executions would be refused with 503.
func (r readiness) storeReachable(req *http.Request) error {
	if r.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
	defer cancel()
	if err := r.store.Ping(ctx); err != nil {
		return errors.New("event store unreachable")
	}
	return nil
}

// tableSynced is ready only once the first complete routing table is published.
func (r readiness) tableSynced(*http.Request) error {
	if !r.holder.Synced() {
		return errors.New("routing table not synced")
	}
	return nil
}

// notDraining is unready from the moment shutdown starts.
func (r readiness) notDraining(*http.Request) error {
	if r.draining.Load() {
		return errors.New("shutting down")
	}
	return nil
}
