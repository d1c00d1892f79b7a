// Package pricing prices what an attempt used (spec/budgets.md, "Pricing"): a
// ModelDeployment's prices as the operator declared them, read into integer micro-units
// of a currency, and the cost of a usage report at those prices. Money never passes
// through floating point: a price is micro-units per 1,000,000 units, a cost is
// Σ quantity × price / 1,000,000, rounded up to the micro-unit once per report.
package pricing

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Micro is an amount of money in millionths of a currency unit (1 USD = 1,000,000).
type Micro = int64

// MicroPerUnit is the number of micro-units in one currency unit.
const MicroPerUnit = 1_000_000

// MaxPrice bounds a price: 12 integer digits and 6 decimals, so that a price times any
// quantity a report can carry fits in 128 bits and a cost in 63.
const MaxPrice Micro = 999_999_999_999_999_999

// Prices are a deployment's prices, each in micro-units per 1,000,000 units of its kind
// (tokens, images, seconds of media). Create them with New, which applies the defaults.
type Prices struct {
	// Currency is the ISO 4217 code, in upper case ("USD").
	Currency string
	// Input, Output, CacheRead, CacheWrite and Reasoning price tokens; Images price
	// images; MediaSeconds prices seconds of audio or video.
	Input, Output, CacheRead, CacheWrite, Reasoning, Images, MediaSeconds Micro
}

// Declared is a ModelDeployment's spec.pricing as written: decimal strings, empty for an
// optional price left out.
type Declared struct {
	Currency                                                                      string
	InputTokens, OutputTokens, CacheReadTokens, CacheWriteTokens, ReasoningTokens string
	Images, MediaSeconds                                                          string
}

// New reads declared prices. Left-out prices take their defaults (spec/budgets.md): the
// cache prices the input price, the reasoning price the output price, images and media
// seconds 0. A price that is not a decimal with at most 6 decimals is an error naming
// the field, never its value.
func New(d Declared) (*Prices, error) {
	p := &Prices{Currency: d.Currency}
	for _, f := range []struct {
		name  string
		text  string
		dst   *Micro
		deflt *Micro
	}{
		{"inputTokens", d.InputTokens, &p.Input, nil},
		{"outputTokens", d.OutputTokens, &p.Output, nil},
		{"cacheReadTokens", d.CacheReadTokens, &p.CacheRead, &p.Input},
		{"cacheWriteTokens", d.CacheWriteTokens, &p.CacheWrite, &p.Input},
		{"reasoningTokens", d.ReasoningTokens, &p.Reasoning, &p.Output},
		{"images", d.Images, &p.Images, new(Micro)},
		{"mediaSeconds", d.MediaSeconds, &p.MediaSeconds, new(Micro)},
	} {
		if f.text == "" && f.deflt != nil {
			*f.dst = *f.deflt
			continue
		}
		v, err := ParseDecimal(f.text)
		if err != nil {
			return nil, errors.New("pricing." + f.name + ": " + err.Error())
		}
		*f.dst = v
	}
	if len(p.Currency) != 3 || strings.ToUpper(p.Currency) != p.Currency {
		return nil, errors.New("pricing.currency: must be an ISO 4217 code of three upper-case letters")
	}
	return p, nil
}

