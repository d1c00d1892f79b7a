package providerhttp

import (
	"math"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Tokens is a provider's token usage in the protocol's units (spec/events.md,
// "usage.reported"), as the adapter read it from the provider's own usage object. A nil
// field was not reported: it is left out of the entries rather than reported as zero,
// and a later report in the same stream overrides exactly the fields it carries.
type Tokens struct {
	Input, Output, CacheRead, CacheWrite, Reasoning *float64
}

// Merge takes every field o reports: the latest value of each field wins, as providers
// report cumulative usage along a stream.
func (t *Tokens) Merge(o Tokens) {
	for _, f := range []struct{ dst, src **float64 }{
		{&t.Input, &o.Input}, {&t.Output, &o.Output}, {&t.CacheRead, &o.CacheRead},
		{&t.CacheWrite, &o.CacheWrite}, {&t.Reasoning, &o.Reasoning},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
}

// Entries lists the reported fields as provider usage entries, in a fixed order. Values
// that are not finite counts are dropped (the engine would drop them too).
func (t Tokens) Entries() []protocol.Usage {
	var out []protocol.Usage
	for _, f := range []struct {
		unit string
		v    *float64
	}{
		{protocol.UnitInputTokens, t.Input},
		{protocol.UnitOutputTokens, t.Output},
		{protocol.UnitCacheReadTokens, t.CacheRead},
		{protocol.UnitCacheWriteTokens, t.CacheWrite},
		{protocol.UnitReasoningTokens, t.Reasoning},
	} {
		if f.v != nil && !math.IsNaN(*f.v) && !math.IsInf(*f.v, 0) && *f.v >= 0 {
			out = append(out, protocol.Usage{Unit: f.unit, Quantity: *f.v, Source: protocol.SourceProvider})
		}
	}
	return out
}
