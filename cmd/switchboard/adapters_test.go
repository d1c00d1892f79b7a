package main

import (
	"testing"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// Every provider the CRD admits has an adapter, with an encode check, and no adapter
// serves a provider the CRD does not admit.
func TestEveryProviderHasAnAdapter(t *testing.T) {
	m := providers(false)
	for _, p := range v1alpha1.Providers {
		a, ok := m[string(p)]
		if !ok || a.New == nil || a.CanEncode == nil {
			t.Errorf("provider %s has no adapter with an encode check", p)
		}
	}
	if len(m) != len(v1alpha1.Providers) {
		t.Errorf("%d adapters registered for %d providers", len(m), len(v1alpha1.Providers))
	}
}
