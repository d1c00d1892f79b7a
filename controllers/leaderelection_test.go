package controllers

import (
	"context"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// replica is one manager of the leader-election spec, with its own table and a count of
// the status writes it made.
type replica struct {
	holder       *routing.Holder
	statusWrites atomic.Int64
}

func startReplica(ctx context.Context) *replica {
	r := &replica{holder: &routing.Holder{}}
	opts := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		// Several managers in one process register the same controller names.
		Controller:              config.Controller{SkipNameValidation: ptr(true)},
		LeaderElection:          true,
		LeaderElectionID:        "switchboard-test",
		LeaderElectionNamespace: leaderNamespace,
		LeaseDuration:           ptr(4 * time.Second),
		RenewDeadline:           ptr(3 * time.Second),
		RetryPeriod:             ptr(500 * time.Millisecond),
		NewClient: func(config *rest.Config, options client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(config, options)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if sub == "status" {
						r.statusWrites.Add(1)
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			}), nil
		},
	}
	Options{WatchNamespaces: []string{leaderNamespace}}.ApplyTo(&opts)
	mgr, err := ctrl.NewManager(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(Setup(mgr, routing.NewRegistry(r.holder))).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return r
}

func ptr[T any](v T) *T { return &v }

// tableRefs lists a replica's table as comparable values.
func tableRefs(h *routing.Holder) []string {
	var out []string
	for _, d := range h.Load().Deployments() {
		out = append(out, d.Ref.String()+" "+d.Model+" "+d.Credential.Reveal()+" "+d.Capabilities.String())
	}
	return out
}

var _ = Describe("Two replicas with leader election", func() {
	It("build the same table on both while only the leader writes status", func() {
		ns := leaderNamespace
		Expect(k8s.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		ctx, stop := context.WithCancel(suiteCtx)
		DeferCleanup(stop)
		a, b := startReplica(ctx), startReplica(ctx)

		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk-shared"}))).To(Succeed())
		names := []string{"one", "two", "three"}
		for _, n := range names {
			Expect(k8s.Create(suiteCtx, newMD(ns, n))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, n := range names {
				g.Expect(condition(fetch(g, newMD(ns, n)), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			}
			g.Expect(tableRefs(a.holder)).To(HaveLen(3))
			g.Expect(tableRefs(b.holder)).To(Equal(tableRefs(a.holder)))
		}, 30*time.Second).Should(Succeed())
		Expect(a.holder.Synced() && b.holder.Synced()).To(BeTrue())

		// A spec change: both tables follow, still one writer.
		two := newMD(ns, "two")
		patchMD(two, func(m *v1alpha1.ModelDeployment) { m.Spec.Suspend = true })
		Eventually(func(g Gomega) {
			g.Expect(tableRefs(a.holder)).To(HaveLen(2))
			g.Expect(tableRefs(b.holder)).To(Equal(tableRefs(a.holder)))
			g.Expect(condition(fetch(g, two), v1alpha1.ConditionRoutable).Reason).To(Equal(v1alpha1.ReasonSuspended))
		}, 10*time.Second).Should(Succeed())

		writesA, writesB := a.statusWrites.Load(), b.statusWrites.Load()
		Expect(writesA + writesB).To(BeNumerically(">", 0))
		Expect(writesA == 0 || writesB == 0).To(BeTrue(), "status writes: a=%d b=%d", writesA, writesB)
	})
})
