package protocol

import (
	"encoding/base64"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestCanonicalBase64 checks the hand-written validator against its two definitions: the
// schema's Base64Pattern, and strict standard decoding (which also ignores line breaks;
// the runtime does not).
func TestCanonicalBase64(t *testing.T) {
	re := regexp.MustCompile(Base64Pattern)
	strict := base64.StdEncoding.Strict()
	check := func(s string) {
		t.Helper()
		got := CanonicalBase64(s)
		if want := s != "" && re.MatchString(s); got != want {
			t.Fatalf("CanonicalBase64(%q) = %v, pattern says %v", s, got, want)
		}
		_, err := strict.DecodeString(s)
		if want := s != "" && err == nil && !strings.ContainsAny(s, "\r\n"); got != want {
			t.Fatalf("CanonicalBase64(%q) = %v, strict decoding says %v", s, got, want)
		}
	}
	for _, s := range []string{"", "A", "AA", "AAA", "AAAA", "QQ==", "QR==", "QUI=", "QUJ=", "Q===",
		"====", "AA=A", "AAAA====", "AB\nCD", "ab-_", "YQ", "YWJjZA==", "YWJjZA=\n="} {
		check(s)
	}
	// Every encoding of every short byte string is canonical; mutating one character of
	// it usually is not.
	rng := rand.New(rand.NewPCG(1, 2))
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_\n *"
	for range 20000 {
		b := make([]byte, rng.IntN(10))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		s := base64.StdEncoding.EncodeToString(b)
		check(s)
		if s != "" {
			m := []byte(s)
			m[rng.IntN(len(m))] = chars[rng.IntN(len(chars))]
			check(string(m))
		}
	}
}

func TestExactNumber(t *testing.T) {
	for _, tc := range []struct {
		lit      string
		integral bool
		lo, hi   int64
		within   bool
	}{
		{"1", true, 1, 5, true},
		{"5.0", true, 1, 5, true},
		{"0.5e1", true, 1, 5, true},
		{"50e-1", true, 1, 5, true},
		{"5.5", false, 1, 5, false},
		{"1.0000000000000001", false, 1, 5, true},
		{"5.0000000000000001", false, 1, 5, false},
		{"0.9999999999999999", false, 1, 5, false},
		{"-0", true, 0, 0, true},
		{"-0.0e5", true, 0, 0, true},
		{"0e999999999999", true, 0, 0, true},
		{"1e400", true, 1, math.MaxInt64, false},
		{"1e-400", false, 0, 1, true},
		{"-1e-400", false, 0, 1, false},
		{"3.6e6", true, 1, 3600000, true},
		{"3600000.1", false, 1, 3600000, false},
		{"9223372036854775807", true, math.MinInt64, math.MaxInt64, true},
		{"9223372036854775808", true, math.MinInt64, math.MaxInt64, false},
		{"-9223372036854775808", true, math.MinInt64, math.MaxInt64, true},
		{"-9223372036854775809", true, math.MinInt64, math.MaxInt64, false},
		{"18446744073709551616", true, 0, math.MaxInt64, false},
		{"-2", true, -3, -1, true},
		{"-2.5", false, -3, -2, true},
		{"-3.5", false, -3, -2, false},
	} {
		n := parseExactNumber([]byte(tc.lit))
		if n.integral() != tc.integral || n.within(tc.lo, tc.hi) != tc.within {
			t.Errorf("%s: integral=%v within[%d,%d]=%v, want %v %v",
				tc.lit, n.integral(), tc.lo, tc.hi, n.within(tc.lo, tc.hi), tc.integral, tc.within)
		}
	}
}

// TestExactNumberMatchesBigRat compares with exact rational arithmetic, which is what the
// schema validator uses.
func TestExactNumberMatchesBigRat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		return b.String()
	}
	bounds := []int64{math.MinInt64, -1000, -2, -1, 0, 1, 2, 5, 3600000, math.MaxInt64}
	for range 20000 {
		lit := digits(1 + rng.IntN(3))
		if len(lit) > 1 && lit[0] == '0' {
			lit = "1" + lit[1:]
		}
		if rng.IntN(2) == 0 {
			lit = "-" + lit
		}
		if rng.IntN(2) == 0 {
			lit += "." + digits(1+rng.IntN(20))
		}
		if rng.IntN(3) == 0 {
			lit += fmt.Sprintf("e%d", rng.IntN(40)-20)
		}
		r, ok := new(big.Rat).SetString(lit)
		if !ok {
			t.Fatalf("big.Rat cannot parse %s", lit)
		}
		n := parseExactNumber([]byte(lit))
		if n.integral() != r.IsInt() {
			t.Fatalf("%s: integral=%v, big.Rat says %v", lit, n.integral(), r.IsInt())
		}
		for _, b := range bounds {
			if got, want := n.cmp(b), r.Cmp(new(big.Rat).SetInt64(b)); got != want {
				t.Fatalf("%s cmp %d = %d, big.Rat says %d", lit, b, got, want)
			}
		}
	}
}

func TestSkipRejectsDuplicateKeys(t *testing.T) {
	var many strings.Builder
	many.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&many, `"k%d":%d,`, i, i)
	}
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{`{"a":1,"b":{"a":1}}`, true},
		{`{"a":1,"a":1}`, false},
		{`[{"x":[{"y":1,"y":2}]}]`, false},
		{`{"\u0061":1,"a":2}`, false},
		{many.String() + `"k99":0}`, false}, // a duplicate found through the map
		{many.String() + `"k100":0}`, true},
		{`"s"`, true},
		{`-1.5e3`, true},
	} {
		c := jsonCursor{data: []byte(tc.doc)}
		if got := c.skip(); got != tc.ok || (tc.ok && c.pos != len(tc.doc)) {
			t.Errorf("skip(%.40s) = %v at %d, want %v", tc.doc, got, c.pos, tc.ok)
		}
	}
}
