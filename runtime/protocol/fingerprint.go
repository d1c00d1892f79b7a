package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"math"
	"slices"
	"sort"
	"strings"
)

// Fingerprint identifies a request body for Idempotency-Key matching (spec/http-api.md,
// "Idempotency"): the hex SHA-256 of the body's canonical JSON. Bodies that differ only
// in whitespace, object key order or string escaping ("\u0061" vs "a") share a
// fingerprint; numbers are kept as written, so 1 and 1.0 do not. Canonical form:
//   - no insignificant whitespace;
//   - object members sorted by key, compared as UTF-8 bytes (code point order);
//   - strings re-encoded with the shortest escapes: only '"', '\\' and control
//     characters are escaped (\b \f \n \r \t, else \u00xx), everything else is raw UTF-8;
//   - numbers, true, false and null exactly as written.
//
// A body that is not one valid JSON value, or that repeats a key in any object, has no
// fingerprint (its meaning would depend on the parser); the error is the one
// DecodeRequest gives for it.
//
// Time and memory are linear in the body size whatever its nesting: the canonical form is
// streamed into the hash, and sorting an object's members never copies their values.
func Fingerprint(body []byte) (string, error) {
	if !json.Valid(body) {
		return "", violation(pBody, rNotJSON)
	}
	if len(body) > math.MaxInt32 {
		return "", RequestTooLarge() // offsets below are int32; no limit comes close
	}
	c := canonicalizer{jsonCursor: jsonCursor{data: body}, h: sha256.New()}
	c.indexContainers()
	c.pos = 0
	if !c.emit(c.skipSpace()) {
		return "", violation(pBody, rDuplicateKey)
	}
	c.flush()
	return hex.EncodeToString(c.h.Sum(nil)), nil
}

// canonicalizer writes the canonical form of a valid document into a hash.
type canonicalizer struct {
	jsonCursor
	// starts and ends hold the offsets of every object and array, in document order, so
	// that an object's members can be listed without walking into their values.
	starts, ends []int32
	h            hash.Hash
	buf          []byte // pending output, flushed to h in blocks
}

// canonicalMember is one object member: its decoded key and where its value starts.
type canonicalMember struct {
	key   string
	value int
}

// skipSpace moves past whitespace and returns the position.
func (c *canonicalizer) skipSpace() int {
	c.peek()
	return c.pos
}

// indexContainers records the extent of every object and array in one pass.
func (c *canonicalizer) indexContainers() {
	var open []int
	for {
		switch b := c.peek(); b {
		case 0:
			return
		case '{', '[':
			open = append(open, len(c.starts))
			c.starts = append(c.starts, int32(c.pos))
			c.ends = append(c.ends, 0)
			c.pos++
		case '}', ']':
			c.pos++
			i := open[len(open)-1]
			open = open[:len(open)-1]
			c.ends[i] = int32(c.pos)
		case ',', ':':
			c.pos++
		case '"':
			c.rawString()
		case 't', 'n':
			c.pos += 4
		case 'f':
			c.pos += 5
		default:
			c.number()
		}
	}
}

// pass moves the cursor past the value at the cursor: a container in one step through
// the index, a scalar by scanning it.
func (c *canonicalizer) pass() {
	switch c.peek() {
	case '{', '[':
		i := sort.Search(len(c.starts), func(i int) bool { return int(c.starts[i]) >= c.pos })
		c.pos = int(c.ends[i])
	case '"':
		c.rawString()
	case 't', 'n':
		c.pos += 4
	case 'f':
		c.pos += 5
	default:
		c.number()
	}
}

// emit writes the canonical form of the value at pos. It reports false if an object
// repeats a key.
func (c *canonicalizer) emit(pos int) bool {
	c.pos = pos
	switch c.peek() {
	case '{':
		var members []canonicalMember
		_ = c.members(func(key []byte) error {
			members = append(members, canonicalMember{key: string(key), value: c.skipSpace()})
			c.pass()
			return nil
		})
		// Byte order of UTF-8 is code point order.
		slices.SortFunc(members, func(a, b canonicalMember) int { return strings.Compare(a.key, b.key) })
		c.write("{")
		for i, m := range members {
			if i > 0 {
				if members[i-1].key == m.key {
					return false
				}
				c.write(",")
			}
			c.writeString(m.key)
			c.write(":")
			if !c.emit(m.value) {
				return false
			}
		}
		c.write("}")
	case '[':
		c.write("[")
		first := true
		ok := true
		_ = c.elements(func() error {
			if !first {
				c.write(",")
			}
			first = false
			start := c.skipSpace()
			c.pass()
			end := c.pos
			if ok = c.emit(start); !ok {
				return errStop
			}
			c.pos = end
			return nil
		})
		if !ok {
			return false
		}
		c.write("]")
	case '"':
		c.writeString(c.str())
	case 't':
		c.write("true")
	case 'f':
		c.write("false")
	case 'n':
		c.write("null")
	default:
		c.buf = append(c.buf, c.number()...)
	}
	c.maybeFlush()
	return true
}

func (c *canonicalizer) write(s string) { c.buf = append(c.buf, s...) }

// writeString writes s as a JSON string with the shortest escapes. s is valid UTF-8: the
// cursor replaces invalid bytes with U+FFFD as encoding/json does.
func (c *canonicalizer) writeString(s string) {
	const hexDigits = "0123456789abcdef"
	c.buf = append(c.buf, '"')
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b == '"' || b == '\\':
			c.buf = append(c.buf, '\\', b)
		case b == '\b':
			c.buf = append(c.buf, '\\', 'b')
		case b == '\f':
			c.buf = append(c.buf, '\\', 'f')
		case b == '\n':
			c.buf = append(c.buf, '\\', 'n')
		case b == '\r':
			c.buf = append(c.buf, '\\', 'r')
		case b == '\t':
			c.buf = append(c.buf, '\\', 't')
		case b < 0x20:
			c.buf = append(c.buf, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
		default:
			c.buf = append(c.buf, b)
		}
	}
	c.buf = append(c.buf, '"')
}

// maybeFlush hands pending output to the hash once it is worth a call.
func (c *canonicalizer) maybeFlush() {
	if len(c.buf) >= 32<<10 {
		c.flush()
	}
}

func (c *canonicalizer) flush() {
	c.h.Write(c.buf)
	c.buf = c.buf[:0]
}
