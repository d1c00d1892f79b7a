package engine_test

import (
	"regexp"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
)

func TestNewExecutionID(t *testing.T) {
	format := regexp.MustCompile(`^exe_[0-9a-hjkmnp-tv-z]{36}$`)
	seen := make(map[string]bool)
	for range 10000 {
		id := engine.NewExecutionID()
		if !format.MatchString(id) {
			t.Fatalf("id %q does not match %s", id, format)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
}
