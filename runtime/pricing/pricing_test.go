package pricing_test

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Prices and costs at their edges (spec/budgets.md, "Pricing"): the decimal grammar of a
// price, the defaults of left-out prices, every token priced once, rounding up once per
// report, saturation instead of overflow.

func TestParseDecimal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pricing.Micro
	}{
		{"0", 0},
		{"2.50", 2_500_000},
		{"0.000001", 1},
		{"40000", 40_000_000_000},
		{"1.5", 1_500_000},
		{"999999999999.999999", pricing.MaxPrice},
	} {
		got, err := pricing.ParseDecimal(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDecimal(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseDecimalRefuses(t *testing.T) {
	invalid := []string{
		"",                    // empty
		"00",                  // a leading zero
		"01",                  // a leading zero
		"1.",                  // no decimals after the point
		".5",                  // no integer part
		"1e3",                 // an exponent
		"-1",                  // a sign
		"+1",                  // a sign
		"2.5.0",               // two points
		"0.1234567",           // 7 decimals
		"1,5",                 // a decimal comma
		" 1",                  // a space
		"1 ",                  // a space
		"1234567890123",       // 13 integer digits
		"1234567890123.5",     // 13 integer digits
		"٣",                   // a digit, but not an ASCII one
		"NaN",                 // not a number
		"31415926.5358979323", // the canary below, with too many decimals
	}
	var first string
	for _, in := range invalid {
		got, err := pricing.ParseDecimal(in)
		if err == nil {
			t.Errorf("ParseDecimal(%q) = %d, want an error", in, got)
			continue
		}
		if got != 0 {
			t.Errorf("ParseDecimal(%q) returned %d with its error, want 0", in, got)
		}
		// The message is fixed: it cannot repeat any part of what was written.
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("ParseDecimal(%q): message %q differs from %q: it depends on the input", in, err, first)
		}
		if len(in) >= 3 && strings.Contains(err.Error(), in) {
			t.Errorf("ParseDecimal(%q): message %q repeats the input", in, err)
		}
	}
	if first == "" || !strings.Contains(first, "6 decimal places") {
		t.Errorf("message %q does not say what a price must look like", first)
	}
}

func TestNewDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   pricing.Declared
		want pricing.Prices
	}{{
		name: "left-out prices take their defaults",
		in:   pricing.Declared{Currency: "USD", InputTokens: "2.50", OutputTokens: "10.00"},
		want: pricing.Prices{Currency: "USD", Input: 2_500_000, Output: 10_000_000,
			CacheRead: 2_500_000, CacheWrite: 2_500_000, Reasoning: 10_000_000, Images: 0, MediaSeconds: 0},
	}, {
		name: "every price declared",
		in: pricing.Declared{Currency: "EUR", InputTokens: "2.50", OutputTokens: "10.00", CacheReadTokens: "1.25",
			CacheWriteTokens: "3.125", ReasoningTokens: "12", Images: "40000", MediaSeconds: "0.5"},
		want: pricing.Prices{Currency: "EUR", Input: 2_500_000, Output: 10_000_000,
			CacheRead: 1_250_000, CacheWrite: 3_125_000, Reasoning: 12_000_000, Images: 40_000_000_000, MediaSeconds: 500_000},
	}, {
		name: "a zero price is a price, not a left-out one",
		in:   pricing.Declared{Currency: "USD", InputTokens: "0", OutputTokens: "0", CacheReadTokens: "0", ReasoningTokens: "0"},
		want: pricing.Prices{Currency: "USD"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pricing.New(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("New(%+v) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	// canary is a value that must never appear in an error message.
	const canary = "31415926.5358979"
	valid := pricing.Declared{Currency: "USD", InputTokens: "2.50", OutputTokens: "10.00"}
	for _, tc := range []struct {
		name  string
		edit  func(*pricing.Declared)
		field string
	}{
		{"no input price", func(d *pricing.Declared) { d.InputTokens = "" }, "pricing.inputTokens: "},
		{"no output price", func(d *pricing.Declared) { d.OutputTokens = "" }, "pricing.outputTokens: "},
		{"bad input price", func(d *pricing.Declared) { d.InputTokens = canary }, "pricing.inputTokens: "},
		{"bad output price", func(d *pricing.Declared) { d.OutputTokens = canary }, "pricing.outputTokens: "},
		{"bad cache read price", func(d *pricing.Declared) { d.CacheReadTokens = canary }, "pricing.cacheReadTokens: "},
		{"bad cache write price", func(d *pricing.Declared) { d.CacheWriteTokens = canary }, "pricing.cacheWriteTokens: "},
		{"bad reasoning price", func(d *pricing.Declared) { d.ReasoningTokens = canary }, "pricing.reasoningTokens: "},
		{"bad image price", func(d *pricing.Declared) { d.Images = canary }, "pricing.images: "},
		{"bad media price", func(d *pricing.Declared) { d.MediaSeconds = canary }, "pricing.mediaSeconds: "},
		{"no currency", func(d *pricing.Declared) { d.Currency = "" }, "pricing.currency: "},
		{"lower-case currency", func(d *pricing.Declared) { d.Currency = "usd" }, "pricing.currency: "},
		{"two letters", func(d *pricing.Declared) { d.Currency = "US" }, "pricing.currency: "},
		{"four letters", func(d *pricing.Declared) { d.Currency = "USDT" }, "pricing.currency: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := valid
			tc.edit(&d)
			p, err := pricing.New(d)
			if err == nil {
				t.Fatalf("New(%+v) = %+v, want an error", d, p)
			}
			if p != nil {
				t.Errorf("New returned prices %+v with its error", p)
			}
			if !strings.HasPrefix(err.Error(), tc.field) {
				t.Errorf("error %q does not start with the field %q", err, tc.field)
			}
			if strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), "31415926") {
				t.Errorf("error %q repeats the value", err)
			}
		})
	}
}

// prices builds Prices from decimal strings, failing the test on a bad one.
func prices(t *testing.T, d pricing.Declared) *pricing.Prices {
	t.Helper()
	if d.Currency == "" {
		d.Currency = "USD"
	}
	p, err := pricing.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func u(unit string, q float64) protocol.Usage {
	return protocol.Usage{Unit: unit, Quantity: q, Source: protocol.SourceProvider}
}

func TestMeasure(t *testing.T) {
	// One micro-unit per token of input, so that the arithmetic reads off the counts.
	cached := prices(t, pricing.Declared{InputTokens: "1", OutputTokens: "4", CacheReadTokens: "0.5",
		CacheWriteTokens: "2", ReasoningTokens: "8"})
	openAI := pricing.Counting{InputIncludesCache: true, OutputIncludesReasoning: true}
	for _, tc := range []struct {
		name     string
		usage    []protocol.Usage
		counting pricing.Counting
		prices   *pricing.Prices
		want     pricing.Measured
	}{{
		name:   "input apart from cache: every count priced as given",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 100), u(protocol.UnitCacheReadTokens, 30), u(protocol.UnitCacheWriteTokens, 10)},
		prices: cached,
		// 100×1 + 30×0.5 + 10×2 = 135 micro-units; 140 tokens.
		want: pricing.Measured{Tokens: 140, Cost: 135},
	}, {
		name:     "input includes cache: the cached tokens are taken out of the input",
		usage:    []protocol.Usage{u(protocol.UnitInputTokens, 100), u(protocol.UnitCacheReadTokens, 30), u(protocol.UnitCacheWriteTokens, 10)},
		counting: pricing.Counting{InputIncludesCache: true},
		prices:   cached,
		// (100-30-10)×1 + 30×0.5 + 10×2 = 95; 100 tokens, each once.
		want: pricing.Measured{Tokens: 100, Cost: 95},
	}, {
		name:   "output apart from reasoning",
		usage:  []protocol.Usage{u(protocol.UnitOutputTokens, 50), u(protocol.UnitReasoningTokens, 20)},
		prices: cached,
		// 50×4 + 20×8 = 360; 70 tokens.
		want: pricing.Measured{Tokens: 70, Cost: 360},
	}, {
		name:     "output includes reasoning: the reasoning tokens are taken out of the output",
		usage:    []protocol.Usage{u(protocol.UnitOutputTokens, 50), u(protocol.UnitReasoningTokens, 20)},
		counting: pricing.Counting{OutputIncludesReasoning: true},
		prices:   cached,
		// (50-20)×4 + 20×8 = 280; 50 tokens.
		want: pricing.Measured{Tokens: 50, Cost: 280},
	}, {
		name:     "an included count larger than its total leaves 0, never a negative count",
		usage:    []protocol.Usage{u(protocol.UnitInputTokens, 5), u(protocol.UnitCacheReadTokens, 8), u(protocol.UnitOutputTokens, 1), u(protocol.UnitReasoningTokens, 3)},
		counting: openAI,
		prices:   cached,
		// 0×1 + 8×0.5 + 0×4 + 3×8 = 28; 11 tokens.
		want: pricing.Measured{Tokens: 11, Cost: 28},
	}, {
		name:   "one token at the smallest price costs one micro-unit, not 0",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 1)},
		prices: prices(t, pricing.Declared{InputTokens: "0.000001", OutputTokens: "0"}),
		want:   pricing.Measured{Tokens: 1, Cost: 1},
	}, {
		name:   "rounded up once per report, not once per entry",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 1), u(protocol.UnitOutputTokens, 1)},
		prices: prices(t, pricing.Declared{InputTokens: "0.5", OutputTokens: "0.5"}),
		// 0.5 + 0.5 = 1 micro-unit; rounding each entry would make it 2.
		want: pricing.Measured{Tokens: 2, Cost: 1},
	}, {
		name:   "entries of one unit add up",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 3), u(protocol.UnitInputTokens, 4)},
		prices: cached,
		want:   pricing.Measured{Tokens: 7, Cost: 7},
	}, {
		name: "fractional quantities round up to whole units",
		usage: []protocol.Usage{u(protocol.UnitInputTokens, 0.1), u(protocol.UnitAudioSeconds, 1.2),
			u(protocol.UnitVideoSeconds, 0.5), u(protocol.UnitImages, 1.5)},
		// One currency unit per second of media and per image.
		prices: prices(t, pricing.Declared{InputTokens: "1", OutputTokens: "0", MediaSeconds: "1000000", Images: "1000000"}),
		// 1 token × 1 + (2 + 1) seconds × 1,000,000 + 2 images × 1,000,000.
		want: pricing.Measured{Tokens: 1, Images: 2, Cost: 5_000_001},
	}, {
		name:   "units without a price are left out of the cost",
		usage:  []protocol.Usage{u(protocol.UnitToolRequests, 7), u(protocol.UnitRequests, 1), u("demo.widgets", 9), u(protocol.UnitInputTokens, 2)},
		prices: cached,
		want:   pricing.Measured{Tokens: 2, Cost: 2},
	}, {
		name:   "zero, negative and NaN quantities count nothing",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 0), u(protocol.UnitOutputTokens, -3), u(protocol.UnitCacheReadTokens, math.NaN())},
		prices: cached,
		want:   pricing.Measured{},
	}, {
		name:     "without prices: no cost, tokens still counted once",
		usage:    []protocol.Usage{u(protocol.UnitInputTokens, 100), u(protocol.UnitCacheReadTokens, 30), u(protocol.UnitOutputTokens, 10), u(protocol.UnitImages, 2)},
		counting: openAI,
		want:     pricing.Measured{Tokens: 110, Images: 2},
	}, {
		name:   "a huge quantity saturates rather than overflowing",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 1e30)},
		prices: prices(t, pricing.Declared{InputTokens: "999999999999.999999", OutputTokens: "0"}),
		want:   pricing.Measured{Tokens: 1 << 62, Cost: math.MaxInt64},
	}, {
		name:   "an infinite quantity saturates too",
		usage:  []protocol.Usage{u(protocol.UnitOutputTokens, math.Inf(1))},
		prices: prices(t, pricing.Declared{InputTokens: "0", OutputTokens: "999999999999.999999"}),
		want:   pricing.Measured{Tokens: 1 << 62, Cost: math.MaxInt64},
	}, {
		name:   "a large cost that fits is exact",
		usage:  []protocol.Usage{u(protocol.UnitInputTokens, 1_000_000_000)},
		prices: prices(t, pricing.Declared{InputTokens: "999999.999999", OutputTokens: "0"}),
		// 1e9 tokens × 999,999,999,999 micro-units / 1e6 = 999,999,999,999,000 micro-units.
		want: pricing.Measured{Tokens: 1_000_000_000, Cost: 999_999_999_999_000},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := pricing.Measure(tc.usage, tc.counting, tc.prices)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Measure (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorst(t *testing.T) {
	// The worst case of 20 input tokens and a 64-token output cap.
	for _, tc := range []struct {
		name   string
		prices *pricing.Prices
		images int64
		want   pricing.Micro
	}{{
		name:   "input and output prices",
		prices: prices(t, pricing.Declared{InputTokens: "2.50", OutputTokens: "10.00"}),
		// 20×2.5 + 64×10 = 690.
		want: 690,
	}, {
		name:   "the higher cache write and reasoning prices, rounded up",
		prices: prices(t, pricing.Declared{InputTokens: "2.50", OutputTokens: "10.00", CacheWriteTokens: "3.125", ReasoningTokens: "12"}),
		// 20×3.125 + 64×12 = 62.5 + 768 = 830.5 ⇒ 831.
		want: 831,
	}, {
		name:   "lower cache write and reasoning prices do not lower it",
		prices: prices(t, pricing.Declared{InputTokens: "2.50", OutputTokens: "10.00", CacheWriteTokens: "1", CacheReadTokens: "0.1", ReasoningTokens: "5"}),
		want:   690,
	}, {
		name:   "images at the image price",
		prices: prices(t, pricing.Declared{InputTokens: "2.50", OutputTokens: "10.00", Images: "40000"}),
		images: 3,
		// 690 + 3 × 40,000 (0.04 each).
		want: 690 + 120_000,
	}, {
		name: "no prices: no cost",
		want: 0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pricing.Worst(20, 64, tc.images, tc.prices); got != tc.want {
				t.Errorf("Worst(20, 64, %d) = %d, want %d", tc.images, got, tc.want)
			}
		})
	}
	top := prices(t, pricing.Declared{InputTokens: "999999999999.999999", OutputTokens: "999999999999.999999"})
	if got := pricing.Worst(1<<62, 1<<62, 0, top); got != math.MaxInt64 {
		t.Errorf("Worst of the largest quantities at the largest prices = %d, want it saturated at %d", got, int64(math.MaxInt64))
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   pricing.Micro
		want string
	}{
		{0, "0.000000"},
		{1, "0.000001"},
		{999_999, "0.999999"},
		{1_000_000, "1.000000"},
		{2_500_000, "2.500000"},
		{123_456_789, "123.456789"},
		{-500_000, "-0.500000"},
		{-1, "-0.000001"},
		{pricing.MaxPrice, "999999999999.999999"},
	} {
		if got := pricing.Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// What Format writes, ParseDecimal reads back.
	for _, m := range []pricing.Micro{0, 1, 83_100, 123_456_789, pricing.MaxPrice} {
		if back, err := pricing.ParseDecimal(pricing.Format(m)); err != nil || back != m {
			t.Errorf("ParseDecimal(Format(%d)) = %d, %v", m, back, err)
		}
	}
}
