package controllers

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// The set<Condition> functions compute a ModelDeployment's status from its resolution.
// They are pure (no client, no clock beyond the condition's transition time), so they are
// tested without an API server.

// setStatus writes every status field of md from res. inTable says whether md is in the
// live routing table, which is what Ready reports.
func setStatus(md *v1alpha1.ModelDeployment, res resolution, inTable bool) {
	md.Status.ObservedGeneration = md.Generation
	setCredentialsResolved(md, res.credential)
	setRoutable(md, res.routable)
	setReady(md, res.routable, inTable)
	eff := res.effective
	md.Status.EffectiveCapabilities = &eff
	md.Status.Inputs = joinModalities(eff.Input)
	md.Status.Policies = res.policies
	md.Status.CredentialsVersion = res.credential.version
}

func setCredentialsResolved(md *v1alpha1.ModelDeployment, c credentialState) {
	setCondition(md, v1alpha1.ConditionCredentialsResolved, c.resolved, c.reason, c.message)
}

func setRoutable(md *v1alpha1.ModelDeployment, c check) {
	setCondition(md, v1alpha1.ConditionRoutable, c.ok, c.reason, c.message)
}

// setReady summarises: True exactly when the model is in the live routing table.
func setReady(md *v1alpha1.ModelDeployment, routable check, inTable bool) {
	switch {
	case routable.ok && inTable:
		setCondition(md, v1alpha1.ConditionReady, true, v1alpha1.ReasonRouted, "In the routing table")
	case routable.ok:
		// Routable but not yet published; the next reconcile sees it in the table.
		setCondition(md, v1alpha1.ConditionReady, false, v1alpha1.ReasonDeclared, "Waiting for the routing table")
	default:
		setCondition(md, v1alpha1.ConditionReady, false, routable.reason, routable.message)
	}
}

func setCondition(md *v1alpha1.ModelDeployment, typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&md.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: md.Generation,
	})
}

func joinModalities(ms []v1alpha1.InputModality) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = string(m)
	}
	return strings.Join(parts, ",")
}
