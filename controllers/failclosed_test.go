package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Policies fail closed. The API server refuses a selector it could not evaluate, so these
// tests build the objects directly: a policy written before the CRD rule existed, which
// the controller still reads from the cache.

func TestInvalidPolicyKeepsEveryModelOfItsNamespaceOutOfRouting(t *testing.T) {
	const (
		selectorKey   = "canary-key-3b1f"
		selectorValue = "canary-value-3b1f"
	)
	tests := map[string]struct {
		policy *v1alpha1.CapabilityPolicy
		reason string // the policy's Ready reason
	}{
		"lower-case operator": {
			policy: newPolicy("ai", "strict-tools", withToolsDisabled(), selectingWhere(selectorKey, "in", selectorValue)),
			reason: v1alpha1.ReasonInvalidSelector,
		},
		"In without values": {
			policy: newPolicy("ai", "strict-tools", withToolsDisabled(), selectingWhere(selectorKey, v1alpha1.LabelSelectorOpIn)),
			reason: v1alpha1.ReasonInvalidSelector,
		},
		"bad label key": {
			policy: newPolicy("ai", "strict-tools", withToolsDisabled(), selecting(selectorKey+"/x/y", selectorValue)),
			reason: v1alpha1.ReasonInvalidSelector,
		},
		"spec refused by the Go validator": {
			policy: newPolicy("ai", "strict-tools", selecting(selectorKey, selectorValue),
				func(p *v1alpha1.CapabilityPolicy) { p.Spec.Tools = "disabled" }),
			reason: v1alpha1.ReasonInvalidSpec,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			secret := newSecret("ai", map[string]string{"api-key": "sk"})
			otherSecret := newSecret("other", map[string]string{"api-key": "sk"})
			selected := newMD("ai", "selected", withLabels(selectorKey, selectorValue))
			unlabelled := newMD("ai", "unlabelled")
			elsewhere := newMD("other", "elsewhere", withLabels(selectorKey, selectorValue))
			policies := []v1alpha1.CapabilityPolicy{*tt.policy, *newPolicy("other", "valid", withToolsDisabled())}

			h := &routing.Holder{}
			reg := routing.NewRegistry(h)
			for _, md := range []*v1alpha1.ModelDeployment{selected, unlabelled} {
				res := resolve(md, secret, policies)
				reg.Set(refOf(md), res.deployment)
				if res.deployment != nil {
					t.Errorf("%s is routable with an invalid policy in its namespace", md.Name)
				}
				setStatus(md, res, false)
				for _, typ := range []string{v1alpha1.ConditionRoutable, v1alpha1.ConditionReady} {
					c := meta.FindStatusCondition(md.Status.Conditions, typ)
					if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPolicyInvalid {
						t.Errorf("%s %s = %s/%s, want False/PolicyInvalid", md.Name, typ, c.Status, c.Reason)
					}
					if !strings.Contains(c.Message, "strict-tools") {
						t.Errorf("%s %s message does not name the policy: %q", md.Name, typ, c.Message)
					}
					if strings.Contains(c.Message, "canary") || strings.Contains(c.Message, "disabled") {
						t.Errorf("%s %s message repeats a value of the policy: %q", md.Name, typ, c.Message)
					}
				}
				if got := md.Status.Policies; len(got) != 1 || got[0] != "strict-tools" {
					t.Errorf("%s status.policies = %v, want the invalid policy", md.Name, got)
				}
			}
			res := resolve(elsewhere, otherSecret, policies)
			reg.Set(refOf(elsewhere), res.deployment)
			if res.routable.reason != v1alpha1.ReasonDeclared {
				t.Errorf("a model of another namespace is %s, want Declared", res.routable.reason)
			}
			reg.Start()
			if h.Load().Len() != 1 {
				t.Errorf("table holds %d models, want only the one of the other namespace", h.Load().Len())
			}
			if _, ok := h.Load().Get(refOf(elsewhere)); !ok {
				t.Error("the model of the other namespace left the table")
			}

			// The policy's own status: Ready=False, governing every model of its namespace.
			p := tt.policy.DeepCopy()
			sel, valid := policyValidity(p)
			matched := 0
			for _, md := range []*v1alpha1.ModelDeployment{selected, unlabelled} {
				if governs(sel, valid, md) {
					matched++
				}
			}
			setPolicyStatus(p, matched, valid)
			c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
			if c.Status != metav1.ConditionFalse || c.Reason != tt.reason {
				t.Errorf("policy Ready = %s/%s, want False/%s", c.Status, c.Reason, tt.reason)
			}
			if p.Status.MatchedDeployments != 2 {
				t.Errorf("matchedDeployments = %d, want every model of the namespace (2)", p.Status.MatchedDeployments)
			}
		})
	}
}

// The standalone loader refuses an invalid policy file outright; a Manifests value that
// holds one anyway goes through the same rule chain as the reconciler.
func TestStandaloneApplySharesTheFailClosedRule(t *testing.T) {
	m := &Manifests{
		Deployments: []v1alpha1.ModelDeployment{*newMD("ai", "gpt"), *newMD("other", "gpt")},
		Policies:    []v1alpha1.CapabilityPolicy{*newPolicy("ai", "broken", selectingWhere("tier", "in", "standard"))},
		Secrets: []corev1.Secret{*newSecret("ai", map[string]string{"api-key": "sk"}),
			*newSecret("other", map[string]string{"api-key": "sk"})},
	}
	h := &routing.Holder{}
	reg := routing.NewRegistry(h)
	outcomes := m.Apply(reg, nil)
	reg.Start()
	if _, ok := h.Load().Get(routing.Ref{Namespace: "ai", Name: "gpt"}); ok {
		t.Error("ai/gpt is routed with an invalid policy in its namespace")
	}
	if _, ok := h.Load().Get(routing.Ref{Namespace: "other", Name: "gpt"}); !ok {
		t.Error("other/gpt is not routed")
	}
	if outcomes[0].Reason != v1alpha1.ReasonPolicyInvalid {
		t.Errorf("ai/gpt outcome = %+v, want PolicyInvalid", outcomes[0])
	}
}
