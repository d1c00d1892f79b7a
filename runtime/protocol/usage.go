package protocol

import (
	"math"
	"regexp"
	"strings"
)

// Usage units (spec/events.md, "usage.reported"). A provider may also report a namespaced
// custom unit "<provider>.<unit>".
const (
	UnitInputTokens      = "input_tokens"
	UnitOutputTokens     = "output_tokens"
	UnitCacheReadTokens  = "cache_read_tokens"
	UnitCacheWriteTokens = "cache_write_tokens"
	UnitReasoningTokens  = "reasoning_tokens"
	UnitImages           = "images"
	UnitAudioSeconds     = "audio_seconds"
	UnitVideoSeconds     = "video_seconds"
	UnitToolRequests     = "tool_requests"
	UnitRequests         = "requests"
)

// Usage sources.
const (
	SourceProvider = "provider"
	SourceRuntime  = "runtime"
	// SourceDerived marks a fact the runtime computed from other entries: the cost of a
	// report at its deployment's prices (spec/budgets.md, "Pricing").
	SourceDerived = "derived"
)

// CostPrefix starts the unit of a derived cost fact: cost.<currency in lower case>.
const CostPrefix = "cost."

// CostUnit is the unit of a cost in currency (an ISO 4217 code): "cost.usd" for USD.
func CostUnit(currency string) string { return CostPrefix + strings.ToLower(currency) }

// Usage is one measured quantity.
type Usage struct {
	Unit     string  `json:"unit"`
	Quantity float64 `json:"quantity"`
	Source   string  `json:"source"`
}

var (
	standardUnits = map[string]bool{
		UnitInputTokens: true, UnitOutputTokens: true, UnitCacheReadTokens: true,
		UnitCacheWriteTokens: true, UnitReasoningTokens: true, UnitImages: true,
		UnitAudioSeconds: true, UnitVideoSeconds: true, UnitToolRequests: true, UnitRequests: true,
	}
	customUnit = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z][a-z0-9_]*$`)
)

// Valid reports whether u may be emitted: a known or namespaced unit, a finite quantity
// ≥ 0 and a known source. The engine drops (and logs) entries that are not.
func (u Usage) Valid() bool {
	if !standardUnits[u.Unit] && !customUnit.MatchString(u.Unit) {
		return false
	}
	if math.IsNaN(u.Quantity) || math.IsInf(u.Quantity, 0) || u.Quantity < 0 {
		return false
	}
	return u.Source == SourceProvider || u.Source == SourceRuntime || u.Source == SourceDerived
}
