package providerhttp

import (
	"math"
	"reflect"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// A later report overrides exactly the fields it carries; entries keep a fixed order,
// leave out what was never reported (a reported zero stays) and drop impossible values.
func TestTokens(t *testing.T) {
	n := func(v float64) *float64 { return &v }
	var u Tokens
	u.Merge(Tokens{Input: n(12), Output: n(1), CacheRead: n(4)})
	u.Merge(Tokens{Output: n(3), Reasoning: n(0), CacheWrite: n(math.NaN())})
	want := []protocol.Usage{
		{Unit: protocol.UnitInputTokens, Quantity: 12, Source: protocol.SourceProvider},
		{Unit: protocol.UnitOutputTokens, Quantity: 3, Source: protocol.SourceProvider},
		{Unit: protocol.UnitCacheReadTokens, Quantity: 4, Source: protocol.SourceProvider},
		{Unit: protocol.UnitReasoningTokens, Quantity: 0, Source: protocol.SourceProvider},
	}
	if got := u.Entries(); !reflect.DeepEqual(got, want) {
		t.Errorf("Entries() = %+v, want %+v", got, want)
	}
	if got := (Tokens{Input: n(-1), Output: n(math.Inf(1))}).Entries(); got != nil {
		t.Errorf("impossible values reported: %+v", got)
	}
}
