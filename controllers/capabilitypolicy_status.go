package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// setPolicyStatus writes a CapabilityPolicy's status: how many ModelDeployments it
// governs and whether it is enforced. validity is policyValidity's verdict: an invalid
// policy is Ready=False (InvalidSelector or InvalidSpec) and governs every
// ModelDeployment of its namespace, which matched then counts.
func setPolicyStatus(p *v1alpha1.CapabilityPolicy, matched int, validity check) {
	p.Status.ObservedGeneration = p.Generation
	p.Status.MatchedDeployments = int32(matched)
	c := metav1.Condition{
		Type:               v1alpha1.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             validity.reason,
		Message:            validity.message,
		ObservedGeneration: p.Generation,
	}
	if !validity.ok {
		c.Status = metav1.ConditionFalse
		c.Message += "; every ModelDeployment of the namespace is kept out of routing until the policy is fixed or deleted"
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
}
