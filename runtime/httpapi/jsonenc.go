package httpapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The hand-written encoders of this package produce the same JSON values as
// encoding/json for the few shapes on hot paths (the 202 body, the event envelope of
// every SSE frame), without reflection and with no allocation beyond the caller's
// buffer; their strings are encoded by protocol.AppendJSONString.

// appendEnvelope appends ev as its JSON envelope (spec/events.md, "Envelope") on one
// line. Event data is stored as the engine encoded it (compact JSON); data holding a line
// break is compacted first, so that the envelope always fits one SSE data line.
func appendEnvelope(dst []byte, ev *protocol.Event) []byte {
	dst = append(dst, `{"execution_id":`...)
	dst = protocol.AppendJSONString(dst, ev.ExecutionID)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendUint(dst, ev.Sequence, 10)
	dst = append(dst, `,"timestamp":"`...)
	dst = ev.Timestamp.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","type":`...)
	dst = protocol.AppendJSONString(dst, string(ev.Type))
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
