package providerhttp

import (
	"fmt"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TextIndex is the output part of all of a chat answer's text: every text block of an
// answer folds into part 0, so a streamed and a non-streamed answer materialize to the
// same snapshot.
const TextIndex = 0

// Events records the events of one answer through the attempt's engine.Emitter, for the
// readers of every chat adapter: it skips what carries nothing (an empty text, usage
// without entries), names the event in an emit failure, and remembers whether output was
// recorded, which makes a later failure final (Failure.AfterOutput, Truncated,
// Unreadable). An emit failure (attempt over, limit, store failure) ends the attempt: the
// engine decides the outcome from its own state.
type Events struct {
	emit   engine.Emitter
	output bool
}

// NewEvents returns the Events of an answer recorded through emit.
func NewEvents(emit engine.Emitter) Events { return Events{emit: emit} }

// Output reports whether an output or tool event was recorded.
func (e *Events) Output() bool { return e.output }

// Text records a text fragment of output part TextIndex; an empty one is skipped.
func (e *Events) Text(s string) error {
	if s == "" {
		return nil
	}
	return e.done(protocol.EventOutputDelta, e.emit.Text(TextIndex, s))
}

// ToolStarted records the start of tool call index.
func (e *Events) ToolStarted(index int, callID, name string) error {
	return e.done(protocol.EventToolCallStarted, e.emit.ToolStarted(index, callID, name))
}

// ToolArgs records a fragment of a tool call's arguments.
func (e *Events) ToolArgs(callID, delta string) error {
	return e.done(protocol.EventToolCallArgsDelta, e.emit.ToolArgs(callID, delta))
}

// Usage records the answer's usage.reported, unless t reports nothing.
func (e *Events) Usage(t Tokens) error {
	entries := t.Entries()
	if len(entries) == 0 {
		return nil
	}
	return e.done(protocol.EventUsageReported, e.emit.Usage(entries))
}

// done notes a recorded output event, or wraps an emit failure with the event's type.
func (e *Events) done(typ protocol.EventType, err error) error {
	if err != nil {
		return fmt.Errorf("record %s: %w", typ, err)
	}
	if typ.IsOutput() {
		e.output = true
	}
	return nil
}
