package redis

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Fold operations of appendScript: what one event changes in the execution's status
// and result snapshot, decoded from its data here, once, so that the script only
// applies strings with O(delta) commands and never parses JSON.
const (
	opNone      = "none"      // the event only advances the sequence and the state
	opInvalid   = "invalid"   // the data does not decode: check, then refuse (-3)
	opText      = "text"      // output index, part type, text
	opStart     = "start"     // call id, index, name
	opArgs      = "args"      // call id, fragment
	opResult    = "result"    // result ("" keeps it), artifacts as a JSON array ("": none)
	opUsage     = "usage"     // usage entries as a JSON array ("": none)
	opRoute     = "route"     // route as JSON
	opCompleted = "completed" // finish reason
	opFailed    = "failed"    // error as JSON ("": none)
)

// foldArgs returns appendScript's fold arguments for ev, whose data protocol.CheckData
// admitted: the execution's state after it, the operation and its operands. It decodes
// ev.Data as protocol.Snapshot.Apply does (the same types, protocol.UnmarshalData), so
// what it folds is what Apply folds.
func foldArgs(ev protocol.Event) (args []any, err error) {
	args = append(make([]any, 0, 5), string(protocol.StatusAfter(ev.Type)))

	switch ev.Type {
	case protocol.EventOutputDelta:
		d, err := protocol.DecodeDelta(ev.Data)
		if err != nil {
			return nil, err
		}
		if d.Type == "" {
			d.Type = "text" // as Apply names a part whose first delta has no type
		}
		return append(args, opText, strconv.Itoa(d.Index), d.Type, d.Text), nil
	case protocol.EventToolCallStarted:
		var d protocol.ToolCallStartedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		return append(args, opStart, d.CallID, strconv.Itoa(d.Index), d.Name), nil
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		return append(args, opArgs, d.CallID, d.Delta), nil
	case protocol.EventOutputResult:
		var d protocol.OutputResultData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		artifacts, err := jsonList(d.Artifacts)
		if err != nil {
			return nil, err
		}
		return append(args, opResult, []byte(d.Result), artifacts), nil
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		usage, err := jsonList(d.Usage)
		if err != nil {
			return nil, err
		}
		return append(args, opUsage, usage), nil
	case protocol.EventRouteSelected:
		var d protocol.RouteSelectedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		route, err := json.Marshal(protocol.RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model})
		if err != nil {
			return nil, err
		}
		return append(args, opRoute, route), nil
	case protocol.EventCompleted:
		var d protocol.CompletedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		return append(args, opCompleted, d.FinishReason), nil
	case protocol.EventFailed:
		var d protocol.FailedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return nil, err
		}
		var failure []byte
		if d.Error != nil {
			if failure, err = json.Marshal(d.Error); err != nil {
				return nil, err
			}
		}
		return append(args, opFailed, failure), nil
	}
	return append(args, opNone), nil
}

// jsonList encodes a non-empty list; an empty one is "" (nothing to append). The values
// were just decoded from JSON, so they encode back to the same values.
func jsonList[T any](list []T) ([]byte, error) {
	if len(list) == 0 {
		return nil, nil
	}
	return json.Marshal(list)
}

// decodeSnapshot builds execution id's snapshot from snapshotScript's reply:
// {last_sequence, state, finish_reason, error, result, parts, calls, usage, artifacts},
// where parts holds (index, type, text) triples, calls (call id, "<n> <index> <order>
// <name>", arguments) triples, and usage and artifacts one JSON array per event.
func decodeSnapshot(id string, reply []any) (protocol.Snapshot, error) {
	if len(reply) != 9 {
		return protocol.Snapshot{}, fmt.Errorf("snapshot: %w", errCorrupt)
	}
	s := protocol.NewSnapshot(id)
	last, _ := reply[0].(string)
	var err error
	if s.Sequence, err = strconv.ParseUint(last, 10, 64); err != nil {
		return protocol.Snapshot{}, fmt.Errorf("snapshot sequence: %w", err)
	}
	if state, ok := reply[1].(string); ok {
		s.Status = protocol.Status(state)
	}
	s.FinishReason, _ = reply[2].(string)
	if failure, ok := reply[3].(string); ok {
		if err := json.Unmarshal([]byte(failure), &s.Error); err != nil {
			return protocol.Snapshot{}, fmt.Errorf("snapshot error: %w", err)
		}
	}
	if result, ok := reply[4].(string); ok {
		s.Result = json.RawMessage(result)
	}

	parts, _ := reply[5].([]any)
	for i := 0; i+2 < len(parts); i += 3 {
		index, _ := parts[i].(string)
		p := protocol.OutputPart{}
		if p.Index, err = strconv.Atoi(index); err != nil {
			return protocol.Snapshot{}, fmt.Errorf("snapshot output index %q: %w", index, errCorrupt)
		}
		p.Type, _ = parts[i+1].(string)
		p.Text, _ = parts[i+2].(string)
		s.Output = append(s.Output, p)
	}
	slices.SortFunc(s.Output, func(a, b protocol.OutputPart) int { return cmp.Compare(a.Index, b.Index) })

	calls, _ := reply[6].([]any)
	orders := make(map[string]uint64, len(calls)/3)
	for i := 0; i+2 < len(calls); i += 3 {
		c := protocol.ToolCall{}
		c.CallID, _ = calls[i].(string)
		packed, _ := calls[i+1].(string)
		c.Arguments, _ = calls[i+2].(string)
		f := strings.SplitN(packed, " ", 4)
		if len(f) != 4 {
			return protocol.Snapshot{}, fmt.Errorf("snapshot tool call %q: %w", c.CallID, errCorrupt)
		}
		order, err1 := strconv.ParseUint(f[2], 10, 64)
		index, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return protocol.Snapshot{}, fmt.Errorf("snapshot tool call %q: %w", c.CallID, errCorrupt)
		}
		c.Index, c.Name = index, f[3]
		orders[c.CallID] = order
		s.ToolCalls = append(s.ToolCalls, c)
	}
	// Apply keeps calls ordered by index and, within an index, by when each was last
	// (re)inserted: its first event, or the tool.call.started that moved it.
	slices.SortFunc(s.ToolCalls, func(a, b protocol.ToolCall) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(orders[a.CallID], orders[b.CallID]))
	})

	if err := appendLists(&s.Usage, reply[7]); err != nil {
		return protocol.Snapshot{}, fmt.Errorf("snapshot usage: %w", err)
	}
	if err := appendLists(&s.Artifacts, reply[8]); err != nil {
		return protocol.Snapshot{}, fmt.Errorf("snapshot artifacts: %w", err)
	}
	return s, nil
}

// appendLists decodes each JSON array of a list reply and appends its elements to dst.
func appendLists[T any](dst *[]T, reply any) error {
	lists, _ := reply.([]any)
	for _, l := range lists {
		text, _ := l.(string)
		var items []T
		if err := json.Unmarshal([]byte(text), &items); err != nil {
			return err
		}
		*dst = append(*dst, items...)
	}
	return nil
}
