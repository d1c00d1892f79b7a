package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Hand-written encoders for the few shapes on every execution's path (an output.delta's
// data, the event envelope of every SSE frame, the strings of the 202 body), byte for byte what
// encoding/json writes, without reflection and with no allocation beyond the caller's
// buffer. encoding/json does not export its string encoder, and jsontext.AppendQuote
// (github.com/go-json-experiment/json) escapes fewer characters than encoding/json, whose
// bytes the stored events and the conformance vectors pin. FuzzAppendDelta and
// FuzzAppendJSONString check them against encoding/json.

// AppendEnvelope appends ev as its JSON envelope (spec/events.md, "Envelope") on one
// line: the same JSON value as encoding/json gives. Event data is stored as the engine
// encoded it (compact JSON); data holding a line break is compacted first, so that the
// envelope always fits one SSE data line.
func AppendEnvelope(dst []byte, ev *Event) []byte {
	dst = append(dst, `{"execution_id":`...)
	dst = AppendJSONString(dst, ev.ExecutionID)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendUint(dst, ev.Sequence, 10)
	dst = append(dst, `,"timestamp":"`...)
	dst = ev.Timestamp.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","type":`...)
	dst = AppendJSONString(dst, string(ev.Type))
	dst = append(dst, `,"data":`...)
	switch {
	case len(ev.Data) == 0:
		dst = append(dst, "null"...)
	case bytes.ContainsAny(ev.Data, "\r\n"):
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, ev.Data); err != nil {
			// Not JSON: the engine never records such data. Keep the envelope valid.
			buf.Truncate(len(dst))
			buf.WriteString("null")
		}
		dst = buf.Bytes()
	default:
		dst = append(dst, ev.Data...)
	}
	return append(dst, '}')
}

// AppendDelta appends d encoded as encoding/json encodes it.
func AppendDelta(dst []byte, d OutputDeltaData) []byte {
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(d.Index), 10)
	dst = append(dst, `,"type":`...)
	dst = AppendJSONString(dst, d.Type)
	dst = append(dst, `,"text":`...)
	dst = AppendJSONString(dst, d.Text)
	return append(dst, '}')
}

// AppendJSONString appends s as a JSON string, as encoding/json encodes it.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendJSONStringContent(dst, s)
	return append(dst, '"')
}

// AppendJSONStringContent appends s escaped for a JSON string, without the quotes, as
// encoding/json escapes it: '"', '\\', control characters, '<', '>', '&', U+2028 and
// U+2029 are escaped, and bytes that are not valid UTF-8 become U+FFFD.
func AppendJSONStringContent(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}
