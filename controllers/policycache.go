package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// policyCache keeps the CapabilityPolicies of each namespace compiled (checked, selector
// parsed) for the versions it last saw. Every reconcile of a ModelDeployment resolves it
// against all policies of its namespace, and compiling them again each time was most of
// a start-up sync's work; policies change rarely. The zero value is ready to use; it is
// safe for concurrent reconciles.
type policyCache struct {
	mu   sync.Mutex
	byNS map[string]*compiledNamespace
}

// compiledNamespace is the compiled list of one namespace's policies and the identity
// (uid, resourceVersion) of each policy it was compiled from, in list order.
type compiledNamespace struct {
	ids      []policyID
	compiled []compiledPolicy
}

type policyID struct {
	uid     types.UID
	version string
}

// compiled returns the compiled policies of namespace ns, listed as policies. The result
// is shared and must not be modified. When the list is the one compiled last — the same
// policies at the same resourceVersions — it is returned as it was; otherwise the list is
// compiled and remembered. Policies without a uid or resourceVersion (not from an API
// server) are compiled every time.
func (c *policyCache) compiled(ns string, policies []v1alpha1.CapabilityPolicy) []compiledPolicy {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hit := c.byNS[ns]; hit != nil && sameVersions(hit.ids, policies) {
		return hit.compiled
	}
	entry := &compiledNamespace{
		ids:      make([]policyID, len(policies)),
		compiled: make([]compiledPolicy, len(policies)),
	}
	cacheable := true
	for i := range policies {
		p := &policies[i]
		entry.ids[i] = policyID{uid: p.UID, version: p.ResourceVersion}
		entry.compiled[i] = compile(p)
		cacheable = cacheable && p.UID != "" && p.ResourceVersion != ""
	}
	switch {
	case !cacheable:
		delete(c.byNS, ns)
	case len(policies) == 0:
		delete(c.byNS, ns) // nothing to compile: no entry needed
	default:
		if c.byNS == nil {
			c.byNS = map[string]*compiledNamespace{}
		}
		c.byNS[ns] = entry
	}
	return entry.compiled
}

// sameVersions reports whether policies are, in order, the policies ids were taken from.
func sameVersions(ids []policyID, policies []v1alpha1.CapabilityPolicy) bool {
	if len(ids) != len(policies) {
		return false
	}
	for i := range policies {
		if ids[i].uid != policies[i].UID || ids[i].version != policies[i].ResourceVersion {
			return false
		}
	}
	return true
}
