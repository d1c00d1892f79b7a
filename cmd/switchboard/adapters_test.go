package main

import (
	"testing"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
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

// Every provider's adapter declares how its provider counts tokens, as the provider
// documents its usage object (each adapter's README, "Usage"): the input count includes
// the cached tokens on OpenAI's and Google's APIs, not on Anthropic's or Bedrock's; the
// output count includes the reasoning tokens wherever reasoning is counted as output.
// Replicate reports no token counts.
func TestEveryAdapterDeclaresItsCounting(t *testing.T) {
	m := providers(false)
	for name, want := range map[string]pricing.Counting{
		"openai":            {InputIncludesCache: true, OutputIncludesReasoning: true},
		"azure-openai":      {InputIncludesCache: true, OutputIncludesReasoning: true},
		"openai-compatible": {InputIncludesCache: true, OutputIncludesReasoning: true},
		"gemini":            {InputIncludesCache: true, OutputIncludesReasoning: true},
		"vertex":            {InputIncludesCache: true, OutputIncludesReasoning: true},
		"anthropic":         {InputIncludesCache: false, OutputIncludesReasoning: true},
		"bedrock":           {InputIncludesCache: false, OutputIncludesReasoning: true},
		"replicate":         {},
	} {
		p, ok := m[name]
		if !ok {
			t.Errorf("provider %s has no adapter", name)
			continue
		}
		if p.Counting != want {
			t.Errorf("provider %s counts %+v, want %+v", name, p.Counting, want)
		}
	}
}
