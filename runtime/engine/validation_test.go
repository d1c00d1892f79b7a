package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestEncodedEventsAreRecordable: whatever the emitter's encoders accept they encode as
// data every EventStore records (protocol.CheckData), each piece of a split delta
// included, within protocol.MaxEventBytes.
func TestEncodedEventsAreRecordable(t *testing.T) {
	pct, pos := 40.0, 3
	large := strings.Repeat("\u0001é\"", protocol.MaxEventBytes/4) // escapes grow it past the bound
	encoders := []struct {
		typ    protocol.EventType
		encode func(dst []json.RawMessage) ([]json.RawMessage, error)
	}{
		{protocol.EventOutputDelta, func(dst []json.RawMessage) ([]json.RawMessage, error) { return encodeText(dst, 2, "Hel\u2028lo") }},
		{protocol.EventOutputDelta, func(dst []json.RawMessage) ([]json.RawMessage, error) { return encodeText(dst, 0, large) }},
		{protocol.EventToolCallStarted, func(dst []json.RawMessage) ([]json.RawMessage, error) {
			return encodeToolStarted(dst, 1, "call_1", "get_weather")
		}},
		{protocol.EventToolCallArgsDelta, func(dst []json.RawMessage) ([]json.RawMessage, error) {
			return encodeToolArgs(dst, "call_1", `{"city":`)
		}},
		{protocol.EventToolCallArgsDelta, func(dst []json.RawMessage) ([]json.RawMessage, error) {
			return encodeToolArgs(dst, "call_1", large)
		}},
		{protocol.EventProgress, func(dst []json.RawMessage) ([]json.RawMessage, error) {
			return encodeProgress(dst, protocol.ProgressData{Stage: protocol.StageQueued, Percent: &pct, QueuePosition: &pos, Message: "waiting"})
		}},
		{protocol.EventOutputResult, func(dst []json.RawMessage) ([]json.RawMessage, error) {
			return encodeResult(dst, protocol.OutputResultData{Result: json.RawMessage(` {"a": [1, 2]} `)})
		}},
		{protocol.EventUsageReported, func(dst []json.RawMessage) ([]json.RawMessage, error) {
			return encodeUsage(dst, []protocol.Usage{{Unit: protocol.UnitInputTokens, Quantity: 12, Source: protocol.SourceProvider}})
		}},
	}
	for _, e := range encoders {
		raws, err := e.encode(nil)
		if err != nil || len(raws) == 0 {
			t.Fatalf("encode %s: %d pieces, %v", e.typ, len(raws), err)
		}
		for i, raw := range raws {
			if len(raw) > protocol.MaxEventBytes {
				t.Errorf("%s piece %d: %d bytes, larger than an event may be", e.typ, i, len(raw))
			}
			if err := protocol.CheckData(e.typ, raw); err != nil {
				t.Errorf("%s piece %d: %v", e.typ, i, err)
			}
		}
	}
}
