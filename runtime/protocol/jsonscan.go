package protocol

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// jsonCursor walks a document that json.Valid has already accepted. Syntax errors cannot
// occur, so it only finds token boundaries; the callers decide what each value means.
// Strings without escapes are read in place; any other string is unquoted by
// encoding/json, so the decoder and encoding/json-based tools (the schema validator, the
// fingerprint) always agree on a string's value, including replacement of invalid UTF-8.
type jsonCursor struct {
	data []byte
	pos  int
}

// peek skips whitespace and returns the next byte, or 0 at the end.
func (c *jsonCursor) peek() byte {
	for c.pos < len(c.data) {
		switch b := c.data[c.pos]; b {
		case ' ', '\t', '\r', '\n':
			c.pos++
		default:
			return b
		}
	}
	return 0
}

// rawString consumes the string at the cursor and returns it with its quotes. plain
// reports that the bytes between the quotes are the string's value (no escapes, valid
// UTF-8).
func (c *jsonCursor) rawString() (raw []byte, plain bool) {
	c.peek()
	start := c.pos
	i := start + 1
	plain = true
	ascii := true
	for {
		b := c.data[i]
		if b == '"' {
			break
		}
		if b == '\\' {
			plain = false
			i += 2 // the escaped byte; \uXXXX digits are then skipped as ordinary bytes
			continue
		}
		if b >= utf8.RuneSelf {
			ascii = false
		}
		i++
	}
	c.pos = i + 1
	raw = c.data[start:c.pos]
	if plain && !ascii {
		plain = utf8.Valid(raw)
	}
	return raw, plain
}

// unquote decodes a string token the way encoding/json does.
func unquote(raw []byte) string {
	var s string
	// Cannot fail: raw is a string token of a valid document.
	_ = json.Unmarshal(raw, &s)
	return s
}

// str consumes the string at the cursor and returns its value.
func (c *jsonCursor) str() string {
	return stringValue(c.rawString())
}

// stringValue returns the value of a string token as rawString returns it.
func stringValue(raw []byte, plain bool) string {
	if plain {
		return string(raw[1 : len(raw)-1])
	}
	return unquote(raw)
}

// strIn consumes the string at the cursor and returns the index of its value in values,
// or -1. It does not allocate for plain strings.
func (c *jsonCursor) strIn(values []string) int {
	raw, plain := c.rawString()
	v := raw[1 : len(raw)-1]
	if !plain {
		v = []byte(unquote(raw))
	}
	for i, s := range values {
		if string(v) == s {
			return i
		}
	}
	return -1
}

// key consumes an object key and the colon after it. The result may alias the document;
// callers copy it before keeping it.
func (c *jsonCursor) key() []byte {
	raw, plain := c.rawString()
	c.peek()
	c.pos++ // ':'
	if plain {
		return raw[1 : len(raw)-1]
	}
	return []byte(unquote(raw))
}

// members calls fn for each member of the object at the cursor; fn consumes the value.
func (c *jsonCursor) members(fn func(key []byte) error) error {
	c.peek()
	c.pos++ // '{'
	if c.peek() == '}' {
		c.pos++
		return nil
	}
	for {
		if err := fn(c.key()); err != nil {
			return err
		}
		b := c.peek()
		c.pos++ // ',' or '}'
		if b == '}' {
			return nil
		}
	}
}

// elements calls fn for each element of the array at the cursor; fn consumes the value.
func (c *jsonCursor) elements(fn func() error) error {
	c.peek()
	c.pos++ // '['
	if c.peek() == ']' {
		c.pos++
		return nil
	}
	for {
		if err := fn(); err != nil {
			return err
		}
		b := c.peek()
		c.pos++ // ',' or ']'
		if b == ']' {
			return nil
		}
	}
}

// number consumes the number at the cursor and returns its literal.
func (c *jsonCursor) number() []byte {
	c.peek()
	start := c.pos
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case '-', '+', '.', 'e', 'E', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			c.pos++
			continue
		}
		break
	}
	return c.data[start:c.pos]
}

// isNumberStart reports whether b starts a number token.
func isNumberStart(b byte) bool { return b == '-' || (b >= '0' && b <= '9') }

// skip consumes one value and reports false if any object inside it repeats a key.
// Duplicate keys are ambiguous (parsers keep the first, the last, or fail), so the
// runtime rejects them wherever they occur.
func (c *jsonCursor) skip() bool {
	switch c.peek() {
	case '{':
		var keys keySet
		ok := true
		_ = c.members(func(k []byte) error {
			if !keys.add(k) || !c.skip() {
				ok = false
				return errStop
			}
			return nil
		})
		return ok
	case '[':
		ok := true
		_ = c.elements(func() error {
			if !c.skip() {
				ok = false
				return errStop
			}
			return nil
		})
		return ok
	case '"':
		c.rawString()
	case 't', 'n':
		c.pos += 4
	case 'f':
		c.pos += 5
	default:
		c.number()
	}
	return true
}

// errStop ends an iteration early; it never leaves this file.
var errStop = errors.New("stop")

// keySet detects repeated object keys: a linear scan for the usual handful of keys, a map
// once an object is large.
type keySet struct {
	small [][]byte
	large map[string]struct{}
}

