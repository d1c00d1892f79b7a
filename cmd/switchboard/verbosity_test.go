package main

import (
	"strings"
	"testing"

	uberzap "go.uber.org/zap"
)

// Log levels above maxVerbosity are capped: client-go would log API response bodies,
// Secrets included.
func TestVerbosityCapped(t *testing.T) {
	for arg, want := range map[string]int8{"--zap-log-level=10": -maxVerbosity, "--zap-log-level=3": -3} {
		o, err := parseFlags([]string{arg}, &strings.Builder{})
		if err != nil {
			t.Fatal(err)
		}
		capVerbosity(&o.zap)
		if l, ok := o.zap.Level.(uberzap.AtomicLevel); !ok || int8(l.Level()) != want {
			t.Errorf("%s: level %v, want %d", arg, o.zap.Level, want)
		}
	}
}
