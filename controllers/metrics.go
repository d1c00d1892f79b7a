package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Recorder records per-object controller metrics. A nil *Recorder records nothing, so
// reconcilers built without one (tests, tools) need no metrics wiring.
type Recorder struct {
	ready *prometheus.GaugeVec
}

// NewRecorder returns a Recorder whose collectors are not registered anywhere yet.
func NewRecorder() *Recorder {
	return &Recorder{
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_modeldeployment_ready",
			Help: "Whether this replica routes to the ModelDeployment: 1 when it is routable and in " +
				"the routing table, 0 when it is not (missing Secret, policy violation, invalid " +
				"spec, suspended; its Routable condition says why). The series is removed when " +
				"the ModelDeployment is deleted.",
		}, []string{"namespace", "name"}),
	}
}

// Collectors returns the metrics to register with a Prometheus registry.
func (r *Recorder) Collectors() []prometheus.Collector {
	if r == nil {
		return nil
	}
	return []prometheus.Collector{r.ready}
}

// RecordReady sets the readiness of ref.
func (r *Recorder) RecordReady(ref routing.Ref, ready bool) {
	if r == nil {
		return
	}
	v := 0.0
	if ready {
		v = 1
	}
	r.ready.WithLabelValues(ref.Namespace, ref.Name).Set(v)
}

// Forget deletes every series of ref, so a deleted object does not linger as 0.
func (r *Recorder) Forget(ref routing.Ref) {
	if r == nil {
		return
	}
	r.ready.DeleteLabelValues(ref.Namespace, ref.Name)
}

// readiness is the process-wide Recorder of both modes: Setup hands it to the reconciler
// and Manifests.Apply records into it. It is registered here, once per process, with
// controller-runtime's registry, which both modes serve on /metrics; registering in Setup
// would need a guard because tests call Setup once per manager, and would miss
// standalone mode, which never calls Setup. controller-runtime registers its own
// controller and workqueue metrics into the same registry the same way.
var readiness = NewRecorder()

func init() {
	ctrlmetrics.Registry.MustRegister(readiness.Collectors()...)
}
