package controllers

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Budget status on a real API server (spec/budgets.md, "Status, conditions and Events"):
// every replica publishes the compiled Budgets; the leader writes each one's windows
// from the store's counters, its Ready condition from the deployments it governs, and
// Exhausted with an Event at each transition.

// hold makes execution id hold amount on the counter of unit in b's first limit's
// current window, as a reservation at admission would.
func hold(b *v1alpha1.Budget, id, unit string, amount int64) {
	GinkgoHelper()
	compiled, invalid := CompileBudget(b)
	Expect(invalid).To(BeEmpty())
	l := compiled.Limits[0]
	start, end := l.Window.Bounds(time.Now(), l.Location)
	Expect(budgetStore.Hold(suiteCtx, id, []eventstore.Hold{{
		Counter: compiled.Counter(start, l.Window, unit, ""), Unit: unit, Amount: amount, Expires: end.Add(time.Hour),
	}}, nil)).To(Succeed())
}

func budgetCondition(b *v1alpha1.Budget, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(b.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// budgetEvent returns the note of the last Event with reason about b, or "".
func budgetEvent(g Gomega, b *v1alpha1.Budget, reason string) (typ, note string) {
	list := &eventsv1.EventList{}
	g.Expect(k8s.List(suiteCtx, list, client.InNamespace(b.Namespace))).To(Succeed())
	for _, e := range list.Items {
		if e.Regarding.Name == b.Name && e.Regarding.Kind == "Budget" && e.Reason == reason {
			typ, note = e.Type, e.Note
		}
	}
	return typ, note
}

var _ = Describe("Budget status", func() {
	It("is published on every replica and written from the store's counters", func() {
		ns := newNamespace()
		b := newBudget(ns, "team", withBudgetLimits(v1alpha1.BudgetLimit{
			Window: v1alpha1.BudgetWindowMonth, TimeZone: "Europe/Berlin", Cost: ptr[v1alpha1.Price]("500.00"), Requests: ptr[int64](1000)}))
		Expect(k8s.Create(suiteCtx, b)).To(Succeed())

		By("the compiled Budget is in the set the enforcer reads")
		Eventually(func() []string {
			var names []string
			for _, c := range budgets.Load().In(ns) {
				names = append(names, c.Name+"/"+c.UID)
			}
			return names
		}).Should(Equal([]string{"team/" + string(b.UID)}))

		By("its windows are the current calendar windows, with what the counters hold")
		hold(b, "exe_status_1", budget.UnitCost, 123_456_789)
		berlin, err := time.LoadLocation("Europe/Berlin")
		Expect(err).NotTo(HaveOccurred())
		start, end := budget.Month.Bounds(time.Now(), berlin)
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			g.Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
			g.Expect(b.Status.Windows).To(HaveLen(1))
			w := b.Status.Windows[0]
			g.Expect(w.Window).To(Equal(v1alpha1.BudgetWindowMonth))
			g.Expect(w.TimeZone).To(Equal("Europe/Berlin"))
			g.Expect(w.Start.Time.Equal(start)).To(BeTrue(), "start %s, want %s", w.Start, start)
			g.Expect(w.ResetAt.Time.Equal(end)).To(BeTrue(), "resetAt %s, want %s", w.ResetAt, end)
			g.Expect(w.Used.Cost).To(Equal("123.456789"))
			g.Expect(w.Limit.Cost).To(Equal("500.00"))
			g.Expect(*w.Used.Requests).To(BeZero())
			g.Expect(w.Percent).To(Equal(int32(24)))
			g.Expect(b.Status.Window).To(Equal(v1alpha1.BudgetWindowMonth))
			g.Expect(b.Status.Used).To(Equal("123.46"))
			g.Expect(b.Status.Limit).To(Equal("500.00"))
			g.Expect(b.Status.Percent).To(Equal(int32(24)))
			g.Expect(budgetCondition(b, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonEnforced))
			g.Expect(budgetCondition(b, v1alpha1.ConditionExhausted).Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
	})

	It("is Exhausted at once when a limit is reached, with an Event each way", func() {
		ns := newNamespace()
		b := newBudget(ns, "small", withBudgetLimits(v1alpha1.BudgetLimit{Window: v1alpha1.BudgetWindowDay, Requests: ptr[int64](3)}))
		Expect(k8s.Create(suiteCtx, b)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			g.Expect(budgetCondition(b, v1alpha1.ConditionExhausted).Reason).To(Equal(v1alpha1.ReasonWithinLimits))
		}).Should(Succeed())

		hold(b, "exe_exhaust_1", budget.UnitRequests, 3)
		// Within the check interval, not the status interval.
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			c := budgetCondition(b, v1alpha1.ConditionExhausted)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonLimitReached))
			g.Expect(c.Message).To(ContainSubstring("the Day window has used its whole limit until"))
			g.Expect(b.Status.Used).To(Equal("3 requests"))
			g.Expect(b.Status.Percent).To(Equal(int32(100)))
			typ, note := budgetEvent(g, b, v1alpha1.ReasonBudgetExhausted)
			g.Expect(typ).To(Equal("Warning"))
			g.Expect(note).To(ContainSubstring("a limit of the Budget is reached"))
		}, 2*budgetCheckInterval+3*time.Second, 50*time.Millisecond).Should(Succeed())

		settled, err := budgetStore.Settle(suiteCtx, "exe_exhaust_1", map[string]int64{budget.UnitRequests: 1})
		Expect(err).NotTo(HaveOccurred())
		Expect(settled).To(BeTrue())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), b)).To(Succeed())
			g.Expect(budgetCondition(b, v1alpha1.ConditionExhausted).Reason).To(Equal(v1alpha1.ReasonWithinLimits))
			g.Expect(b.Status.Used).To(Equal("1 requests"))
			typ, _ := budgetEvent(g, b, v1alpha1.ReasonBudgetRestored)
			g.Expect(typ).To(Equal("Normal"))
		}, 2*budgetCheckInterval+3*time.Second, 50*time.Millisecond).Should(Succeed())
	})

	It("fails closed over a governed model without pricing or output cap", func() {
		ns := newNamespace()
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk-test"}))).To(Succeed())
		md := newMD(ns, "premium", withLabels("tier", "premium"))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func() bool { return inTable(md) }).Should(BeTrue())
		b := newBudget(ns, "money", withBudgetLimits(v1alpha1.BudgetLimit{Window: v1alpha1.BudgetWindowMonth, Cost: ptr[v1alpha1.Price]("10")}))
		Expect(k8s.Create(suiteCtx, b)).To(Succeed())

		ready := func(reason string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), b)).To(Succeed())
				c := budgetCondition(b, v1alpha1.ConditionReady)
				g.Expect(c.Reason).To(Equal(reason))
				if reason == v1alpha1.ReasonEnforced {
					g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
				} else {
					g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
					g.Expect(c.Message).To(ContainSubstring("out of routing for the Budget's subjects"))
				}
			}, 15*time.Second).Should(Succeed())
		}
		By("no pricing")
		ready(v1alpha1.ReasonNoPricing)

		By("pricing without an output cap")
		Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(md), md)).To(Succeed())
		md.Spec.Pricing = ptr(contractPricing())
		Expect(k8s.Update(suiteCtx, md)).To(Succeed())
		ready(v1alpha1.ReasonNoOutputCap)

		By("pricing and an output cap")
		Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(md), md)).To(Succeed())
		withMaxOutputTokens(4096)(md)
		Expect(k8s.Update(suiteCtx, md)).To(Succeed())
		Eventually(func() int64 {
			d, _ := holder.Load().Get(routing.Ref{Namespace: ns, Name: "premium"})
			if d == nil {
				return -1
			}
			return d.MaxOutputTokens
		}).Should(Equal(int64(4096)))
		ready(v1alpha1.ReasonEnforced)

		By("a second governed model in another currency")
		eur := contractPricing()
		eur.Currency = "EUR"
		other := newMD(ns, "other", withPricing(eur), withMaxOutputTokens(100))
		Expect(k8s.Create(suiteCtx, other)).To(Succeed())
		ready(v1alpha1.ReasonCurrencyMismatch)
	})
})
