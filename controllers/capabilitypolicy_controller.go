package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// +kubebuilder:rbac:groups=ai.switchboard.dev,resources=capabilitypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=ai.switchboard.dev,resources=capabilitypolicies/status,verbs=get;update;patch

// CapabilityPolicyReconciler writes a CapabilityPolicy's status. Policies reach the
// routing table through the ModelDeployments they select (see
// ModelDeploymentReconciler), so this controller only needs the leader.
type CapabilityPolicyReconciler struct {
	Client client.Client
}

// Reconcile counts the governed ModelDeployments and patches status when it changed.
func (r *CapabilityPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &v1alpha1.CapabilityPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	mds := &v1alpha1.ModelDeploymentList{}
	if err := r.Client.List(ctx, mds, client.InNamespace(p.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list modeldeployments in %s: %w", p.Namespace, err)
	}
	// The same rule as resolve: an invalid policy governs every model of its namespace.
	sel, validity := policyValidity(p)
	matched := 0
	for i := range mds.Items {
		if governs(sel, validity, &mds.Items[i]) {
			matched++
		}
	}
	before := p.DeepCopy()
	setPolicyStatus(p, matched, validity)
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return ctrl.Result{}, nil
	}
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("patch capabilitypolicy status %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}
