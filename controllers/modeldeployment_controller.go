package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// +kubebuilder:rbac:groups=ai.switchboard.dev,resources=modeldeployments,verbs=get;list;watch
// +kubebuilder:rbac:groups=ai.switchboard.dev,resources=modeldeployments/status,verbs=get;update;patch
// Secrets: get for the direct read of the one Secret a ModelDeployment references; list
// and watch for the metadata-only informer that notices rotations. RBAC cannot grant
// metadata alone, so list also permits reading content the manager never asks for
// (spec/modeldeployments.md, "What the manager reads").
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ModelDeploymentReconciler keeps one ModelDeployment's routing-table entry current and,
// on the elected leader only, writes its status. It runs on every replica, so every
// replica serves from a complete table.
type ModelDeploymentReconciler struct {
	Client client.Client
	// SecretMetadata reads a Secret's cached metadata (mgr.GetCache()): whether it exists
	// and has opted in is known before its content is asked for.
	SecretMetadata client.Reader
	// Secrets reads a referenced Secret from the API server (mgr.GetAPIReader()): the
	// manager's cache holds Secret metadata only.
	Secrets  client.Reader
	Registry *routing.Registry
	Recorder recorder.EventRecorder
	// Elected is closed once this replica leads (at once without leader election). Only
	// the leader writes status and Events.
	Elected <-chan struct{}
	// Metrics records switchboard_modeldeployment_ready on every replica; nil records
	// nothing.
	Metrics *Recorder

	// policies keeps each namespace's CapabilityPolicies compiled between reconciles.
	policies policyCache
}

// Reconcile follows the fixed skeleton: get (NotFound removes the entry) → resolve →
// update the table → one status patch when something changed.
func (r *ModelDeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	ref := routing.Ref{Namespace: req.Namespace, Name: req.Name}

	md := &v1alpha1.ModelDeployment{}
	if err := r.Client.Get(ctx, req.NamespacedName, md); err != nil {
		if apierrors.IsNotFound(err) {
			r.Registry.Set(ref, nil)
			r.Metrics.Forget(ref)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get modeldeployment %s: %w", req.NamespacedName, err)
	}
	if !md.DeletionTimestamp.IsZero() {
		r.Registry.Set(ref, nil)
		r.Metrics.Forget(ref)
		return ctrl.Result{}, nil
	}

	res, err := r.resolve(ctx, md)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.Registry.Set(ref, res.deployment)
	// Once the table is published, Live(ref) equals routable.ok right after Set. Before
	// that Live is false, and only the leader is re-enqueued after the first publish
	// (leaderCatchUp): recording Live would leave followers at 0 until the object next
	// changes. Until the first publish the gauge is therefore what this replica will
	// serve; the replica itself reports not ready until then.
	r.Metrics.RecordReady(ref, res.routable.ok)

	// Followers only build their table. Until the first table is published Ready cannot
	// be true; leaderCatchUp re-enqueues everything once it is.
	if !r.leading() || !r.Registry.Started() {
		return ctrl.Result{}, nil
	}
	before := md.DeepCopy()
	setStatus(md, res, r.Registry.Live(ref))
	if equality.Semantic.DeepEqual(before.Status, md.Status) {
		return ctrl.Result{}, nil
	}
	if err := r.Client.Status().Patch(ctx, md, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("patch modeldeployment status %s: %w", req.NamespacedName, err)
	}
	r.recordTransitions(before, md)
	log.V(1).Info("Updated status", "modelDeployment", klog.KObj(md), "routable", res.routable.ok)
	return ctrl.Result{}, nil
}

// resolve reads md's Secret (see secret) and the policies of its namespace from the cache.
func (r *ModelDeploymentReconciler) resolve(ctx context.Context, md *v1alpha1.ModelDeployment) (resolution, error) {
	var secret *corev1.Secret
	if c := md.Spec.Credentials; c != nil {
		var err error
		if secret, err = r.secret(ctx, types.NamespacedName{Namespace: md.Namespace, Name: c.SecretRef.Name}); err != nil {
			return resolution{}, err
		}
	}
	policies := &v1alpha1.CapabilityPolicyList{}
	if err := r.Client.List(ctx, policies, client.InNamespace(md.Namespace)); err != nil {
		return resolution{}, fmt.Errorf("list capabilitypolicies in %s: %w", md.Namespace, err)
	}
	return resolveWith(md, secret, r.policies.compiled(md.Namespace, policies.Items)), nil
}

// secret returns the Secret named key, nil when it does not exist. A Secret whose cached
// metadata shows no opt-in is returned as that metadata alone: its content is never
// asked for (resolveCredential refuses it on its labels). An opted-in one is read from
// the API server, whose answer decides, labels included: the cache may lag behind.
func (r *ModelDeploymentReconciler) secret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	switch err := r.SecretMetadata.Get(ctx, key, m); {
	case apierrors.IsNotFound(err):
		// The watch re-reconciles when the Secret appears.
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get secret metadata %s: %w", key, err)
	case !optedIn(m):
		return &corev1.Secret{ObjectMeta: m.ObjectMeta}, nil
	}
	s := &corev1.Secret{}
	switch err := r.Secrets.Get(ctx, key, s); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get secret %s: %w", key, err)
	}
	return s, nil
}

func (r *ModelDeploymentReconciler) leading() bool {
	select {
	case <-r.Elected:
		return true
	default:
		return false
	}
}

// recordTransitions emits one Event per condition whose status or reason changed, and one
// when the credential rotated. Messages come from conditions, which never hold secrets.
func (r *ModelDeploymentReconciler) recordTransitions(before, after *v1alpha1.ModelDeployment) {
	for _, c := range after.Status.Conditions {
		old := meta.FindStatusCondition(before.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		kind := corev1.EventTypeNormal
		if c.Status != "True" {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(after, nil, kind, c.Reason, c.Type, "%s=%s: %s", c.Type, c.Status, c.Message)
	}
	if old, cur := before.Status.CredentialsVersion, after.Status.CredentialsVersion; old != "" && cur != "" && old != cur {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, v1alpha1.ReasonCredentialsRotated, "Rotate",
			"Credentials changed (version %s); new attempts use them", cur)
	}
}
