package controllers

import (
	"testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// readySeries reads ref's switchboard_modeldeployment_ready series from the registry the
// binary serves on /metrics. Gathering, unlike WithLabelValues, never creates the series,
// so found=false means it does not exist.
func readySeries(ref routing.Ref) (value float64, found bool, err error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, f := range families {
		if f.GetName() != "switchboard_modeldeployment_ready" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ref.Namespace && labels["name"] == ref.Name {
				return m.GetGauge().GetValue(), true, nil
			}
		}
	}
	return 0, false, nil
}

func TestNilRecorderRecordsNothing(t *testing.T) {
	var r *Recorder
	ref := routing.Ref{Namespace: "nil-recorder", Name: "gpt"}
	r.RecordReady(ref, true)
	r.Forget(ref)
	if c := r.Collectors(); c != nil {
		t.Errorf("Collectors() = %v, want nil", c)
	}
	if _, found, err := readySeries(ref); err != nil || found {
		t.Errorf("series found = %v (err %v), want none", found, err)
	}
}