// ParseDecimal reads a non-negative decimal with at most 6 decimals ("2.50", "0",
// "40000") into micro-units. Anything else, or a value above MaxPrice, is an error; its
// message never repeats the text.
func ParseDecimal(s string) (Micro, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || (len(whole) > 1 && whole[0] == '0') || !digits(whole) ||
		(dot && (frac == "" || len(frac) > 6 || !digits(frac))) {
		return 0, errors.New("must be a decimal number with at most 6 decimal places, for example \"2.50\"")
	}
	w, _ := strconv.ParseInt(whole, 10, 64) // at most 12 digits
	var f int64
	if dot {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	return w*MicroPerUnit + f, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Format writes m micro-units as a decimal with six decimals ("123.456789"), the form
// status and metrics report.
func Format(m Micro) string {
	neg := m < 0
	if neg {
		m = -m
	}
	s := strconv.FormatInt(m/MicroPerUnit, 10) + "." + leftPad(strconv.FormatInt(m%MicroPerUnit, 10), 6)
	if neg {
		return "-" + s
	}
	return s
}

func leftPad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return strings.Repeat("0", n-len(s)) + s
}

// Counting says how a provider counts tokens in the usage its adapter reports: whether
// its input count includes the cached tokens it also reports (OpenAI's prompt_tokens,
// Gemini's promptTokenCount) and whether its output count includes the reasoning
// tokens (OpenAI's completion_tokens). Every token is priced once: the included ones
// are taken out of the larger count and priced at their own price. Each adapter
// declares its provider's (runtime/providers/<name>/README.md, "Usage").
type Counting struct {
	InputIncludesCache      bool
	OutputIncludesReasoning bool
}

// Measured is what one usage report comes to.
type Measured struct {
	// Tokens is every token of the report counted once: input, output, cached and
	// reasoning tokens, those a larger count includes taken out of it.
	Tokens int64
	// Images is the images reported.
	Images int64
	// Cost is the report's cost in micro-units, rounded up; 0 without prices.
	Cost Micro
}

// Measure totals a usage report: its tokens, counted once per Counting, and its cost at
// p (nil: no cost). Quantities are rounded up to whole units (seconds of media
// included); entries of units it does not price (tool requests, custom units) are left
// out of the cost.
func Measure(usage []protocol.Usage, c Counting, p *Prices) Measured {
	var q struct{ input, output, cacheRead, cacheWrite, reasoning, images, media int64 }
	for _, u := range usage {
		n := whole(u.Quantity)
		switch u.Unit {
		case protocol.UnitInputTokens:
			q.input += n
		case protocol.UnitOutputTokens:
			q.output += n
		case protocol.UnitCacheReadTokens:
			q.cacheRead += n
		case protocol.UnitCacheWriteTokens:
			q.cacheWrite += n
		case protocol.UnitReasoningTokens:
			q.reasoning += n
		case protocol.UnitImages:
			q.images += n
		case protocol.UnitAudioSeconds, protocol.UnitVideoSeconds:
			q.media += n
		}
	}
	if c.InputIncludesCache {
		q.input = max(q.input-q.cacheRead-q.cacheWrite, 0)
	}
	if c.OutputIncludesReasoning {
		q.output = max(q.output-q.reasoning, 0)
	}
	m := Measured{Tokens: q.input + q.output + q.cacheRead + q.cacheWrite + q.reasoning, Images: q.images}
	if p != nil {
		var s sum
		s.add(q.input, p.Input)
		s.add(q.output, p.Output)
		s.add(q.cacheRead, p.CacheRead)
		s.add(q.cacheWrite, p.CacheWrite)
		s.add(q.reasoning, p.Reasoning)
		s.add(q.images, p.Images)
		s.add(q.media, p.MediaSeconds)
		m.Cost = s.cost()
	}
	return m
}

// Worst is the most a request can cost at p: input tokens at the input price (or the
// cache write price, when higher), output at the higher of the output and reasoning
// prices, and images at the image price.
func Worst(input, output, images int64, p *Prices) Micro {
	if p == nil {
		return 0
	}
	var s sum
	s.add(input, max(p.Input, p.CacheWrite))
	s.add(output, max(p.Output, p.Reasoning))
	s.add(images, p.Images)
	return s.cost()
}

// whole rounds a reported quantity up to a whole unit; reports are validated (finite,
// ≥ 0) before they reach here, and absurd ones saturate.
func whole(q float64) int64 {
	if !(q > 0) {
		return 0
	}
	if q >= 1<<62 {
		return 1 << 62
	}
	return int64(math.Ceil(q))
}

// sum accumulates quantity × price in 128 bits: a quantity of 2^62 at MaxPrice does not
// fit in 64. Hand-written because math/big would allocate on every report for what two
// words do.
type sum struct{ hi, lo uint64 }

func (s *sum) add(q int64, price Micro) {
	if q <= 0 || price <= 0 {
		return
	}
	hi, lo := bits.Mul64(uint64(q), uint64(price))
	var carry uint64
	s.lo, carry = bits.Add64(s.lo, lo, 0)
	s.hi, _ = bits.Add64(s.hi, hi, carry)
}

// cost is the sum divided by 1,000,000 (the prices are per million units), rounded up,
// saturated at math.MaxInt64.
func (s sum) cost() Micro {
	if s.hi >= MicroPerUnit {
		return math.MaxInt64 // the quotient would not fit in 64 bits
	}
	q, r := bits.Div64(s.hi, s.lo, MicroPerUnit)
	if r > 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return Micro(q)
}
