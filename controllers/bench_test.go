package controllers

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// benchObjects returns 10,000 ModelDeployments over 50 namespaces, the Secret they use,
// and two policies of each namespace, one of them selecting half of its deployments.
func benchObjects() ([]*v1alpha1.ModelDeployment, *corev1.Secret, []v1alpha1.CapabilityPolicy) {
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
	for i := range policies { // as read from an API server
		policies[i].UID = types.UID(fmt.Sprintf("uid-%d", i))
		policies[i].ResourceVersion = "1"
	}
	return mds, secret, policies
}

func policiesByNamespace(policies []v1alpha1.CapabilityPolicy) map[string][]v1alpha1.CapabilityPolicy {
	out := map[string][]v1alpha1.CapabilityPolicy{}
	for _, p := range policies {
		out[p.Namespace] = append(out[p.Namespace], p)
	}
	return out
}

// BenchmarkBuildTable10k converts 10,000 ModelDeployments (with their Secrets and two
// policies of each namespace) into routing entries and publishes one table: the work of
// a replica's start-up sync. "reconciler" resolves each object against the policies of
// its namespace through the reconciler's policy cache, as each reconcile does after
// listing them; "manifests" compiles the policies once for all objects, as
// Manifests.Apply does.
func BenchmarkBuildTable10k(b *testing.B) {
	mds, secret, policies := benchObjects()
	b.Run("reconciler", func(b *testing.B) {
		own := policiesByNamespace(policies)
		b.ReportAllocs()
		for b.Loop() {
			var cache policyCache // a fresh replica's
			reg := routing.NewRegistry(&routing.Holder{})
			for _, md := range mds {
				res := resolveWith(md, secret, cache.compiled(md.Namespace, own[md.Namespace]))
				reg.Set(routing.Ref{Namespace: md.Namespace, Name: md.Name}, res.deployment)
			}
			reg.Start()
		}
	})
	b.Run("manifests", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			reg := routing.NewRegistry(&routing.Holder{})
			compiled := compilePolicies(policies)
			for _, md := range mds {
				res := compiled.resolve(md, secret)
				reg.Set(routing.Ref{Namespace: md.Namespace, Name: md.Name}, res.deployment)
			}
			reg.Start()
		}
	})
}

// BenchmarkChangeOne10k is one reconcile's table work once 10,000 models are routed:
// resolve one changed ModelDeployment (its priority moves it within the ability's list)
// and publish the table with it, or remove it ("remove-add" alternates removal and
// re-adding).
func BenchmarkChangeOne10k(b *testing.B) {
	mds, secret, policies := benchObjects()
	own := policiesByNamespace(policies)
	reg := routing.NewRegistry(&routing.Holder{})
	for _, md := range mds {
		reg.Set(routing.Ref{Namespace: md.Namespace, Name: md.Name}, resolve(md, secret, own[md.Namespace]).deployment)
	}
	reg.Start()
	b.Run("change", func(b *testing.B) {
		md := mds[4321].DeepCopy()
		ref := routing.Ref{Namespace: md.Namespace, Name: md.Name}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			md.Spec.Routing = &v1alpha1.Routing{Priority: int32(i % 4)}
			reg.Set(ref, resolve(md, secret, own[md.Namespace]).deployment)
		}
	})
	b.Run("remove-add", func(b *testing.B) {
		md := mds[1234]
		ref := routing.Ref{Namespace: md.Namespace, Name: md.Name}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if i%2 == 0 {
				reg.Set(ref, nil)
			} else {
				reg.Set(ref, resolve(md, secret, own[md.Namespace]).deployment)
			}
		}
	})
}
