package protocol

import (
	"encoding/json"
	"strconv"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// UnmarshalData decodes an event's data into v, a pointer to a zero payload value, as
// every fold does (Apply here, the EventStores' own): under encoding/json's rules —
// member names matched without regard to case, the last of a repeated member winning,
// unknown members ignored, invalid UTF-8 replaced by U+FFFD — so that all of them accept
// and refuse the same events and fold the same values.
//
// Every event is decoded once more when it is stored, so this is on the hot path. The
// payloads an execution records every time — output.delta, route.selected,
// usage.reported, execution.completed — are taken in the form the engine writes them
// without reflection (decodePlain); the rest, and anything else in those, are decoded
// with the v1 API of github.com/go-json-experiment/json: encoding/json's rules on the
// encoding/json/v2 engine, the mirror of what the standard library becomes in Go 1.27,
// about twice as fast as encoding/json and without its allocations. FuzzUnmarshalData
// checks that both agree with encoding/json.
func UnmarshalData(data []byte, v any) error {
	if decodePlain(data, v) {
		return nil
	}
	return jsonv1.Unmarshal(data, v)
}

// DecodeEvent decodes one event envelope — an SSE frame's data, an element of a polled
// page — with UnmarshalData's rules and engine: a client decodes one per frame.
func DecodeEvent(data []byte) (Event, error) {
	var ev Event
	err := jsonv1.Unmarshal(data, &ev)
	return ev, err
}

// DeltaView is the data of output.delta as a fold reads it: Text may share the bytes it
// was decoded from, so that a fold that only copies the text elsewhere (the status's
// output text, a script argument) makes no string of it first.
type DeltaView struct {
	Index int
	Type  string
	Text  []byte
}

// DecodeDelta is UnmarshalData for output.delta, the most frequent event, into a view:
// for its usual form (keys as the engine writes them, a text without escapes) it
// allocates nothing, and Text shares data's bytes. The caller must not change data
// while it uses the view.
func DecodeDelta(data []byte) (DeltaView, error) {
	if json.Valid(data) {
		c := jsonCursor{data: data}
		if v, ok := c.plainDelta(); ok && c.peek() == 0 {
			return v, nil
		}
	}
	var slow OutputDeltaData // escapes to the heap, on this path only
	if err := jsonv1.Unmarshal(data, &slow); err != nil {
		return DeltaView{}, err
	}
	return DeltaView{Index: slow.Index, Type: slow.Type, Text: []byte(slow.Text)}, nil
}

// decodePlain decodes data into v when v is one of the payloads every execution records
// and data is in the plain form the engine writes: an object whose keys are the field
// names exactly as the struct tags spell them, each at most once, with values of the
// field's JSON type (a small non-negative integer for an int). It reports false, having
// left v as it was, for anything else — another payload type, an unknown or differently
// cased key, a repeated key, null, a number out of range — and encoding/json's rules
// then decide (UnmarshalData), so both give the same result for every input.
//
// It is written by hand, on the request decoder's cursor, because reflection-based
// decoding of these few small payloads was a tenth of the runtime's CPU time per
// streamed execution and most of its goroutines' stack growth (spec/performance.md,
// "The hot path").
func decodePlain(data []byte, v any) bool {
	if !json.Valid(data) {
		return false
	}
	c := jsonCursor{data: data}
	var ok bool
	switch d := v.(type) {
	case *OutputDeltaData:
		ok = c.plainDeltaData(d)
	case *RouteSelectedData:
		ok = c.plainRouteSelected(d)
	case *CompletedData:
		ok = c.plainCompleted(d)
	case *UsageReportedData:
		ok = c.plainUsageReported(d)
	}
	return ok && c.peek() == 0
}

// The decoders of decodePlain's payloads below each decode one payload at the cursor
// into d and leave d as it was when the payload is not plain. Each is a function of its
// own, so that only the frame of the one that runs is on the stack: the folds run on the
// engine's execution goroutine, whose stack starts small, and one frame with the
// variables of all four made it grow.

func (c *jsonCursor) plainDeltaData(d *OutputDeltaData) bool {
	v, ok := c.plainDelta()
	if ok {
		*d = OutputDeltaData{Index: v.Index, Type: v.Type, Text: string(v.Text)}
	}
	return ok
}

func (c *jsonCursor) plainRouteSelected(d *RouteSelectedData) bool {
	var out RouteSelectedData
	ok := c.plainObject([]string{"attempt", "deployment", "provider", "model"}, func(field int) bool {
		switch field {
		case 0:
			return c.plainInt(&out.Attempt)
		case 1:
			return c.plainString(&out.Deployment)
		case 2:
			return c.plainString(&out.Provider)
		}
		return c.plainString(&out.Model)
	})
	if ok {
		*d = out
	}
	return ok
}

func (c *jsonCursor) plainCompleted(d *CompletedData) bool {
	var out CompletedData
	ok := c.plainObject([]string{"finish_reason"}, func(int) bool { return c.plainString(&out.FinishReason) })
	if ok {
		*d = out
	}
	return ok
}

func (c *jsonCursor) plainUsageReported(d *UsageReportedData) bool {
	var out UsageReportedData
	ok := c.plainObject([]string{"usage"}, func(int) bool {
		if c.peek() != '[' {
			return false
		}
		out.Usage = []Usage{} // encoding/json makes [] an empty, non-nil slice
		entries := true
		_ = c.elements(func() error {
			var u Usage
			entries = c.plainObject([]string{"unit", "quantity", "source"}, func(field int) bool {
				switch field {
				case 0:
					return c.plainInterned(&u.Unit, usageWords)
				case 1:
					return c.plainFloat(&u.Quantity)
				}
				return c.plainInterned(&u.Source, usageWords)
			})
			if !entries {
				return errStop
			}
			out.Usage = append(out.Usage, u)
			return nil
		})
		return entries
	})
	if ok {
		*d = out
	}
	return ok
}

// plainDelta decodes output.delta's data at the cursor in the plain form (see
// decodePlain). Text shares the document's bytes when it has no escapes; the part type
// the engine always writes, "text", is the constant rather than a copy.
func (c *jsonCursor) plainDelta() (DeltaView, bool) {
	var v DeltaView
	ok := c.plainObject([]string{"index", "type", "text"}, func(field int) bool {
		switch field {
		case 0:
			return c.plainInt(&v.Index)
		case 1:
			return c.plainInterned(&v.Type, deltaTypes)
		}
		if c.peek() != '"' {
			return false
		}
		raw, plain := c.rawString()
		if plain {
			v.Text = raw[1 : len(raw)-1]
		} else {
			v.Text = []byte(unquote(raw))
		}
		return true
	})
	return v, ok
}

// plainObject walks the object at the cursor when its keys are among names, exactly as
// spelled there, each at most once; decode consumes the value of names[field] and reports
// whether it was plain. The walk stops at the first thing that is not (errStop), leaving
// the cursor anywhere: the caller then drops it.
func (c *jsonCursor) plainObject(names []string, decode func(field int) bool) bool {
	if c.peek() != '{' {
		return false
	}
	var seen uint64
	plain := true
	_ = c.members(func(key []byte) error {
		field := -1
		for i, name := range names {
			if string(key) == name {
				field = i
				break
			}
		}
		if field < 0 || seen&(1<<field) != 0 || !decode(field) {
			plain = false
			return errStop
		}
		seen |= 1 << field
		return nil
	})
	return plain
}

// plainString decodes a string value.
func (c *jsonCursor) plainString(dst *string) bool {
	if c.peek() != '"' {
		return false
	}
	*dst = c.str()
	return true
}

// Values of string fields that the folds decode at every execution, returned as these
// constants rather than as a copy of the data (plainInterned).
var (
	deltaTypes = []string{"text"}
	usageWords = []string{
		UnitInputTokens, UnitOutputTokens, UnitCacheReadTokens, UnitCacheWriteTokens,
		UnitReasoningTokens, SourceProvider, SourceRuntime, SourceDerived,
	}
)

// plainInterned is plainString for a field whose usual values are known: a value
// among known is that constant, without an allocation.
func (c *jsonCursor) plainInterned(dst *string, known []string) bool {
	if c.peek() != '"' {
		return false
	}
	raw, plain := c.rawString()
	if plain {
		for _, k := range known {
			if string(raw[1:len(raw)-1]) == k {
				*dst = k
				return true
			}
		}
	}
	*dst = stringValue(raw, plain)
	return true
}

// plainInt decodes a non-negative integer of at most nine digits without a leading zero,
// which any int holds.
func (c *jsonCursor) plainInt(dst *int) bool {
	if b := c.peek(); b < '0' || b > '9' {
		return false
	}
	n := c.number()
	if len(n) > 9 || (len(n) > 1 && n[0] == '0') {
		return false
	}
	v := 0
	for _, digit := range n {
		if digit < '0' || digit > '9' {
			return false // a fraction or an exponent
		}
		v = v*10 + int(digit-'0')
	}
	*dst = v
	return true
}

// plainFloat decodes a number as encoding/json does into a float64 (strconv.ParseFloat
// of its literal); one out of float64's range is left to encoding/json's error.
func (c *jsonCursor) plainFloat(dst *float64) bool {
	if !isNumberStart(c.peek()) {
		return false
	}
	f, err := strconv.ParseFloat(string(c.number()), 64)
	if err != nil {
		return false
	}
	*dst = f
	return true
}
