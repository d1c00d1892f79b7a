package postgres

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The fold: what one event changes in the execution's status and snapshot, decoded
// from its data here, once, with the decoders protocol.Snapshot.Apply uses
// (protocol.DecodeDelta, protocol.UnmarshalData), so that what the store folds is what
// Apply folds. Append then writes only what the event changes, each with a statement
// whose cost is that of the change: a column of the execution's row, one chunk of a
// text (texts), one row of usage or artifacts (lists). The conformance suite checks
// after every append that Snapshot equals protocol.Materialize of the stored events.

// opKind is what an event changes beyond the sequence and the state.
type opKind int

const (
	opNone      opKind = iota // only the sequence, the state and updated_at
	opText                    // output part index: text
	opStart                   // tool call: started at index, with name
	opArgs                    // tool call: an argument fragment
	opResult                  // result (if any) and artifacts
	opUsage                   // usage entries
	opRoute                   // attempts and route
	opCompleted               // finish reason
	opFailed                  // error
)

// Text kinds and list kinds, as stored.
const (
	textOutput int16 = 0
	textArgs   int16 = 1
	listUsage  int16 = 0
	listArtifs int16 = 1
)

// foldOp is one event's fold.
type foldOp struct {
	kind     opKind
	state    protocol.Status
	index    int    // opText, opStart
	partType string // opText
	text     []byte // opText: the delta's text; opArgs: the fragment
	callID   string // opStart, opArgs
	name     string // opStart
	result   []byte // opResult: the result, nil to keep the last one
	items    []byte // opResult: artifacts, opUsage: usage, as a JSON array; nil for none
	route    []byte // opRoute: the route as JSON
	finish   string // opCompleted
	failure  []byte // opFailed: the error as JSON; nil for none
	output   bool   // an output or tool event (protocol.EventType.IsOutput)
	outBytes int64  // the output bytes it adds (Status.OutputBytes)
}

// decodeFold decodes ev's data into its fold, or returns the error of data that does
// not decode as its type's.
func decodeFold(ev *protocol.Event) (foldOp, error) {
	op := foldOp{state: protocol.StatusAfter(ev.Type), output: ev.Type.IsOutput()}
	if err := protocol.CheckData(ev.Type, ev.Data); err != nil {
		return op, err
	}
	switch ev.Type {
	case protocol.EventOutputDelta:
		d, err := protocol.DecodeDelta(ev.Data)
		if err != nil {
			return op, err
		}
		op.kind, op.index, op.partType, op.text = opText, d.Index, d.Type, d.Text
		if op.partType == "" {
			op.partType = "text" // as Apply names a part whose first delta has no type
		}
		op.outBytes = int64(len(d.Text))
	case protocol.EventToolCallStarted:
		var d protocol.ToolCallStartedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		op.kind, op.callID, op.index, op.name = opStart, d.CallID, d.Index, d.Name
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		op.kind, op.callID, op.text = opArgs, d.CallID, []byte(d.Delta)
		op.outBytes = int64(len(d.Delta))
	case protocol.EventOutputResult:
		var d protocol.OutputResultData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		op.kind = opResult
		if len(d.Result) > 0 {
			op.result = d.Result
		}
		var err error
		if op.items, err = jsonList(d.Artifacts); err != nil {
			return op, err
		}
		op.outBytes = int64(len(d.Result))
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		op.kind = opUsage
		var err error
		if op.items, err = jsonList(d.Usage); err != nil {
			return op, err
		}
	case protocol.EventRouteSelected:
		var d protocol.RouteSelectedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		route, err := json.Marshal(protocol.RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model})
		if err != nil {
			return op, err
		}
		op.kind, op.route = opRoute, route
	case protocol.EventCompleted:
		var d protocol.CompletedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		op.kind, op.finish = opCompleted, d.FinishReason
	case protocol.EventFailed:
		var d protocol.FailedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return op, err
		}
		op.kind = opFailed
		if d.Error != nil {
			failure, err := json.Marshal(d.Error)
			if err != nil {
				return op, err
			}
			op.failure = failure
		}
	}
	return op, nil
}

// jsonList encodes a non-empty list; an empty one is nil (nothing to store). The values
// were just decoded from JSON, so they encode back to the same values.
func jsonList[T any](list []T) ([]byte, error) {
	if len(list) == 0 {
		return nil, nil
	}
	return json.Marshal(list)
}

// storedCall is a tool call as Snapshot reads it back, with the order Apply keeps
// calls of one index in.
type storedCall struct {
	call protocol.ToolCall
	ord  int64
}

// sortCalls orders calls as Apply does: by index and, within an index, by when each was
// last (re)inserted: its first event, or the tool.call.started that moved it.
func sortCalls(calls []storedCall) []protocol.ToolCall {
	slices.SortFunc(calls, func(a, b storedCall) int {
		return cmp.Or(cmp.Compare(a.call.Index, b.call.Index), cmp.Compare(a.ord, b.ord))
	})
	out := make([]protocol.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = c.call
	}
	return out
}
