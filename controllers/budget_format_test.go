package controllers

import "testing"

// TestLimitDecimal: limits in Budget status read as operators write them, used figures
// keep their six decimals elsewhere.
func TestLimitDecimal(t *testing.T) {
	for m, want := range map[int64]string{
		500_000_000: "500.00", 83_100: "0.0831", 1: "0.000001", 1_500_000: "1.50", 0: "0.00", 123_456_789: "123.456789",
	} {
		if got := limitDecimal(m); got != want {
			t.Errorf("limitDecimal(%d) = %q, want %q", m, got, want)
		}
	}
}
