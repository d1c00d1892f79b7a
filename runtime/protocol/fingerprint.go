package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
)

// Fingerprint identifies a request body for Idempotency-Key matching (CONTRACT §4.1): the
// hex SHA-256 of the body's canonical JSON. Bodies that differ only in whitespace, object
// key order or string escaping ("\u0061" vs "a") share a fingerprint; numbers are kept as
// written, so 1 and 1.0 do not. Canonical form:
//   - no insignificant whitespace;
//   - object members sorted by key, compared as UTF-8 bytes (code point order);
//   - strings re-encoded with the shortest escapes: only '"', '\\' and control
//     characters are escaped (\b \f \n \r \t, else \u00xx), everything else is raw UTF-8;
//   - numbers, true, false and null exactly as written.
//
// A body that is not one valid JSON value, or that repeats a key in any object, has no
// fingerprint (its meaning would depend on the parser); the error is the one
// DecodeRequest gives for it.
func Fingerprint(body []byte) (string, error) {
	if !json.Valid(body) {
		return "", violation(pBody, rNotJSON)
	}
	c := canonicalizer{jsonCursor: jsonCursor{data: body}}
	out, ok := c.value(make([]byte, 0, len(body)))
	if !ok {
		return "", violation(pBody, rDuplicateKey)
	}
	sum := sha256.Sum256(out)
	return hex.EncodeToString(sum[:]), nil
}

type canonicalizer struct {
	jsonCursor
}

// canonicalMember is one object member during canonicalisation: its key and the span of its
// canonical value in the object's scratch buffer.
type canonicalMember struct {
	key        string
	start, end int
}

// value appends the canonical form of the value at the cursor to dst. ok is false if an
// object repeats a key.
func (c *canonicalizer) value(dst []byte) (out []byte, ok bool) {
	switch c.peek() {
	case '{':
		var (
			members []canonicalMember
			scratch []byte
		)
		ok = true
		_ = c.members(func(key []byte) error {
			start := len(scratch)
			scratch, ok = c.value(scratch)
			members = append(members, canonicalMember{key: string(key), start: start, end: len(scratch)})
			if !ok {
				return errStop
			}
			return nil
		})
		if !ok {
			return dst, false
		}
		slices.SortFunc(members, func(a, b canonicalMember) int {
			return strings.Compare(a.key, b.key) // byte order: code point order for UTF-8
		})
		dst = append(dst, '{')
		for i, m := range members {
			if i > 0 {
				if members[i-1].key == m.key {
					return dst, false
				}
				dst = append(dst, ',')
			}
			dst = appendCanonicalString(dst, m.key)
			dst = append(dst, ':')
			dst = append(dst, scratch[m.start:m.end]...)
		}
		return append(dst, '}'), true
	case '[':
		dst = append(dst, '[')
		first := true
		ok = true
		_ = c.elements(func() error {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst, ok = c.value(dst)
			if !ok {
				return errStop
			}
			return nil
		})
		return append(dst, ']'), ok
	case '"':
		return appendCanonicalString(dst, c.str()), true
	case 't':
		c.pos += 4
		return append(dst, "true"...), true
	case 'f':
		c.pos += 5
		return append(dst, "false"...), true
	case 'n':
		c.pos += 4
		return append(dst, "null"...), true
	}
	return append(dst, c.number()...), true
}

// appendCanonicalString appends s as a JSON string with the shortest escapes. s is valid
// UTF-8: the cursor replaces invalid bytes with U+FFFD as encoding/json does.
func appendCanonicalString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b == '"' || b == '\\':
			dst = append(dst, '\\', b)
		case b == '\b':
			dst = append(dst, '\\', 'b')
		case b == '\f':
			dst = append(dst, '\\', 'f')
		case b == '\n':
			dst = append(dst, '\\', 'n')
		case b == '\r':
			dst = append(dst, '\\', 'r')
		case b == '\t':
			dst = append(dst, '\\', 't')
		case b < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
		default:
			dst = append(dst, b)
		}
	}
	return append(dst, '"')
}
