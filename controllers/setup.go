// Package controllers reconciles ModelDeployments and CapabilityPolicies into the live
// routing table and writes their status.
package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Leader election holds a Lease in the manager's own namespace and records its Events
// about that Lease there, through the core API: a Role in that namespace
// (config/rbac/role.yaml, bound by leader_election_role_binding.yaml), not the ClusterRole.
// client-go's Lease lock only gets, creates and updates.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=switchboard-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=switchboard-system

// The execution API identifies callers by TokenReview and authorizes them by
// SubjectAccessReview (spec/authentication.md); the secure /metrics endpoint checks its
// scrapers the same way.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// secretNameField indexes ModelDeployments by the name of the Secret they reference, so a
// Secret change re-reconciles exactly the deployments that use it.
const secretNameField = ".spec.credentials.secretRef.name"

// Setup registers both reconcilers, the Secret index and the start-up runnables with mgr,
// created with options to which Options.ApplyTo was applied. Every replica builds the
// routing table in registry; only the elected leader writes status and Events. holder
// reports synced once the first complete table is published.
func Setup(mgr ctrl.Manager, registry *routing.Registry) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ModelDeployment{}, secretNameField,
		func(o client.Object) []string {
			md := o.(*v1alpha1.ModelDeployment)
			if md.Spec.Credentials == nil {
				return nil
			}
			return []string{md.Spec.Credentials.SecretRef.Name}
		}); err != nil {
		return fmt.Errorf("index modeldeployments by secret: %w", err)
	}

	// A replica that becomes leader re-reconciles everything so status catches up with
	// what it built while following.
	elected := make(chan event.GenericEvent)
	mdr := &ModelDeploymentReconciler{
		Client:         mgr.GetClient(),
		SecretMetadata: mgr.GetCache(),
		Secrets:        mgr.GetAPIReader(),
		Registry:       registry,
		Recorder:       mgr.GetEventRecorder("switchboard"),
		Elected:        mgr.Elected(),
		Metrics:        readiness,
	}
	c := mgr.GetClient()
	notLeaderOnly := false
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ModelDeployment{}).
		Named("modeldeployment").
		// Secret metadata only: a new resourceVersion is all a rotation needs to be seen;
		// the reconciler reads the one Secret it references from the API server.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return deploymentsWhere(ctx, c, o.GetNamespace(), client.MatchingFields{secretNameField: o.GetName()})
		}), builder.OnlyMetadata).
		Watches(&v1alpha1.CapabilityPolicy{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return deploymentsWhere(ctx, c, o.GetNamespace())
		})).
		WatchesRawSource(source.Channel(elected, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{NeedLeaderElection: &notLeaderOnly, MaxConcurrentReconciles: 4}).
		Complete(mdr); err != nil {
		return fmt.Errorf("set up modeldeployment controller: %w", err)
	}

	if err := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.CapabilityPolicy{}).
		Named("capabilitypolicy").
		Watches(&v1alpha1.ModelDeployment{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return policiesIn(ctx, c, o.GetNamespace())
		})).
		Complete(&CapabilityPolicyReconciler{Client: c}); err != nil {
		return fmt.Errorf("set up capabilitypolicy controller: %w", err)
	}

	if err := mgr.Add(&initialSync{client: c, cache: mgr.GetCache(), registry: registry}); err != nil {
		return err
	}
	return mgr.Add(&leaderCatchUp{client: c, registry: registry, events: elected})
}

func deploymentsWhere(ctx context.Context, c client.Client, ns string, opts ...client.ListOption) []reconcile.Request {
	list := &v1alpha1.ModelDeploymentList{}
	if err := c.List(ctx, list, append(opts, client.InNamespace(ns))...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List ModelDeployments failed", "namespace", ns)
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}

func policiesIn(ctx context.Context, c client.Client, ns string) []reconcile.Request {
	list := &v1alpha1.CapabilityPolicyList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "List CapabilityPolicies failed", "namespace", ns)
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}

// initialSync publishes the first table once every ModelDeployment present at start-up
// has been reconciled, instead of rebuilding the table once per object. It runs on every
// replica.
type initialSync struct {
	client   client.Client
	cache    interface{ WaitForCacheSync(context.Context) bool }
	registry *routing.Registry
}

func (s *initialSync) NeedLeaderElection() bool { return false }

func (s *initialSync) Start(ctx context.Context) error {
	if !s.cache.WaitForCacheSync(ctx) {
		return nil // ctx ended
	}
	list := &v1alpha1.ModelDeploymentList{}
	if err := s.client.List(ctx, list); err != nil {
		return fmt.Errorf("list modeldeployments: %w", err)
	}
	refs := make([]routing.Ref, len(list.Items))
	for i := range list.Items {
		refs[i] = routing.Ref{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !s.registry.Visited(refs) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	s.registry.Start()
	ctrl.LoggerFrom(ctx).Info("Routing table synced", "modelDeployments", len(refs))
	return nil
}

// leaderCatchUp runs when this replica is elected: once the table is published it
// re-enqueues every ModelDeployment, so the new leader writes status (including Ready)
// for objects reconciled while it was following.
type leaderCatchUp struct {
	client   client.Client
	registry *routing.Registry
	events   chan<- event.GenericEvent
}

func (l *leaderCatchUp) NeedLeaderElection() bool { return true }

func (l *leaderCatchUp) Start(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !l.registry.Started() {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	list := &v1alpha1.ModelDeploymentList{}
	if err := l.client.List(ctx, list); err != nil {
		return fmt.Errorf("list modeldeployments: %w", err)
	}
	for i := range list.Items {
		select {
		case l.events <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

var _ manager.LeaderElectionRunnable = (*initialSync)(nil)
