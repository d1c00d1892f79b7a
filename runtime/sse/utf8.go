package sse

import "unicode/utf8"

// replacementChar is U+FFFD in UTF-8.
const replacementChar = "\uFFFD"

// appendValidUTF8 appends p to dst with every ill-formed sequence replaced by U+FFFD the
// way the WHATWG "UTF-8 decode" algorithm does: one U+FFFD per maximal subpart (the
// longest prefix of a valid sequence), not one per byte as ranging over a Go string would
// give. Matching the standard keeps this decoder's output identical to a browser's.
func appendValidUTF8(dst, p []byte) []byte {
	for len(p) > 0 {
		if p[0] < utf8.RuneSelf {
			dst = append(dst, p[0])
			p = p[1:]
			continue
		}
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, replacementChar...)
			p = p[maximalSubpart(p):]
			continue
		}
		dst = append(dst, p[:size]...)
		p = p[size:]
	}
	return dst
}

// maximalSubpart returns the length of the ill-formed sequence at the start of p: the lead
// byte plus the continuation bytes that could still have completed a valid sequence (the
// ranges of the WHATWG UTF-8 decoder, which exclude overlong forms, surrogates and code
// points above U+10FFFF). It is at least 1.
func maximalSubpart(p []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch b := p[0]; {
	case b >= 0xC2 && b <= 0xDF:
		need = 1
	case b == 0xE0:
		need, lo = 2, 0xA0
	case b == 0xED:
		need, hi = 2, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		need = 2
	case b == 0xF0:
		need, lo = 3, 0x90
	case b == 0xF4:
		need, hi = 3, 0x8F
	case b >= 0xF1 && b <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for n <= need && n < len(p) && p[n] >= lo && p[n] <= hi {
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}
