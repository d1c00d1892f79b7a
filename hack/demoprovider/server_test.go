package main

import (
	"net/http"
	"slices"
	"testing"
)

func TestSplitText(t *testing.T) {
	tests := []struct {
		text string
		n    int
		want []string
	}{
		{"", 5, []string{""}},
		{"abc", 5, []string{"a", "b", "c"}},
		{"abcdefg", 3, []string{"abc", "de", "fg"}},
		{"abcdef", 1, []string{"abcdef"}},
		{testText, 5, testPieces},
		{"héllo wörld ✓", 4, []string{"héll", "o w", "örl", "d ✓"}},
	}
	for _, tt := range tests {
		got := splitText(tt.text, tt.n)
		if !slices.Equal(got, tt.want) {
			t.Errorf("splitText(%q, %d) = %q, want %q", tt.text, tt.n, got, tt.want)
		}
	}
}

func TestScenarioFor(t *testing.T) {
	tests := []struct {
		model string
		want  scenario
	}{
		{"gpt-4o-mini", scenario{}},
		{"demo-error-503", scenario{status: http.StatusServiceUnavailable}},
		{"Demo-Error-429", scenario{status: http.StatusTooManyRequests}},
		{"demo-error-401", scenario{status: http.StatusUnauthorized}},
		{"demo-slow", scenario{slow: true}},
		{"demo-stall", scenario{stall: true}},
		{"demo-truncate", scenario{truncate: true}},
		{"acme/fail", scenario{fail: true}},
		{"demo-slow-truncate", scenario{slow: true, truncate: true}},
		{"demo-exception-throttling", scenario{throttleInStream: true}},
	}
	for _, tt := range tests {
		if got := scenarioFor(tt.model); got != tt.want {
			t.Errorf("scenarioFor(%q) = %+v, want %+v", tt.model, got, tt.want)
		}
	}
}

func TestHealthz(t *testing.T) {
	ts := startServer(t, config{APIKey: "k"})
	if resp := ts.do(t, "GET", "/healthz", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz status %d", resp.StatusCode)
	}
}
