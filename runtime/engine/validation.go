package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// maxPieceText bounds the text of one piece of a split delta. JSON escaping makes at
// most six bytes of one (a control character as \u00XX), so a piece always encodes
// within protocol.MaxEventBytes, envelope fields included.
const maxPieceText = protocol.MaxEventBytes / 8

// The encoders below check one emitted payload by the rules of spec/events.md ("Event
// types") that the Emitter documents, encode it and append to dst what to record: its
// data, or — for a text or tool-argument delta whose encoding is larger than
// protocol.MaxEventBytes — the delta split at rune boundaries into pieces that fit, in
// order, which the result snapshot concatenates back into the same text. Any other event
// larger than protocol.MaxEventBytes gives ErrOutputTooLarge. Error messages name the
// type and the broken rule, never the data. Payloads are taken by value: a pointer would
// move every event's payload to the heap.

// encodeText encodes an output.delta of text at output part index.
func encodeText(dst []json.RawMessage, index int, text string) ([]json.RawMessage, error) {
	if index < 0 {
		return nil, invalidEvent(protocol.EventOutputDelta, "index must not be negative")
	}
	d := protocol.OutputDeltaData{Index: index, Type: "text", Text: text}
	raw := appendDelta(d)
	if len(raw) <= protocol.MaxEventBytes {
		return append(dst, raw), nil
	}
	for _, p := range split(text, maxPieceText) {
		d.Text = p
		dst = append(dst, appendDelta(d))
	}
	return dst, nil
}

// appendDelta encodes an output.delta, recorded for every token, as encoding/json would
// but without reflection (protocol.AppendDelta).
func appendDelta(d protocol.OutputDeltaData) json.RawMessage {
	return protocol.AppendDelta(make([]byte, 0, len(d.Type)+len(d.Text)+32), d)
}

// encodeToolStarted encodes a tool.call.started.
func encodeToolStarted(dst []json.RawMessage, index int, callID, name string) ([]json.RawMessage, error) {
	switch {
	case callID == "" || name == "":
		return nil, invalidEvent(protocol.EventToolCallStarted, "call_id and name are required")
	case index < 0:
		return nil, invalidEvent(protocol.EventToolCallStarted, "index must not be negative")
	}
	return encodeOne(dst, protocol.EventToolCallStarted, protocol.ToolCallStartedData{Index: index, CallID: callID, Name: name})
}

// encodeToolArgs encodes a tool.call.arguments.delta.
func encodeToolArgs(dst []json.RawMessage, callID, delta string) ([]json.RawMessage, error) {
	if callID == "" {
		return nil, invalidEvent(protocol.EventToolCallArgsDelta, "call_id is required")
	}
	d := protocol.ToolCallArgsDeltaData{CallID: callID, Delta: delta}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, unencodable(protocol.EventToolCallArgsDelta)
	}
	if len(raw) <= protocol.MaxEventBytes {
		return append(dst, raw), nil
	}
	for _, p := range split(delta, maxPieceText) {
		d.Delta = p
		dst = append(dst, mustMarshal(d))
	}
	return dst, nil
}

// encodeProgress encodes an execution.progress.
func encodeProgress(dst []json.RawMessage, d protocol.ProgressData) ([]json.RawMessage, error) {
	switch {
	case d.Stage != protocol.StageQueued && d.Stage != protocol.StageRunning:
		return nil, invalidEvent(protocol.EventProgress, "stage must be queued or running")
	case d.Percent != nil && !(*d.Percent >= 0 && *d.Percent <= 100):
		return nil, invalidEvent(protocol.EventProgress, "percent must be between 0 and 100")
	case d.QueuePosition != nil && *d.QueuePosition < 0:
		return nil, invalidEvent(protocol.EventProgress, "queue_position must not be negative")
	}
	return encodeOne(dst, protocol.EventProgress, d)
}

// encodeResult encodes an output.result; its artifacts are a list, never null.
func encodeResult(dst []json.RawMessage, d protocol.OutputResultData) ([]json.RawMessage, error) {
	if d.Artifacts == nil {
		d.Artifacts = []protocol.Artifact{} // the contract shows a list, never null
	}
	for _, a := range d.Artifacts {
		if a.URI == "" || a.MediaType == "" {
			return nil, invalidEvent(protocol.EventOutputResult, "artifacts need uri and media_type")
		}
	}
	return encodeOne(dst, protocol.EventOutputResult, d)
}

// encodeUsage encodes a usage.reported of valid entries (validUsage).
func encodeUsage(dst []json.RawMessage, usage []protocol.Usage) ([]json.RawMessage, error) {
	return encodeOne(dst, protocol.EventUsageReported, protocol.UsageReportedData{Usage: usage})
}

// encodeOne encodes a payload that is recorded whole.
func encodeOne(dst []json.RawMessage, typ protocol.EventType, v any) ([]json.RawMessage, error) {
	raw, err := json.Marshal(v)
	switch {
	case err != nil:
		return nil, unencodable(typ)
	case len(raw) > protocol.MaxEventBytes:
		return nil, fmt.Errorf("emit %s: %d bytes of data: %w", typ, len(raw), ErrOutputTooLarge)
	}
	return append(dst, raw), nil
}

// invalidEvent is the refusal of an emitted payload that breaks rule.
func invalidEvent(typ protocol.EventType, rule string) error {
	return fmt.Errorf("emit %s: %s: %w", typ, rule, ErrInvalidEvent)
}

// unencodable is the refusal of a payload that encoding/json cannot encode: an
// output.result whose result is not JSON.
func unencodable(typ protocol.EventType) error {
	return fmt.Errorf("emit %s: data cannot be encoded: %w", typ, ErrInvalidEvent)
}

// split cuts s into pieces of at most n bytes, never inside a UTF-8 sequence.
func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n // not UTF-8 at all: any cut is as good
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

// mustMarshal encodes a piece of a payload that has just been encoded whole, which cannot
// fail where the whole did not.
func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("engine: re-encoding a checked payload failed: " + err.Error())
	}
	return b
}

// validUsage returns the valid entries of us (spec/events.md, "usage.reported"), logging
// what it drops. It reuses us's array only when nothing is dropped, so the caller's slice
// is never changed.
func validUsage(us []protocol.Usage, log logr.Logger) []protocol.Usage {
	valid := 0
	for _, u := range us {
		if u.Valid() {
			valid++
		}
	}
	if valid == len(us) {
		return us
	}
	out := make([]protocol.Usage, 0, valid)
	for _, u := range us {
		if u.Valid() {
			out = append(out, u)
			continue
		}
		// The unit is the adapter's, not the caller's; the quantity is logged as text
		// because NaN and ±Inf have no JSON encoding.
		log.Info("Dropped invalid usage entry", "unit", u.Unit, "source", u.Source,
			"quantity", strconv.FormatFloat(u.Quantity, 'g', -1, 64))
	}
	return out
}
