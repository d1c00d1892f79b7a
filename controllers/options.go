package controllers

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// Options are the manager settings the controllers rely on. Apply them to the manager's
// options before ctrl.NewManager, then call Setup with the manager.
type Options struct {
	// WatchNamespaces limits the manager's cache, and so every watch and every reconcile,
	// to these namespaces; empty watches all of them. ModelDeployments, CapabilityPolicies
	// and Secrets elsewhere are ignored.
	WatchNamespaces []string
}

// ApplyTo sets in mo what keeps the manager from holding more than it needs
// (spec/modeldeployments.md, "What the manager reads"):
//   - the cache holds only the watched namespaces;
//   - Secrets are watched as metadata only (Setup), the cached metadata keeps only their
//     identity, revision and opt-in label, and the manager's client reads a Secret from
//     the API server, never from a cache;
//   - a cached read of a type no controller watches fails instead of starting a new
//     cluster-wide informer for it.
//
// Settings already in mo (selectors, other ByObject entries) are kept.
func (o Options) ApplyTo(mo *ctrl.Options) {
	if len(o.WatchNamespaces) > 0 {
		mo.Cache.DefaultNamespaces = make(map[string]cache.Config, len(o.WatchNamespaces))
		for _, ns := range o.WatchNamespaces {
			mo.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mo.Cache.ReaderFailOnMissingInformer = true
	if mo.Cache.ByObject == nil {
		mo.Cache.ByObject = map[client.Object]cache.ByObject{}
	}
	mo.Cache.ByObject[&corev1.Secret{}] = cache.ByObject{Transform: secretIdentity}
	if mo.Client.Cache == nil {
		mo.Client.Cache = &client.CacheOptions{}
	}
	mo.Client.Cache.DisableFor = append(mo.Client.Cache.DisableFor, &corev1.Secret{})
}

// secretIdentity drops the free-form parts of a Secret's metadata before it enters the
// cache: the controllers map a Secret event to ModelDeployments by namespace and name,
// and decide by the opt-in label alone whether the Secret may be read at all (resolve.go).
// Annotations matter most: kubectl apply copies the whole manifest, data included, into
// kubectl.kubernetes.io/last-applied-configuration.
func secretIdentity(in any) (any, error) {
	if m, err := meta.Accessor(in); err == nil {
		var keep map[string]string
		if v, ok := m.GetLabels()[v1alpha1.CredentialLabel]; ok {
			keep = map[string]string{v1alpha1.CredentialLabel: v}
		}
		m.SetAnnotations(nil)
		m.SetLabels(keep)
		m.SetManagedFields(nil)
	}
	return in, nil
}

// ParseWatchNamespaces parses a comma-separated list of namespace names (the
// --watch-namespaces flag). Blanks around names are ignored, duplicates removed; an empty
// string means all namespaces (nil).
func ParseWatchNamespaces(s string) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", name, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}
