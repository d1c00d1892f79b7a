package httpapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The hand-written encoders below produce the same JSON values as encoding/json for the
// few shapes on hot paths (the 202 body, the event envelope of every SSE frame), without
// reflection and with no allocation beyond the caller's buffer.

// appendJSONString appends s as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringContent(dst, s)
	return append(dst, '"')
}

// appendJSONStringContent appends s escaped for a JSON string, without the quotes: '"',
// '\\' and control characters are escaped, and bytes that are not valid UTF-8 become
// U+FFFD, as encoding/json does.
func appendJSONStringContent(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
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
	}
	return append(dst, s[start:]...)
}

// appendEnvelope appends ev as its JSON envelope (spec/events.md, "Envelope") on one
// line. Event data is stored as the engine encoded it (compact JSON); data holding a line
// break is compacted first, so that the envelope always fits one SSE data line.
func appendEnvelope(dst []byte, ev *protocol.Event) []byte {
	dst = append(dst, `{"execution_id":`...)
	dst = appendJSONString(dst, ev.ExecutionID)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendUint(dst, ev.Sequence, 10)
	dst = append(dst, `,"timestamp":"`...)
	dst = ev.Timestamp.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","type":`...)
	dst = appendJSONString(dst, string(ev.Type))
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
