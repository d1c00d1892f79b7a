package protocol

import (
	"errors"
	"fmt"
)

// ErrInvalidData is wrapped by CheckData's refusals: an event's data does not decode as
// its type's payload.
var ErrInvalidData = errors.New("event data does not decode as its type's payload")

// CheckData reports whether data can be recorded as the data of an event of type typ:
// the data of every type that is folded — output.delta, tool.call.started,
// tool.call.arguments.delta, output.result, usage.reported, execution.completed and
// execution.failed into the result snapshot, route.selected into the execution's status
// — must decode as that type's payload (spec/events.md, "Event types") under
// UnmarshalData's rules. Apply refuses the same data of the types it folds, so a store
// that recorded such an event would hold a log no snapshot folds past: CheckData is the
// rule every EventStore checks before it records an event. The engine, which records
// only payloads it encoded itself, never breaks it. The data of the other types, and of
// types this version does not know, is not looked at: they only advance the sequence. A
// refusal wraps ErrInvalidData and the decoding error; it names the type, never the data.
func CheckData(typ EventType, data []byte) error {
	var err error
	if typ == EventRouteSelected {
		var d RouteSelectedData
		err = UnmarshalData(data, &d)
	} else {
		err = decodeData(typ, data, nil)
	}
	if err != nil {
		return fmt.Errorf("%s data: %w: %w", typ, ErrInvalidData, err)
	}
	return nil
}
