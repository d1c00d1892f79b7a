package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Emitted is one event an adapter emitted: its type and its data as JSON.
type Emitted struct {
	Type protocol.EventType `json:"type"`
	Data json.RawMessage    `json:"data"`
}

// Encode returns typ with data encoded as JSON, for expectations written in tests. It
// panics if data cannot be encoded.
func Encode(typ protocol.EventType, data any) Emitted {
	b, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", typ, err))
	}
	return Emitted{Type: typ, Data: b}
}

// Recorder is an engine.Emitter that records what an adapter emits, each event's data
// encoded as the engine encodes it. It refuses data that does not encode (an
// output.result whose result is not JSON, a NaN quantity) with engine.ErrInvalidEvent;
// the engine's finer checks of the values are covered by running the adapter in a
// Harness. It records remote-job handles (RemoteJob) apart from the events, refusing
// them as the engine does.
//
// Its zero value is ready to use; it is safe for concurrent use.
type Recorder struct {
	// Context, if set, is the attempt's context: once it has ended every event is
	// refused with engine.ErrAttemptOver, as the engine does.
	Context context.Context
	// Types, if set, are the only types accepted, for an adapter that must not emit the
	// others.
	Types []protocol.EventType

	mu      sync.Mutex
	emitted []Emitted
	handles []json.RawMessage
}

var _ engine.Emitter = (*Recorder)(nil)

// Text implements engine.Emitter.
func (r *Recorder) Text(index int, text string) error {
	return r.record(protocol.EventOutputDelta, protocol.OutputDeltaData{Index: index, Type: "text", Text: text})
}

// ToolStarted implements engine.Emitter.
func (r *Recorder) ToolStarted(index int, callID, name string) error {
	return r.record(protocol.EventToolCallStarted, protocol.ToolCallStartedData{Index: index, CallID: callID, Name: name})
}

// ToolArgs implements engine.Emitter.
func (r *Recorder) ToolArgs(callID, delta string) error {
	return r.record(protocol.EventToolCallArgsDelta, protocol.ToolCallArgsDeltaData{CallID: callID, Delta: delta})
}

// Progress implements engine.Emitter.
func (r *Recorder) Progress(p protocol.ProgressData) error {
	return r.record(protocol.EventProgress, p)
}

// Result implements engine.Emitter.
func (r *Recorder) Result(res protocol.OutputResultData) error {
	return r.record(protocol.EventOutputResult, res)
}

// Usage implements engine.Emitter.
func (r *Recorder) Usage(usage []protocol.Usage) error {
	return r.record(protocol.EventUsageReported, protocol.UsageReportedData{Usage: usage})
}

// record records data, the payload of an event of type typ, as JSON, unless Context
// has ended, Types leaves typ out or data does not encode.
func (r *Recorder) record(typ protocol.EventType, data any) error {
	if r.Context != nil && r.Context.Err() != nil {
		return engine.ErrAttemptOver
	}
	if r.Types != nil && !slices.Contains(r.Types, typ) {
		return fmt.Errorf("emit %s: unexpected event type: %w", typ, engine.ErrInvalidEvent)
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("emit %s: data cannot be encoded: %w", typ, engine.ErrInvalidEvent)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emitted = append(r.emitted, Emitted{Type: typ, Data: b})
	return nil
}

// RemoteJob implements engine.Emitter. It refuses an empty, oversized
// (engine.MaxRemoteJobBytes) or invalid JSON handle with engine.ErrInvalidEvent, and any
// handle once Context has ended with engine.ErrAttemptOver.
func (r *Recorder) RemoteJob(handle json.RawMessage) error {
	if len(handle) == 0 || len(handle) > engine.MaxRemoteJobBytes || !json.Valid(handle) {
		return fmt.Errorf("remote job handle: empty, larger than %d bytes or not JSON: %w", engine.MaxRemoteJobBytes, engine.ErrInvalidEvent)
	}
	if r.Context != nil && r.Context.Err() != nil {
		return engine.ErrAttemptOver
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handles = append(r.handles, slices.Clone(handle))
	return nil
}

// Handles returns the remote-job handles recorded so far, in order (the engine keeps
// only the last); nil if none was.
func (r *Recorder) Handles() []json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handles)
}

// Recorded returns what was recorded so far, in order; nil if nothing was.
func (r *Recorder) Recorded() []Emitted {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.emitted)
}

// Terminal returns the terminal event the engine records for an attempt whose Execute
// returned out and err: execution.completed with out's finish reason, or execution.failed
// with err as a protocol error.
func Terminal(out engine.Outcome, err error) Emitted {
	if err != nil {
		return Encode(protocol.EventFailed, protocol.FailedData{Error: protocol.AsError(err)})
	}
	return Encode(protocol.EventCompleted, protocol.CompletedData{FinishReason: out.FinishReason})
}

// timestamp stamps every envelope: snapshots do not depend on it, and a fixed one keeps
// the events the same from run to run.
var timestamp = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

// Envelopes wraps emitted as the events of execution id, as the engine would record
// them: sequences from 1 without gaps and a UTC timestamp.
func Envelopes(id string, emitted ...Emitted) []protocol.Event {
	evs := make([]protocol.Event, len(emitted))
	for i, e := range emitted {
		evs[i] = protocol.Event{ExecutionID: id, Sequence: uint64(i + 1), Timestamp: timestamp, Type: e.Type, Data: e.Data}
	}
	return evs
}

// Materialize folds events into the snapshot of execution id, as protocol.Materialize
// does, and fails t unless every event folds.
func Materialize(t testing.TB, id string, events []protocol.Event) protocol.Snapshot {
	t.Helper()
	s := protocol.Materialize(id, events)
	if s.Sequence != uint64(len(events)) {
		t.Fatalf("snapshot folded %d of %d events", s.Sequence, len(events))
	}
	return s
}

// The events adapter tests expect most, as Encode makes them.

// TextDelta is an output.delta of s at output 0.
func TextDelta(s string) Emitted {
	return Encode(protocol.EventOutputDelta, protocol.OutputDeltaData{Index: 0, Type: "text", Text: s})
}

// ToolStarted is a tool.call.started.
func ToolStarted(index int, id, name string) Emitted {
	return Encode(protocol.EventToolCallStarted, protocol.ToolCallStartedData{Index: index, CallID: id, Name: name})
}

// ArgsDelta is a tool.call.arguments.delta.
func ArgsDelta(id, delta string) Emitted {
	return Encode(protocol.EventToolCallArgsDelta, protocol.ToolCallArgsDeltaData{CallID: id, Delta: delta})
}

// UsageReported is a usage.reported of entries.
func UsageReported(entries ...protocol.Usage) Emitted {
	return Encode(protocol.EventUsageReported, protocol.UsageReportedData{Usage: entries})
}

// ProviderUsage is a usage entry the provider reported.
func ProviderUsage(unit string, n float64) protocol.Usage {
	return protocol.Usage{Unit: unit, Quantity: n, Source: protocol.SourceProvider}
}
