package controllers

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// fetch reads md's current state into a fresh object.
func fetch(g Gomega, md *v1alpha1.ModelDeployment) *v1alpha1.ModelDeployment {
	got := &v1alpha1.ModelDeployment{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(md), got)).To(Succeed())
	return got
}

// patchMD changes md's spec with a merge patch, which (unlike Update) does not conflict
// with the controller's concurrent status writes.
func patchMD(md *v1alpha1.ModelDeployment, mutate func(*v1alpha1.ModelDeployment)) {
	GinkgoHelper()
	got := fetch(Default, md)
	before := got.DeepCopy()
	mutate(got)
	Expect(k8s.Patch(suiteCtx, got, client.MergeFrom(before))).To(Succeed())
}

func condition(md *v1alpha1.ModelDeployment, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(md.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func refOf(md *v1alpha1.ModelDeployment) routing.Ref {
	return routing.Ref{Namespace: md.Namespace, Name: md.Name}
}

func inTable(md *v1alpha1.ModelDeployment) bool {
	_, ok := holder.Load().Get(refOf(md))
	return ok
}

// eligible lists the deployments of namespace ns that the live table returns for a
// "chat" request with the given required set. The table is shared by every spec, so
// the query asks for every eligible deployment and keeps those of ns.
func eligible(ns string, required routing.CapSet) []routing.Ref {
	route, err := holder.Load().Route(routing.Query{Ability: "chat", Required: required,
		Deadline: time.Minute, MaxAttempts: holder.Load().Len()})
	if err != nil {
		return nil
	}
	var refs []routing.Ref
	for _, d := range route.Candidates {
		if d.Ref.Namespace == ns {
			refs = append(refs, d.Ref)
		}
	}
	return refs
}

var _ = Describe("ModelDeployment controller", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("makes a valid ModelDeployment with its Secret Ready and routable", func() {
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk-test-1"}))).To(Succeed())
		md := newMD(ns, "gpt", withLabels("tier", "standard"))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())

		Eventually(func(g Gomega) {
			got := fetch(g, md)
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(condition(got, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonRouted))
			g.Expect(condition(got, v1alpha1.ConditionCredentialsResolved).Reason).To(Equal(v1alpha1.ReasonResolved))
			routable := condition(got, v1alpha1.ConditionRoutable)
			g.Expect(routable.Reason).To(Equal(v1alpha1.ReasonDeclared))
			g.Expect(routable.Message).To(ContainSubstring("not verified"))
			g.Expect(got.Status.EffectiveCapabilities).To(Equal(&v1alpha1.EffectiveCapabilities{
				Input:  []v1alpha1.InputModality{"text", "json"},
				Output: []v1alpha1.OutputModality{"text"},
			}))
			g.Expect(got.Status.Inputs).To(Equal("text,json"))
			g.Expect(got.Status.CredentialsVersion).To(HaveLen(8))
		}).Should(Succeed())

		d, ok := holder.Load().Get(refOf(md))
		Expect(ok).To(BeTrue())
		Expect(d.Provider).To(Equal("openai"))
		Expect(d.Model).To(Equal("gpt-4o-mini"))
		Expect(d.Credential.Reveal()).To(Equal("sk-test-1"))
		Expect(eligible(ns, routing.CapsOf(protocol.CapInputText))).To(ContainElement(refOf(md)))
	})

	It("reports an unresolved Secret and becomes Ready once the Secret appears, without touching the ModelDeployment", func() {
		md := newMD(ns, "gpt")
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func(g Gomega) {
			got := fetch(g, md)
			c := condition(got, v1alpha1.ConditionCredentialsResolved)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSecretNotFound))
			g.Expect(condition(got, v1alpha1.ConditionRoutable).Reason).To(Equal(v1alpha1.ReasonCredentialsUnresolved))
			g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		Consistently(func() bool { return inTable(md) }, "300ms").Should(BeFalse())
		generation := fetch(Default, md).Generation

		secret := newSecret(ns, map[string]string{"other": "x"})
		Expect(k8s.Create(suiteCtx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionCredentialsResolved).Reason).To(Equal(v1alpha1.ReasonKeyNotFound))
		}).Should(Succeed())
		Expect(inTable(md)).To(BeFalse())

		secret.Data = map[string][]byte{"api-key": []byte("  ")}
		Expect(k8s.Update(suiteCtx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionCredentialsResolved).Reason).To(Equal(v1alpha1.ReasonKeyEmpty))
		}).Should(Succeed())
		Expect(inTable(md)).To(BeFalse())

		secret.Data = map[string][]byte{"api-key": []byte("sk-test-2")}
		Expect(k8s.Update(suiteCtx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			got := fetch(g, md)
			g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(got.Generation).To(Equal(generation))
		}).Should(Succeed())
		Expect(inTable(md)).To(BeTrue())
	})

	It("uses a Secret only once it opts in, tells nothing of an unlabelled one's keys, and follows the label within 5 s", func() {
		const canary = "CANARY-db-password-3e1f"
		secret := notOptedIn(newSecret(ns, map[string]string{"api-key": canary}))
		Expect(k8s.Create(suiteCtx, secret)).To(Succeed())
		withKey, withoutKey := newMD(ns, "with-key"), newMD(ns, "without-key", withSecret("openai", "missing"))
		Expect(k8s.Create(suiteCtx, withKey)).To(Succeed())
		Expect(k8s.Create(suiteCtx, withoutKey)).To(Succeed())

		// notEligible waits until md says SecretNotEligible and returns its condition and the
		// note of its Event.
		notEligible := func(md *v1alpha1.ModelDeployment, within time.Duration) (metav1.Condition, string) {
			GinkgoHelper()
			var c metav1.Condition
			var note string
			Eventually(func(g Gomega) {
				got := fetch(g, md)
				c = condition(got, v1alpha1.ConditionCredentialsResolved)
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSecretNotEligible))
				g.Expect(condition(got, v1alpha1.ConditionRoutable).Reason).To(Equal(v1alpha1.ReasonCredentialsUnresolved))
				g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
				g.Expect(got.Status.CredentialsVersion).To(BeEmpty())
				g.Expect(inTable(md)).To(BeFalse())
				list := &eventsv1.EventList{}
				g.Expect(k8s.List(suiteCtx, list, client.InNamespace(ns))).To(Succeed())
				note = ""
				for _, e := range list.Items {
					if e.Regarding.Name == md.Name && e.Reason == v1alpha1.ReasonSecretNotEligible {
						g.Expect(e.Type).To(Equal("Warning"))
						note = e.Note
					}
				}
				g.Expect(note).NotTo(BeEmpty(), "no %s Event for %s", v1alpha1.ReasonSecretNotEligible, md.Name)
			}, within, 50*time.Millisecond).Should(Succeed())
			return c, note
		}

		By("an unlabelled Secret: the same condition and Event with the key and without it")
		c1, e1 := notEligible(withKey, 10*time.Second)
		c2, e2 := notEligible(withoutKey, 10*time.Second)
		Expect(c2.Message).To(Equal(c1.Message))
		Expect(e2).To(Equal(e1))
		Expect(c1.Message).To(ContainSubstring(`not labelled ai.switchboard.dev/credential: "true"`))
		for _, text := range []string{c1.Message, e1} {
			Expect(text).NotTo(ContainSubstring("api-key"))
			Expect(text).NotTo(ContainSubstring("missing"))
			Expect(text).NotTo(ContainSubstring(canary))
		}
		Consistently(func() bool { return inTable(withKey) }, "300ms").Should(BeFalse())

		By("labelled: used within 5 s, and only now does the other model learn its key is missing")
		optIn := func(on bool) {
			GinkgoHelper()
			got := &corev1.Secret{}
			Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(secret), got)).To(Succeed())
			before := got.DeepCopy()
			if on {
				got.Labels = map[string]string{v1alpha1.CredentialLabel: v1alpha1.CredentialLabelValue}
			} else {
				delete(got.Labels, v1alpha1.CredentialLabel)
			}
			Expect(k8s.Patch(suiteCtx, got, client.MergeFrom(before))).To(Succeed())
		}
		optIn(true)
		Eventually(func(g Gomega) {
			d, ok := holder.Load().Get(refOf(withKey))
			g.Expect(ok).To(BeTrue())
			g.Expect(d.Credential.Reveal()).To(Equal(canary))
			g.Expect(condition(fetch(g, withKey), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(condition(fetch(g, withoutKey), v1alpha1.ConditionCredentialsResolved).Reason).To(Equal(v1alpha1.ReasonKeyNotFound))
		}, 5*time.Second, 50*time.Millisecond).Should(Succeed())

		By("the label removed: out of the table within 5 s")
		optIn(false)
		notEligible(withKey, 5*time.Second)
		notEligible(withoutKey, 5*time.Second)
	})

	It("picks up a rotated Secret within 5 s", func() {
		secret := newSecret(ns, map[string]string{"api-key": "sk-old"})
		Expect(k8s.Create(suiteCtx, secret)).To(Succeed())
		md := newMD(ns, "gpt")
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		var version string
		Eventually(func(g Gomega) {
			got := fetch(g, md)
			g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			version = got.Status.CredentialsVersion
		}).Should(Succeed())

		secret.Data["api-key"] = []byte("sk-new")
		Expect(k8s.Update(suiteCtx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			d, ok := holder.Load().Get(refOf(md))
			g.Expect(ok).To(BeTrue())
			g.Expect(d.Credential.Reveal()).To(Equal("sk-new"))
			g.Expect(fetch(g, md).Status.CredentialsVersion).NotTo(Equal(version))
		}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	})

	It("applies a tools-disabling CapabilityPolicy to the models it selects only, until it is deleted", func() {
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk"}))).To(Succeed())
		tools := v1alpha1.Capabilities{Tools: true}
		governed := newMD(ns, "standard", withLabels("tier", "standard"), withCapabilities(tools))
		free := newMD(ns, "premium", withLabels("tier", "premium"), withCapabilities(tools))
		Expect(k8s.Create(suiteCtx, governed)).To(Succeed())
		Expect(k8s.Create(suiteCtx, free)).To(Succeed())
		toolRequest := routing.Required(nil, []protocol.Part{{Type: protocol.PartText}, {Type: protocol.PartTool}})
		Eventually(func() []routing.Ref { return eligible(ns, toolRequest) }).
			Should(ConsistOf(refOf(governed), refOf(free)))

		policy := newPolicy(ns, "strict-tools", withToolsDisabled(), selecting("tier", "standard"))
		Expect(k8s.Create(suiteCtx, policy)).To(Succeed())
		Eventually(func(g Gomega) {
			got := fetch(g, governed)
			g.Expect(got.Status.EffectiveCapabilities.Tools).To(BeFalse())
			g.Expect(got.Status.Policies).To(Equal([]string{"strict-tools"}))
			g.Expect(fetch(g, free).Status.EffectiveCapabilities.Tools).To(BeTrue())
			g.Expect(eligible(ns, toolRequest)).To(ConsistOf(refOf(free)))
		}).Should(Succeed())
		// Without tool parts the governed model still serves.
		Expect(eligible(ns, routing.CapsOf(protocol.CapInputText))).To(ContainElement(refOf(governed)))
		Eventually(func(g Gomega) {
			got := &v1alpha1.CapabilityPolicy{}
			g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
			g.Expect(got.Status.MatchedDeployments).To(BeEquivalentTo(1))
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}).Should(Succeed())

		Expect(k8s.Delete(suiteCtx, policy)).To(Succeed())
		Eventually(func(g Gomega) {
			got := fetch(g, governed)
			g.Expect(got.Status.EffectiveCapabilities.Tools).To(BeTrue())
			g.Expect(got.Status.Policies).To(BeEmpty())
			g.Expect(eligible(ns, toolRequest)).To(ConsistOf(refOf(governed), refOf(free)))
		}).Should(Succeed())
	})

	It("denies a model whose declared inputs a policy disallows entirely", func() {
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk"}))).To(Succeed())
		md := newMD(ns, "vision", withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"image"}}))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func() bool { return inTable(md) }).Should(BeTrue())
		Expect(k8s.Create(suiteCtx, newPolicy(ns, "text-only", withAllowedInputs("text")))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionRoutable).Reason).To(Equal(v1alpha1.ReasonPolicyDenied))
		}).Should(Succeed())
		Expect(inTable(md)).To(BeFalse())
	})

	It("removes a suspended model from the table, and a deleted one", func() {
		Expect(k8s.Create(suiteCtx, newSecret(ns, map[string]string{"api-key": "sk"}))).To(Succeed())
		md := newMD(ns, "gpt")
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Eventually(func() bool { return inTable(md) }).Should(BeTrue())

		patchMD(md, func(m *v1alpha1.ModelDeployment) { m.Spec.Suspend = true })
		Eventually(func(g Gomega) {
			cur := fetch(g, md)
			c := condition(cur, v1alpha1.ConditionRoutable)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonSuspended))
			g.Expect(condition(cur, v1alpha1.ConditionReady).Reason).To(Equal(v1alpha1.ReasonSuspended))
			g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
		}).Should(Succeed())
		Expect(inTable(md)).To(BeFalse())

		patchMD(md, func(m *v1alpha1.ModelDeployment) { m.Spec.Suspend = false })
		Eventually(func() bool { return inTable(md) }).Should(BeTrue())

		Expect(k8s.Delete(suiteCtx, md)).To(Succeed())
		Eventually(func() bool { return inTable(md) }).Should(BeFalse())
	})

	It("exports switchboard_modeldeployment_ready: 1 when routable, 0 when not, no series once deleted", func() {
		secret := newSecret(ns, map[string]string{"api-key": "sk"})
		Expect(k8s.Create(suiteCtx, secret)).To(Succeed())
		md := newMD(ns, "gpt")
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		gauge := func(g Gomega) float64 {
			v, found, err := readySeries(refOf(md))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue(), "no series for %s", refOf(md))
			return v
		}
		Eventually(func(g Gomega) {
			g.Expect(inTable(md)).To(BeTrue())
			g.Expect(gauge(g)).To(Equal(1.0))
		}).Should(Succeed())

		Expect(k8s.Delete(suiteCtx, secret)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionCredentialsResolved).Reason).To(Equal(v1alpha1.ReasonSecretNotFound))
			g.Expect(gauge(g)).To(Equal(0.0))
		}).Should(Succeed())
		Expect(inTable(md)).To(BeFalse())

		Expect(k8s.Delete(suiteCtx, md)).To(Succeed())
		Eventually(func(g Gomega) {
			_, found, err := readySeries(refOf(md))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeFalse())
		}).Should(Succeed())
	})

	It("never writes a credential into status, conditions, Events or logs", func() {
		const canary = "CANARY-sk-5f0c1e9d"
		secret := newSecret(ns, map[string]string{"api-key": canary})
		Expect(k8s.Create(suiteCtx, secret)).To(Succeed())
		md := newMD(ns, "gpt")
		wrongKey := newMD(ns, "wrong-key", withSecret("openai", "missing"))
		Expect(k8s.Create(suiteCtx, md)).To(Succeed())
		Expect(k8s.Create(suiteCtx, wrongKey)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(condition(fetch(g, md), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(condition(fetch(g, wrongKey), v1alpha1.ConditionCredentialsResolved).Reason).To(Equal(v1alpha1.ReasonKeyNotFound))
		}).Should(Succeed())
		// Rotate once so the rotation Event and its log lines exist too.
		secret.Data["api-key"] = []byte(canary + "-2")
		Expect(k8s.Update(suiteCtx, secret)).To(Succeed())

		var events []string
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8s.List(suiteCtx, list, client.InNamespace(ns))).To(Succeed())
			events = events[:0]
			for _, e := range list.Items {
				events = append(events, fmt.Sprintf("%s %s %s", e.Reason, e.Action, e.Note))
			}
			g.Expect(events).To(ContainElement(ContainSubstring(v1alpha1.ReasonCredentialsRotated)))
			g.Expect(events).To(ContainElement(ContainSubstring(v1alpha1.ReasonKeyNotFound)))
		}).Should(Succeed())

		for _, m := range []*v1alpha1.ModelDeployment{md, wrongKey} {
			got := fetch(Default, m)
			Expect(fmt.Sprintf("%+v", got.Status)).NotTo(ContainSubstring(canary))
			Expect(fmt.Sprintf("%+v", got.ObjectMeta.Annotations)).NotTo(ContainSubstring(canary))
		}
		for _, e := range events {
			Expect(e).NotTo(ContainSubstring(canary))
		}
		d, ok := holder.Load().Get(refOf(md))
		Expect(ok).To(BeTrue())
		Expect(fmt.Sprintf("%v %+v %#v", d, *d, *d)).NotTo(ContainSubstring(canary))
		Expect(logs.String()).NotTo(BeEmpty())
		Expect(logs.String()).NotTo(ContainSubstring(canary))
	})
})