// add records k and reports false if it was already present.
func (s *keySet) add(k []byte) bool {
	if s.large != nil {
		if _, dup := s.large[string(k)]; dup {
			return false
		}
		s.large[string(k)] = struct{}{}
		return true
	}
	for _, seen := range s.small {
		if string(seen) == string(k) {
			return false
		}
	}
	if len(s.small) < 16 {
		s.small = append(s.small, k)
		return true
	}
	s.large = make(map[string]struct{}, 2*len(s.small))
	for _, seen := range s.small {
		s.large[string(seen)] = struct{}{}
	}
	s.large[string(k)] = struct{}{}
	s.small = nil
	return true
}

// exactNumber is a number literal reduced to what comparisons with integer bounds need,
// without rounding: JSON Schema compares numbers exactly (1.0000000000000001 is not an
// integer), where float64 would not.
type exactNumber struct {
	neg      bool
	intPart  uint64 // integer part of the magnitude, when !overflow
	overflow bool   // the integer part does not fit in uint64
	frac     bool   // the fractional part is non-zero
}

// parseExactNumber reads a literal of the JSON number grammar.
func parseExactNumber(lit []byte) exactNumber {
	neg, intDigits, fracDigits, exp := numberParts(lit)
	n := exactNumber{neg: neg}
	digit, first, last := significand(intDigits, fracDigits)
	total := len(intDigits) + len(fracDigits)
	if first < 0 {
		return exactNumber{} // zero, whatever its sign or exponent
	}
	// The decimal point sits after `point` of the significand's digits.
	point := len(intDigits) + exp
	n.frac = last >= point
	if point-first > 20 {
		n.overflow = true
		return n
	}
	for k := first; k < point; k++ {
		d := uint64(0)
		if k < total {
			d = uint64(digit(k) - '0')
		}
		if n.intPart > (1<<64-1-d)/10 {
			n.overflow = true
			return n
		}
		n.intPart = n.intPart*10 + d
	}
	return n
}

// numberParts splits a literal of the JSON number grammar into its sign, the digits
// before and after the point, and its decimal exponent (saturated far beyond any digit
// count a body can hold).
func numberParts(lit []byte) (neg bool, intDigits, fracDigits []byte, exp int) {
	i := 0
	if lit[0] == '-' {
		neg = true
		i++
	}
	intStart := i
	for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
		i++
	}
	intDigits = lit[intStart:i]
	if i < len(lit) && lit[i] == '.' {
		i++
		fracStart := i
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			i++
		}
		fracDigits = lit[fracStart:i]
	}
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		expNeg := false
		if lit[i] == '+' || lit[i] == '-' {
			expNeg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			if exp < 1_000_000_000 {
				exp = exp*10 + int(lit[i]-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
	}
	return neg, intDigits, fracDigits, exp
}

// significand views intDigits followed by fracDigits as one digit sequence: digit(k) is
// its k-th digit, first and last the positions of its first and last non-zero digits
// (both -1 when the number is zero).
func significand(intDigits, fracDigits []byte) (digit func(k int) byte, first, last int) {
	digit = func(k int) byte {
		if k < len(intDigits) {
			return intDigits[k]
		}
		return fracDigits[k-len(intDigits)]
	}
	first, last = -1, -1
	for k := 0; k < len(intDigits)+len(fracDigits); k++ {
		if digit(k) != '0' {
			if first < 0 {
				first = k
			}
			last = k
		}
	}
	return digit, first, last
}

// integral reports whether the number has no fractional part.
func (n exactNumber) integral() bool { return !n.frac }

// cmp compares the number with b exactly: -1, 0 or +1.
func (n exactNumber) cmp(b int64) int {
	if !n.overflow && n.intPart == 0 && !n.frac {
		n.neg = false // -0 is 0
	}
	if !n.neg {
		switch {
		case b < 0, n.overflow, n.intPart > uint64(b):
			return 1
		case n.intPart < uint64(b):
			return -1
		case n.frac:
			return 1
		}
		return 0
	}
	if b >= 0 {
		return -1
	}
	m := uint64(-(b + 1)) + 1 // |b| without overflowing on MinInt64
	switch {
	case n.overflow, n.intPart > m:
		return -1
	case n.intPart < m:
		return 1
	case n.frac:
		return -1
	}
	return 0
}

// within reports whether lo ≤ n ≤ hi.
func (n exactNumber) within(lo, hi int64) bool { return n.cmp(lo) >= 0 && n.cmp(hi) <= 0 }

// CanonicalBase64 reports whether s is non-empty canonical standard base64, the language
// of Base64Pattern: padded to a multiple of four, no line breaks or other bytes outside
// the alphabet, and zero bits in the padding so that one byte string has one encoding.
// It runs in one pass without allocating, for multi-megabyte media. Front doors check
// the media they translate with it, so that what they accept the native decoder does.
func CanonicalBase64(s string) bool {
	n := len(s)
	if n == 0 || n%4 != 0 {
		return false
	}
	body := n
	switch {
	case s[n-2] == '=' && s[n-1] == '=':
		// One byte of data in the last quantum: the low four bits of its second
		// character must be zero.
		body = n - 2
		if v := base64Value[s[n-3]]; v < 0 || v&0x0f != 0 {
			return false
		}
	case s[n-1] == '=':
		// Two bytes of data: the low two bits of the third character must be zero.
		body = n - 1
		if v := base64Value[s[n-2]]; v < 0 || v&0x03 != 0 {
			return false
		}
	}
	for i := 0; i < body; i++ {
		if base64Value[s[i]] < 0 {
			return false
		}
	}
	return true
}

// base64Value maps a byte to its value in the standard alphabet, or -1.
var base64Value = func() (t [256]int8) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()
