package kubeauth_test

import (
	"slices"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/auth/kubeauth"
)

// BenchmarkAuth measures what authentication and authorization add to a request: one
// Authenticate and one Allowed, as the API does for a submission in a namespace. "warm"
// answers from the caches; "miss" has them off, so every call makes one TokenReview and
// one SubjectAccessReview round trip to the (local) API server. It reports the p50 and
// p99 per request in µs; "none" (--auth=none) is the baseline measured in the same run.
func BenchmarkAuth(b *testing.B) {
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"none", 0}, {"warm", 0}, {"miss", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			ns := newNamespace(b, "bench")
			newServiceAccount(b, ns, "caller")
			bind(b, ns, newClusterRole(b, "bench", auth.VerbCreate), ns, "caller")
			token := tokenFor(b, ns, "caller", kubeauth.DefaultAudience)
			a, err := kubeauth.New(b.Context(), kubeauth.Config{Client: runtimeClient,
				AuthnCacheTTL: bc.ttl, AllowCacheTTL: bc.ttl, DenyCacheTTL: bc.ttl})
			if err != nil {
				b.Fatal(err)
			}
			if bc.name == "none" {
				a = auth.None()
			}
			req := bearer(token)
			once := func() {
				p, err := a.Authenticator.Authenticate(req)
				if err != nil {
					b.Fatal(err)
				}
				if ok, err := a.Authorizer.Allowed(b.Context(), p, auth.VerbCreate, ns); err != nil || !ok {
					b.Fatalf("Allowed: %v, %v", ok, err)
				}
			}
			// RBAC changes take a moment to reach the authorizer's view.
			deadline := time.Now().Add(10 * time.Second)
			for {
				p, err := a.Authenticator.Authenticate(req)
				if err == nil {
					if ok, _ := a.Authorizer.Allowed(b.Context(), p, auth.VerbCreate, ns); ok {
						break
					}
				}
				if time.Now().After(deadline) {
					b.Fatal("the binding never took effect")
				}
				time.Sleep(50 * time.Millisecond)
			}
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				once()
				samples = append(samples, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
