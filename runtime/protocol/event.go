package protocol

import (
	"encoding/json"
	"time"
)

// EventType names one kind of execution event (spec/events.md, "Event types").
type EventType string

const (
	EventAccepted          EventType = "execution.accepted"
	EventRouteSelected     EventType = "route.selected"
	EventAttemptFailed     EventType = "route.attempt_failed"
	EventOutputDelta       EventType = "output.delta"
	EventToolCallStarted   EventType = "tool.call.started"
	EventToolCallArgsDelta EventType = "tool.call.arguments.delta"
	EventProgress          EventType = "execution.progress"
	EventOutputResult      EventType = "output.result"
	EventUsageReported     EventType = "usage.reported"
	EventCompleted         EventType = "execution.completed"
	EventFailed            EventType = "execution.failed"
)

// Terminal reports whether t ends an execution. Exactly one terminal event is recorded
// per execution, always last.
func (t EventType) Terminal() bool {
	return t == EventCompleted || t == EventFailed
}

// IsOutput reports whether t carries output of an attempt. Once such an event is recorded
// for an attempt, the engine no longer falls back to another route.
func (t EventType) IsOutput() bool {
	switch t {
	case EventOutputDelta, EventOutputResult, EventToolCallStarted, EventToolCallArgsDelta:
		return true
	}
	return false
}

// MaxEventBytes bounds the encoded data of one recorded event. The engine splits a text
// or tool-argument delta that is larger into pieces and refuses any other larger event
// (output_too_large), so an event envelope always fits an SSE frame of a client that
// admits MaxEventBytes plus the envelope's own fields, and a page of events
// (spec/events.md) always has room for at least one event.
const MaxEventBytes = 2 << 20

// Event is the envelope of one recorded event (spec/events.md, "Envelope"). The runtime
// assigns ExecutionID, Sequence and Timestamp; adapters only produce Data.
type Event struct {
	// ExecutionID is the execution the event belongs to.
	ExecutionID string `json:"execution_id"`
	// Sequence starts at 1 for execution.accepted and increases by exactly 1.
	Sequence uint64 `json:"sequence"`
	// Timestamp is RFC 3339 UTC, non-decreasing within an execution.
	Timestamp time.Time `json:"timestamp"`
	// Type is the event type.
	Type EventType `json:"type"`
	// Data is the type-specific payload, already encoded as JSON.
	Data json.RawMessage `json:"data"`
}

// Event data payloads (spec/events.md, "Event types").

// AcceptedData is the data of execution.accepted.
type AcceptedData struct {
	Ability    string    `json:"ability"`
	DeadlineAt time.Time `json:"deadline_at"`
}

// RouteSelectedData is the data of route.selected.
type RouteSelectedData struct {
	Attempt    int    `json:"attempt"`
	Deployment string `json:"deployment"`
	Provider   string `json:"provider"`
	Model      string `json:"model"`
}

// AttemptFailedData is the data of route.attempt_failed.
type AttemptFailedData struct {
	Attempt    int    `json:"attempt"`
	Deployment string `json:"deployment"`
	Error      *Error `json:"error"`
}

// OutputDeltaData is the data of output.delta.
type OutputDeltaData struct {
	Index int    `json:"index"`
	Type  string `json:"type"` // always "text"
	Text  string `json:"text"`
}

// ToolCallStartedData is the data of tool.call.started.
type ToolCallStartedData struct {
	Index  int    `json:"index"`
	CallID string `json:"call_id"`
	Name   string `json:"name"`
}

// ToolCallArgsDeltaData is the data of tool.call.arguments.delta: a raw fragment of the
// call's arguments, to be concatenated in sequence order before parsing.
type ToolCallArgsDeltaData struct {
	CallID string `json:"call_id"`
	Delta  string `json:"delta"`
}

// Progress stages.
const (
	StageQueued  = "queued"
	StageRunning = "running"
)

// ProgressData is the data of execution.progress.
type ProgressData struct {
	Stage         string   `json:"stage"`
	Percent       *float64 `json:"percent,omitempty"`
	QueuePosition *int     `json:"queue_position,omitempty"`
	Message       string   `json:"message,omitempty"`
}

// Artifact is a reference to an output held elsewhere (for example a provider URL).
type Artifact struct {
	URI       string     `json:"uri"`
	MediaType string     `json:"media_type"`
	SizeBytes *int64     `json:"size_bytes,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// OutputResultData is the data of output.result.
type OutputResultData struct {
	Result    json.RawMessage `json:"result"`
	Artifacts []Artifact      `json:"artifacts"`
}

// UsageReportedData is the data of usage.reported.
type UsageReportedData struct {
	Usage []Usage `json:"usage"`
}

// CompletedData is the data of execution.completed.
type CompletedData struct {
	FinishReason string `json:"finish_reason,omitempty"`
}

// FailedData is the data of execution.failed.
type FailedData struct {
	Error *Error `json:"error"`
}
