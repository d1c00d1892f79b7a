package protocol

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Status is the state of an execution (spec/http-api.md "Status", spec/events.md
// "Materializing a result").
type Status string

const (
	// StatusAccepted: the execution exists and no route has been chosen yet.
	StatusAccepted Status = "accepted"
	// StatusRunning: at least one event after execution.accepted, and no terminal event.
	StatusRunning Status = "running"
	// StatusCompleted: execution.completed was recorded.
	StatusCompleted Status = "completed"
	// StatusFailed: execution.failed was recorded (also after cancel and deadline).
	StatusFailed Status = "failed"
)

// Terminal reports whether s is final.
func (s Status) Terminal() bool { return s == StatusCompleted || s == StatusFailed }

// OutputPart is one output part of a snapshot.
type OutputPart struct {
	// Index is the output part position the deltas named.
	Index int `json:"index"`
	// Type is the part type; always "text" today.
	Type string `json:"type"`
	// Text is the concatenation of the part's deltas in sequence order.
	Text string `json:"text"`
}

// ToolCall is one tool call of a snapshot.
type ToolCall struct {
	// Index is the position tool.call.started gave the call, or -1 while argument deltas
	// have arrived for a call whose tool.call.started has not.
	Index int `json:"index"`
	// CallID identifies the call.
	CallID string `json:"call_id"`
	// Name is the tool's name from tool.call.started.
	Name string `json:"name"`
	// Arguments is the concatenation of the call's argument fragments in sequence order.
	// It is whatever the provider sent: the snapshot never claims it is valid JSON.
	Arguments string `json:"arguments"`
}

// Snapshot is the materialized result of an execution (spec/events.md, "Materializing a
// result"): the fold of its events in sequence order. The server and the Go client both
// build it with Apply (or Materialize), so they agree for the same events.
//
// A Snapshot keeps unexported builders so that folding n deltas costs O(n) rather than
// re-copying the text on every delta. Apply owns the exported fields: change them only
// through Apply. Copying a Snapshot shares those builders and slices, so a copy must not
// be applied to while the original is; use Clone for an independent copy.
type Snapshot struct {
	// ID is the execution ID.
	ID string `json:"id"`
	// Status is accepted, running, completed or failed.
	Status Status `json:"status"`
	// Sequence is the sequence of the last applied event; 0 before any.
	Sequence uint64 `json:"sequence"`
	// Output lists the text output parts, ordered by index.
	Output []OutputPart `json:"output"`
	// ToolCalls lists the tool calls, ordered by index (calls with equal index in the
	// order they first appeared).
	ToolCalls []ToolCall `json:"tool_calls"`
	// Result is the result of the latest output.result, as the provider gave it.
	Result json.RawMessage `json:"result,omitempty"`
	// Artifacts lists the artifacts of every output.result in order.
	Artifacts []Artifact `json:"artifacts"`
	// Usage lists usage entries as reported, per attempt, in order; never summed.
	Usage []Usage `json:"usage"`
	// FinishReason is the finish reason of execution.completed, if any.
	FinishReason string `json:"finish_reason,omitempty"`
	// Error is the error of execution.failed.
	Error *Error `json:"error,omitempty"`

	fold *fold
}

// fold holds the accumulation state behind a Snapshot's strings.
type fold struct {
	text  map[int]*strings.Builder    // output index → text so far
	args  map[string]*strings.Builder // call id → arguments so far
	calls map[string]int              // call id → position in ToolCalls
}

// SequenceGapError is returned by Apply for an event that is not the next in sequence.
// The events between Have and Got are missing; a reader resumes after Have.
type SequenceGapError struct {
	Have uint64 // the snapshot's sequence
	Got  uint64 // the offered event's sequence, > Have+1
}

func (e *SequenceGapError) Error() string {
	return fmt.Sprintf("event sequence gap: have %d, got %d", e.Have, e.Got)
}

// ErrEventAfterTerminal is returned by Apply for an event that follows the terminal
// event, which the contract rules out.
var ErrEventAfterTerminal = errors.New("event after the terminal event")

// NewSnapshot returns the snapshot of execution id before any event: accepted, sequence
// 0, empty lists.
func NewSnapshot(id string) Snapshot {
	return Snapshot{
		ID:        id,
		Status:    StatusAccepted,
		Output:    []OutputPart{},
		ToolCalls: []ToolCall{},
		Artifacts: []Artifact{},
		Usage:     []Usage{},
	}
}

// Materialize folds events, in slice order, into the snapshot of execution id. It skips
// every event Apply rejects, so after a gap the snapshot stays at the last event before
// it. It is pure: the same events give the same snapshot.
func Materialize(id string, events []Event) Snapshot {
	s := NewSnapshot(id)
	for _, ev := range events {
		_ = s.Apply(ev) // rejected events are skipped by definition
	}
	return s
}

// Apply folds one event into s. Apply is atomic: it either applies the whole event or
// leaves s unchanged and returns an error.
//
//   - An event with a sequence ≤ s.Sequence was applied already and is ignored (nil), so
//     a client may re-apply the overlap when it resumes a stream.
//   - An event with a sequence > s.Sequence+1 is rejected with a *SequenceGapError: the
//     snapshot would silently lack the missing events otherwise.
//   - An event of another execution (non-empty ExecutionID differing from s.ID), after the
//     terminal event, or with data that does not decode is rejected.
//   - An event type this version does not know only advances the sequence, so an older
//     client keeps folding a newer server's stream.
//
// A zero Snapshot takes its ID from the first event applied.
func (s *Snapshot) Apply(ev Event) error {
	if ev.ExecutionID != "" && s.ID != "" && ev.ExecutionID != s.ID {
		return fmt.Errorf("event of execution %q applied to snapshot of %q", ev.ExecutionID, s.ID)
	}
	if ev.Sequence <= s.Sequence {
		return nil
	}
	if ev.Sequence != s.Sequence+1 {
		return &SequenceGapError{Have: s.Sequence, Got: ev.Sequence}
	}
	if s.Status.Terminal() {
		return fmt.Errorf("apply event %d (%s): %w", ev.Sequence, ev.Type, ErrEventAfterTerminal)
	}
	if err := s.applyData(ev); err != nil {
		return fmt.Errorf("apply event %d (%s): %w", ev.Sequence, ev.Type, err)
	}
	if s.ID == "" {
		s.ID = ev.ExecutionID
	}
	s.Sequence = ev.Sequence
	s.Status = StatusAfter(ev.Type)
	return nil
}

// StatusAfter is an execution's status once an event of type t is its last: accepted
// after execution.accepted, completed or failed after the terminal events, running after
// anything else.
func StatusAfter(t EventType) Status {
	switch t {
	case EventAccepted:
		return StatusAccepted
	case EventCompleted:
		return StatusCompleted
	case EventFailed:
		return StatusFailed
	}
	return StatusRunning
}

// applyData applies the type-specific part of ev. It decodes before it changes anything,
// which is what makes Apply atomic.
func (s *Snapshot) applyData(ev Event) error { return decodeData(ev.Type, ev.Data, s) }

// decodeData decodes data as the payload of an event of type typ and folds it into s,
// or only decodes it when s is nil (CheckData): one switch, so that what Apply folds
// and what CheckData admits cannot differ.
func decodeData(typ EventType, data []byte, s *Snapshot) error {
	switch typ {
	case EventOutputDelta:
		d, err := DecodeDelta(data)
		if err != nil {
			return err
		}
		if s != nil {
			s.appendText(d.Index, d.Type, d.Text)
		}
	case EventToolCallStarted:
		var d ToolCallStartedData
		if err := UnmarshalData(data, &d); err != nil {
			return err
		}
		if s != nil {
			s.startCall(d)
		}
	case EventToolCallArgsDelta:
		var d ToolCallArgsDeltaData
		if err := UnmarshalData(data, &d); err != nil {
			return err
		}
		if s != nil {
			s.appendArgs(d)
		}
	case EventOutputResult:
		var d OutputResultData
		if err := UnmarshalData(data, &d); err != nil {
			return err
		}
		if s != nil {
			if len(d.Result) > 0 {
				s.Result = d.Result // Unmarshal copied it out of the data
			}
			s.Artifacts = append(s.Artifacts, d.Artifacts...)
		}
	case EventUsageReported:
		var d UsageReportedData
		if err := UnmarshalData(data, &d); err != nil {
			return err
		}
		if s != nil {
			s.Usage = append(s.Usage, d.Usage...)
		}
	case EventCompleted:
		var d CompletedData
		if err := UnmarshalData(data, &d); err != nil {
			return err
		}
		if s != nil {
			s.FinishReason = d.FinishReason
		}
	case EventFailed:
		var d FailedData
		if err := UnmarshalData(data, &d); err != nil {
			return err
		}
		if s != nil {
			s.Error = d.Error
		}
	}
	return nil
}

// state returns the fold state, building it from the exported fields on first use so that
// a Snapshot decoded from JSON (for example a client's GET /result) continues to fold.
func (s *Snapshot) state() *fold {
	if s.fold == nil {
		s.fold = &fold{
			text: map[int]*strings.Builder{},
			args: map[string]*strings.Builder{},
		}
		s.reindexCalls()
	}
	return s.fold
}

func (s *Snapshot) appendText(index int, typ string, text []byte) {
	st := s.state()
	i, found := slices.BinarySearchFunc(s.Output, index, func(p OutputPart, target int) int {
		return cmp.Compare(p.Index, target)
	})
	if !found {
		if typ == "" {
			typ = "text"
		}
		s.Output = slices.Insert(s.Output, i, OutputPart{Index: index, Type: typ})
	}
	b := builder(st.text, index, s.Output[i].Text)
	b.Write(text)
	// String shares the builder's bytes, so this is O(1) however long the text grows.
	s.Output[i].Text = b.String()
}

func (s *Snapshot) startCall(d ToolCallStartedData) {
	st := s.state()
	if pos, ok := st.calls[d.CallID]; ok {
		c := s.ToolCalls[pos]
		c.Name = d.Name
		if c.Index == d.Index {
			s.ToolCalls[pos] = c
			return
		}
		c.Index = d.Index
		s.ToolCalls = slices.Delete(s.ToolCalls, pos, pos+1)
		s.insertCall(c)
		return
	}
	s.insertCall(ToolCall{Index: d.Index, CallID: d.CallID, Name: d.Name})
}

// appendArgs accumulates a fragment. A fragment for a call whose tool.call.started has
// not been applied still accumulates, under index -1, rather than being lost: the
// started event may yet arrive and set index and name.
func (s *Snapshot) appendArgs(d ToolCallArgsDeltaData) {
	st := s.state()
	pos, ok := st.calls[d.CallID]
	if !ok {
		s.insertCall(ToolCall{Index: -1, CallID: d.CallID})
		pos = st.calls[d.CallID]
	}
	b := builder(st.args, d.CallID, s.ToolCalls[pos].Arguments)
	b.WriteString(d.Delta)
	s.ToolCalls[pos].Arguments = b.String()
}

// insertCall inserts c after every call with an index ≤ c.Index, keeping ToolCalls
// ordered by index and equal indexes in arrival order.
func (s *Snapshot) insertCall(c ToolCall) {
	i := len(s.ToolCalls)
	for i > 0 && s.ToolCalls[i-1].Index > c.Index {
		i--
	}
	s.ToolCalls = slices.Insert(s.ToolCalls, i, c)
	s.reindexCalls()
}

// reindexCalls rebuilds the call id → position map. It runs once per new or moved call,
// which already costs O(calls) for the slice insert; deltas only look positions up.
func (s *Snapshot) reindexCalls() {
	calls := make(map[string]int, len(s.ToolCalls))
	for i, c := range s.ToolCalls {
		calls[c.CallID] = i
	}
	s.fold.calls = calls
}

// builder returns the builder for key, creating it seeded with the text accumulated so
// far (non-empty when the snapshot was decoded from JSON rather than folded here).
func builder[K comparable](m map[K]*strings.Builder, key K, seed string) *strings.Builder {
	b := m[key]
	if b == nil {
		b = &strings.Builder{}
		b.WriteString(seed)
		m[key] = b
	}
	return b
}

// Clone returns a deep copy of s that can be applied to independently of s.
func (s *Snapshot) Clone() Snapshot {
	c := *s
	c.fold = nil
	c.Output = slices.Clone(s.Output)
	c.ToolCalls = slices.Clone(s.ToolCalls)
	c.Result = slices.Clone(s.Result)
	c.Artifacts = slices.Clone(s.Artifacts)
	for i := range c.Artifacts {
		a := &c.Artifacts[i]
		if a.SizeBytes != nil {
			n := *a.SizeBytes
			a.SizeBytes = &n
		}
		if a.ExpiresAt != nil {
			t := *a.ExpiresAt
			a.ExpiresAt = &t
		}
	}
	c.Usage = slices.Clone(s.Usage)
	c.Error = s.Error.Clone()
	return c
}

// Compact packs s for keeping once nothing more will be applied, as an EventStore
// keeps a finished execution: every output text and tool-call argument string is copied
// into one allocation, and the fold's builders, whose buffers carry growth slack, are
// dropped (an Apply after all rebuilds them from the fields). Output parts of type text
// share the constant. Copies handed out earlier (Clone) are not affected.
func (s *Snapshot) Compact() {
	s.fold = nil
	size := 0
	for _, p := range s.Output {
		size += len(p.Text)
	}
	for _, tc := range s.ToolCalls {
		size += len(tc.Arguments)
	}
	var b strings.Builder
	b.Grow(size)
	for _, p := range s.Output {
		b.WriteString(p.Text)
	}
	for _, tc := range s.ToolCalls {
		b.WriteString(tc.Arguments)
	}
	all, at := b.String(), 0
	for i := range s.Output {
		p := &s.Output[i]
		n := len(p.Text)
		p.Text, at = all[at:at+n], at+n
		if p.Type == string(PartText) {
			p.Type = string(PartText) // the constant, not a decoded copy
		}
	}
	for i := range s.ToolCalls {
		tc := &s.ToolCalls[i]
		n := len(tc.Arguments)
		tc.Arguments, at = all[at:at+n], at+n
	}
}

// MarshalJSON encodes s with output, tool_calls, artifacts and usage always present as
// arrays, also for a Snapshot that was not built by NewSnapshot.
func (s Snapshot) MarshalJSON() ([]byte, error) {
	type plain Snapshot // the same fields without this method, so Marshal does not recurse
	p := plain(s)
	if p.Output == nil {
		p.Output = []OutputPart{}
	}
	if p.ToolCalls == nil {
		p.ToolCalls = []ToolCall{}
	}
	if p.Artifacts == nil {
		p.Artifacts = []Artifact{}
	}
	if p.Usage == nil {
		p.Usage = []Usage{}
	}
	return json.Marshal(p)
}
