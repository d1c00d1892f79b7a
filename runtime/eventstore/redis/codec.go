package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// formatTime encodes t for storage: RFC 3339 with nanoseconds keeps the instant exactly
// and stays readable in redis-cli.
func formatTime(t time.Time) string {
	return t.Format(time.RFC3339Nano)
}

// parseTime decodes a value written by formatTime, as a Redis reply element.
func parseTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("time is %T, want string", v)
	}
	return time.Parse(time.RFC3339Nano, s)
}

// errCorrupt reports a reply that this package cannot have written.
var errCorrupt = errors.New("unexpected reply shape")

// stored is an event as the store keeps it, fields still as text.
type stored struct {
	seq     uint64
	typ, ts string
	data    string
	hasData bool
}

// decodeEvents turns an XRANGE reply into the events of execution id.
func decodeEvents(id string, reply []any) ([]protocol.Event, error) {
	if len(reply) == 0 {
		return nil, nil
	}
	entries := make([]stored, len(reply))
	for i, r := range reply {
		entry, ok := r.([]any)
		if !ok || len(entry) != 2 {
			return nil, fmt.Errorf("stream entry %d: %w", i, errCorrupt)
		}
		entryID, _ := entry[0].(string)
		fields, ok := entry[1].([]any)
		seq, _, found := strings.Cut(entryID, "-")
		if !ok || !found {
			return nil, fmt.Errorf("stream entry %q: %w", entryID, errCorrupt)
		}
		e := &entries[i]
		var err error
		if e.seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
			return nil, fmt.Errorf("stream entry %q: %w", entryID, err)
		}
		for j := 0; j+1 < len(fields); j += 2 {
			name, _ := fields[j].(string)
			value, _ := fields[j+1].(string)
			switch name {
			case "type":
				e.typ = value
			case "timestamp":
				e.ts = value
			case "data":
				e.data, e.hasData = value, true
			}
		}
	}
	return toEvents(id, entries)
}

// decodeAnnounced turns the events wake-ups carried (see appendScript) into the events
// of execution id.
func decodeAnnounced(id string, as []announcement) ([]protocol.Event, error) {
	if len(as) == 0 {
		return nil, nil
	}
	entries := make([]stored, len(as))
	for i, a := range as {
		typ, rest, ok1 := strings.Cut(a.event, "\n")
		ts, data, ok2 := strings.Cut(rest, "\n")
		if !ok1 || !ok2 || data == "" || (data[0] != '0' && data[0] != '1') || (data[0] == '0' && len(data) > 1) {
			return nil, fmt.Errorf("announced event %d: %w", a.seq, errCorrupt)
		}
		entries[i] = stored{seq: a.seq, typ: typ, ts: ts, data: data[1:], hasData: data[0] == '1'}
	}
	return toEvents(id, entries)
}

// toEvents makes the events of execution id from stored ones. Every payload is copied
// into one buffer: two allocations for the copies of the whole batch.
func toEvents(id string, entries []stored) ([]protocol.Event, error) {
	size := 0
	for _, e := range entries {
		size += len(e.data)
	}
	buf := make([]byte, 0, size)
	out := make([]protocol.Event, len(entries))
	for i, e := range entries {
		ts, err := time.Parse(time.RFC3339Nano, e.ts)
		if err != nil {
			return nil, fmt.Errorf("event %d timestamp: %w", e.seq, err)
		}
		out[i] = protocol.Event{
			ExecutionID: id,
			Sequence:    e.seq,
			Timestamp:   ts,
			Type:        protocol.EventType(e.typ),
		}
		if e.hasData {
			start := len(buf)
			buf = append(buf, e.data...)
			// Cap at the end of this payload so appending to it cannot reach the next.
			out[i].Data = buf[start:len(buf):len(buf)]
		}
	}
	return out, nil
}

// decodeReservation turns reserveScript's reply for an existing reservation into the
// Reservation and whether it is the caller's own.
func decodeReservation(reply any) (eventstore.Reservation, bool, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 6 {
		return eventstore.Reservation{}, false, fmt.Errorf("reservation: %w", errCorrupt)
	}
	mine, ok := vals[0].(int64)
	if !ok {
		return eventstore.Reservation{}, false, fmt.Errorf("reservation: %w", errCorrupt)
	}
	var r eventstore.Reservation
	r.Fingerprint, _ = vals[1].(string)
	r.ExecutionID, _ = vals[2].(string)
	created, err := parseTime(vals[3])
	if err != nil {
		return eventstore.Reservation{}, false, fmt.Errorf("reservation created_at: %w", err)
	}
	r.CreatedAt = created
	if resp, ok := vals[4].(string); ok {
		r.Response = []byte(resp)
	}
	r.Scope, _ = vals[5].(string)
	return r, mine == 1, nil
}
