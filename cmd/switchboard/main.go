// Command switchboard runs the Switchboard controller manager and execution runtime.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/controllers"
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

// options are the command-line flags (CONTRACT §4).
type options struct {
	runtimeAddr string
	probeAddr   string
	metricsAddr string
	leaderElect bool
	manifests   string
	zap         zap.Options
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("switchboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.runtimeAddr, "runtime-bind-address", ":8080", "Address the execution HTTP API listens on.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address serving /healthz and /readyz.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address serving Prometheus /metrics; 0 disables it.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader among replicas; only the leader writes status.")
	fs.StringVar(&o.manifests, "manifests", "", "Standalone mode: read ModelDeployment, CapabilityPolicy and Secret manifests from this folder instead of a cluster.")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.zap.DestWriter = stderr
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	if o.manifests != "" {
		return errors.New("--manifests: standalone mode is not available in this build yet")
	}

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

	holder := &routing.Holder{}
	if err := controllers.Setup(mgr, routing.NewRegistry(holder)); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("routing-table", tableSynced(holder)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// tableSynced is ready only once the first complete routing table is published.
func tableSynced(h *routing.Holder) healthz.Checker {
	return func(*http.Request) error {
		if !h.Synced() {
			return errors.New("routing table not synced")
		}
		return nil
	}
}
