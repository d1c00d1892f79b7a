package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// setPolicyStatus writes a CapabilityPolicy's status: how many ModelDeployments it selects
// and whether it is enforced. A selector that cannot be parsed selects nothing.
func setPolicyStatus(p *v1alpha1.CapabilityPolicy, matched int, selectorErr error) {
	p.Status.ObservedGeneration = p.Generation
	p.Status.MatchedDeployments = int32(matched)
	c := metav1.Condition{
		Type:               v1alpha1.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             v1alpha1.ReasonEnforced,
		Message:            "Applied to the selected ModelDeployments",
		ObservedGeneration: p.Generation,
	}
	if selectorErr != nil {
		c.Status = metav1.ConditionFalse
		c.Reason = v1alpha1.ReasonInvalidSelector
		c.Message = "spec.selector is invalid: " + selectorErr.Error()
	} else if err := p.Spec.Validate(); err != nil {
		c.Status = metav1.ConditionFalse
		c.Reason = v1alpha1.ReasonInvalidSpec
		c.Message = err.Error()
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
}
