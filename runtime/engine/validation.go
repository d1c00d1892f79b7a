package engine

import (
	"bytes"
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

// encodeEvents checks and encodes data for typ (checkData) and appends to dst what to
// record: one event's data, or — for a text or tool-argument delta whose encoding is larger
// than protocol.MaxEventBytes — the delta split at rune boundaries into pieces that fit,
// in order, which the result snapshot concatenates back into the same text.
// Any other event larger than protocol.MaxEventBytes gives ErrOutputTooLarge. outBytes
// is the materialized output the event adds (spec/http-api.md, "Limits").
func encodeEvents(dst []json.RawMessage, typ protocol.EventType, data any, log logr.Logger) (raws []json.RawMessage, v any, outBytes int64, err error) {
	v, raw, err := checkData(typ, data, log)
	if err != nil || raw == nil {
		return nil, nil, 0, err
	}
	tooLarge := len(raw) > protocol.MaxEventBytes
	switch d := v.(type) {
	case protocol.OutputDeltaData:
		outBytes = int64(len(d.Text))
		if tooLarge {
			raws = pieces(dst, d.Text, func(p string) any { d.Text = p; return d })
		}
	case protocol.ToolCallArgsDeltaData:
		outBytes = int64(len(d.Delta))
		if tooLarge {
			raws = pieces(dst, d.Delta, func(p string) any { d.Delta = p; return d })
		}
	case protocol.OutputResultData:
		outBytes = int64(len(d.Result))
	}
	switch {
	case raws != nil:
		return raws, v, outBytes, nil
	case tooLarge:
		return nil, nil, 0, fmt.Errorf("emit %s: %d bytes of data: %w", typ, len(raw), ErrOutputTooLarge)
	}
	return append(dst, raw), v, outBytes, nil
}

// pieces appends to dst the encoded payloads with(p) for each piece p of s, in order
// (see split).
func pieces(dst []json.RawMessage, s string, with func(piece string) any) []json.RawMessage {
	for _, p := range split(s, maxPieceText) {
		dst = append(dst, mustMarshal(with(p)))
	}
	return dst
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

// mustMarshal encodes a payload that has just been encoded whole; a piece of it cannot
// fail where the whole did not.
func mustMarshal(v any) json.RawMessage {
	b, err := encodeData(v)
	if err != nil {
		panic("engine: re-encoding a checked payload failed: " + err.Error())
	}
	return b
}

// checkData checks data against typ and returns the checked (possibly normalised) value
// and its encoding. It returns nil data and no error when nothing is to be recorded
// (usage whose every entry was dropped). The checks keep every recorded event foldable by
// protocol.Snapshot.Apply, which stops at an event it cannot decode, and keep the
// envelope fields out of adapters' hands. Error messages name the type and the broken
// rule, never the data.
func checkData(typ protocol.EventType, data any, log logr.Logger) (any, json.RawMessage, error) {
	var (
		v   any
		err error
	)
	switch typ {
	case protocol.EventOutputDelta:
		v, err = checked(data, func(d protocol.OutputDeltaData) (protocol.OutputDeltaData, string) {
			if d.Type == "" {
				d.Type = "text" // the only output type; adapters may leave it out
			}
			switch {
			case d.Type != "text":
				return d, "type must be text"
			case d.Index < 0:
				return d, "index must not be negative"
			}
			return d, ""
		})
	case protocol.EventToolCallStarted:
		v, err = checked(data, func(d protocol.ToolCallStartedData) (protocol.ToolCallStartedData, string) {
			switch {
			case d.CallID == "" || d.Name == "":
				return d, "call_id and name are required"
			case d.Index < 0:
				return d, "index must not be negative"
			}
			return d, ""
		})
	case protocol.EventToolCallArgsDelta:
		v, err = checked(data, func(d protocol.ToolCallArgsDeltaData) (protocol.ToolCallArgsDeltaData, string) {
			if d.CallID == "" {
				return d, "call_id is required"
			}
			return d, ""
		})
	case protocol.EventProgress:
		v, err = checked(data, func(d protocol.ProgressData) (protocol.ProgressData, string) {
			switch {
			case d.Stage != protocol.StageQueued && d.Stage != protocol.StageRunning:
				return d, "stage must be queued or running"
			case d.Percent != nil && !(*d.Percent >= 0 && *d.Percent <= 100):
				return d, "percent must be between 0 and 100"
			case d.QueuePosition != nil && *d.QueuePosition < 0:
				return d, "queue_position must not be negative"
			}
			return d, ""
		})
	case protocol.EventOutputResult:
		v, err = checked(data, func(d protocol.OutputResultData) (protocol.OutputResultData, string) {
			if d.Artifacts == nil {
				d.Artifacts = []protocol.Artifact{} // the contract shows a list, never null
			}
			for _, a := range d.Artifacts {
				if a.URI == "" || a.MediaType == "" {
					return d, "artifacts need uri and media_type"
				}
			}
			return d, ""
		})
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		d, err = convert[protocol.UsageReportedData](data)
		if err == nil {
			d.Usage = validUsage(d.Usage, log)
			if len(d.Usage) == 0 {
				return nil, nil, nil
			}
			v = d
		}
	default:
		return nil, nil, fmt.Errorf("emit %s: adapters may not emit this type: %w", typ, ErrInvalidEvent)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("emit %s: %w", typ, err)
	}
	raw, err := encodeData(v)
	if err != nil {
		return nil, nil, fmt.Errorf("emit %s: data cannot be encoded: %w", typ, ErrInvalidEvent)
	}
	return v, raw, nil
}

// encodeData encodes a checked payload as encoding/json does: output.delta, recorded for
// every token, by hand (protocol.AppendDelta, the same bytes without reflection), any
// other with encoding/json.
func encodeData(v any) (json.RawMessage, error) {
	if d, ok := v.(protocol.OutputDeltaData); ok {
		return protocol.AppendDelta(make([]byte, 0, len(d.Type)+len(d.Text)+32), d), nil
	}
	return json.Marshal(v)
}

// checked converts data to T and applies check, which may normalise the value and
// returns a non-empty reason when it is invalid.
//
// The value goes in and out of check rather than by pointer, which would move it to the
// heap: this runs for every event an adapter emits.
func checked[T any](data any, check func(T) (T, string)) (T, error) {
	d, err := convert[T](data)
	if err != nil {
		return d, err
	}
	d, reason := check(d)
	if reason != "" {
		return d, fmt.Errorf("%s: %w", reason, ErrInvalidEvent)
	}
	return d, nil
}

// convert returns data as T. The protocol payload types (value or pointer) are taken as
// they are, without a JSON round trip, since that is what adapters emit on the hot path;
// anything else is encoded and decoded strictly (no unknown fields).
func convert[T any](data any) (T, error) {
	switch d := data.(type) {
	case T:
		return d, nil
	case *T:
		if d != nil {
			return *d, nil
		}
		var zero T
		return zero, fmt.Errorf("data is nil: %w", ErrInvalidEvent)
	}
	return decodeStrict[T](data)
}

// decodeStrict is convert's slow path, apart so that the fast path does not allocate.
func decodeStrict[T any](data any) (T, error) {
	var out T
	b, err := json.Marshal(data)
	if err != nil {
		return out, fmt.Errorf("data cannot be encoded: %w", ErrInvalidEvent)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return out, fmt.Errorf("data does not have the type's shape: %w", ErrInvalidEvent)
	}
	return out, nil
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
