package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

func TestPolicyCache(t *testing.T) {
	versioned := func(p *v1alpha1.CapabilityPolicy, uid, rv string) v1alpha1.CapabilityPolicy {
		p.UID, p.ResourceVersion = types.UID(uid), rv
		return *p
	}
	list := []v1alpha1.CapabilityPolicy{
		versioned(newPolicy("a", "strict", withToolsDisabled()), "u1", "1"),
		versioned(newPolicy("a", "text", withAllowedInputs("text")), "u2", "7"),
	}
	var c policyCache
	first := c.compiled("a", list)
	if len(first) != 2 || first[0].policy.Name != "strict" || first[1].policy.Name != "text" {
		t.Fatalf("compiled %+v", first)
	}
	if again := c.compiled("a", list); &again[0] != &first[0] {
		t.Error("the same policies at the same versions were compiled again")
	}

	changed := []v1alpha1.CapabilityPolicy{list[0], versioned(newPolicy("a", "text", withToolsDisabled()), "u2", "8")}
	got := c.compiled("a", changed)
	if &got[0] == &first[0] || got[1].policy.Spec.Tools != v1alpha1.ToolsDisabled {
		t.Error("a policy at a new resourceVersion was not compiled again")
	}
	if got := c.compiled("a", changed[:1]); len(got) != 1 || got[0].policy.Name != "strict" {
		t.Errorf("after a deletion: %+v", got)
	}
	if got := c.compiled("a", nil); len(got) != 0 {
		t.Errorf("without policies: %+v", got)
	}

	// Policies not from an API server (no uid or resourceVersion) are never cached.
	bare := []v1alpha1.CapabilityPolicy{*newPolicy("b", "strict", withToolsDisabled())}
	one, two := c.compiled("b", bare), c.compiled("b", bare)
	if &one[0] == &two[0] {
		t.Error("a policy without uid and resourceVersion was cached")
	}
}
