package controllers

import (
	"fmt"
	"testing"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// BenchmarkBuildTable10k converts 10,000 ModelDeployments (with their Secrets and two
// policies of each namespace) into routing entries and publishes one table: the work of
// a replica's start-up sync.
func BenchmarkBuildTable10k(b *testing.B) {
	const n = 10000
	mds := make([]*v1alpha1.ModelDeployment, n)
	for i := range mds {
		mds[i] = newMD(fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("model-%d", i),
			withLabels("tier", []string{"standard", "premium"}[i%2]),
			withCapabilities(v1alpha1.Capabilities{Tools: i%3 == 0}))
	}
	secret := newSecret("", map[string]string{"api-key": "sk"})
	policies := make([]v1alpha1.CapabilityPolicy, 0, 100)
	for i := range 50 {
		ns := fmt.Sprintf("ns-%d", i)
		policies = append(policies,
			*newPolicy(ns, "strict-tools", withToolsDisabled(), selecting("tier", "standard")),
			*newPolicy(ns, "text-only", withAllowedInputs("text", "json")))
	}
	b.ReportAllocs()
	for b.Loop() {
		reg := routing.NewRegistry(&routing.Holder{})
		for _, md := range mds {
			res := resolve(md, secret, policies)
			reg.Set(routing.Ref{Namespace: md.Namespace, Name: md.Name}, res.deployment)
		}
		reg.Start()
	}
}
