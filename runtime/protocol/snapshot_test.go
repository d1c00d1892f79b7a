package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const testExecID = "exe_01JDTEST"

// step is one event of a test stream before it is numbered.
type step struct {
	typ  EventType
	data any // marshalled to JSON; a string is used as raw JSON as it is
}

// numbered turns steps into the events of testExecID with sequences 1, 2, ….
func numbered(steps ...step) []Event {
	events := make([]Event, len(steps))
	for i, s := range steps {
		events[i] = eventAt(uint64(i+1), s)
	}
	return events
}

func eventAt(seq uint64, s step) Event {
	var raw json.RawMessage
	if str, ok := s.data.(string); ok {
		raw = json.RawMessage(str)
	} else {
		var err error
		if raw, err = json.Marshal(s.data); err != nil {
			panic(err)
		}
	}
	return Event{
		ExecutionID: testExecID,
		Sequence:    seq,
		Timestamp:   time.Date(2026, 12, 2, 13, 0, 0, int(seq), time.UTC),
		Type:        s.typ,
		Data:        raw,
	}
}

var (
	accepted = step{EventAccepted, AcceptedData{Ability: "chat", DeadlineAt: time.Date(2026, 12, 2, 13, 5, 0, 0, time.UTC)}}
	routed   = step{EventRouteSelected, RouteSelectedData{Attempt: 1, Deployment: "ai/gpt-4o-mini", Provider: "openai", Model: "gpt-4o-mini"}}
)

func text(index int, s string) step {
	return step{EventOutputDelta, OutputDeltaData{Index: index, Type: "text", Text: s}}
}

func started(index int, callID, name string) step {
	return step{EventToolCallStarted, ToolCallStartedData{Index: index, CallID: callID, Name: name}}
}

func args(callID, delta string) step {
	return step{EventToolCallArgsDelta, ToolCallArgsDeltaData{CallID: callID, Delta: delta}}
}

func usage(entries ...Usage) step {
	return step{EventUsageReported, UsageReportedData{Usage: entries}}
}

// snap is NewSnapshot(testExecID) changed by edit.
func snap(edit func(*Snapshot)) Snapshot {
	s := NewSnapshot(testExecID)
	edit(&s)
	return s
}

var snapshotCmp = []cmp.Option{cmpopts.IgnoreUnexported(Snapshot{}), cmpopts.EquateEmpty()}

func TestMaterialize(t *testing.T) {
	completedErr := NewError(CodeProviderUnavailable, "provider unavailable")
	tests := []struct {
		name   string
		events []Event
		want   Snapshot
	}{
		{
			name: "no events",
			want: NewSnapshot(testExecID),
		},
		{
			name:   "accepted",
			events: numbered(accepted),
			want:   snap(func(s *Snapshot) { s.Sequence = 1 }),
		},
		{
			name:   "route selected makes it running",
			events: numbered(accepted, routed),
			want:   snap(func(s *Snapshot) { s.Sequence, s.Status = 2, StatusRunning }),
		},
		{
			name:   "progress makes it running",
			events: numbered(accepted, step{EventProgress, ProgressData{Stage: StageQueued}}),
			want:   snap(func(s *Snapshot) { s.Sequence, s.Status = 2, StatusRunning }),
		},
		{
			name: "attempt failed records nothing",
			events: numbered(accepted, routed,
				step{EventAttemptFailed, AttemptFailedData{Attempt: 1, Deployment: "ai/a", Error: NewError(CodeRateLimited, "rate limited")}}),
			want: snap(func(s *Snapshot) { s.Sequence, s.Status = 3, StatusRunning }),
		},
		{
			name:   "text deltas concatenate per index, ordered by index",
			events: numbered(accepted, routed, text(1, "Wor"), text(0, "Hel"), text(0, "lo"), text(1, "ld"), text(0, "")),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 7, StatusRunning
				s.Output = []OutputPart{{0, "text", "Hello"}, {1, "text", "World"}}
			}),
		},
		{
			name: "tool call fragments concatenate per call, ordered by index",
			events: numbered(accepted, routed, started(1, "c2", "search"), started(0, "c1", "get_weather"),
				args("c1", `{"city":`), args("c2", `{}`), args("c1", `"Oslo"}`)),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 7, StatusRunning
				s.ToolCalls = []ToolCall{{0, "c1", "get_weather", `{"city":"Oslo"}`}, {1, "c2", "search", `{}`}}
			}),
		},
		{
			name:   "arguments of a call never started still accumulate",
			events: numbered(accepted, routed, started(0, "c1", "f"), args("c9", "ab"), args("c9", "c")),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 5, StatusRunning
				s.ToolCalls = []ToolCall{{-1, "c9", "", "abc"}, {0, "c1", "f", ""}}
			}),
		},
		{
			name:   "started after its arguments takes its index",
			events: numbered(accepted, routed, args("c1", "{"), started(2, "c1", "f"), args("c1", "}"), started(1, "c0", "g")),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 6, StatusRunning
				s.ToolCalls = []ToolCall{{1, "c0", "g", ""}, {2, "c1", "f", "{}"}}
			}),
		},
		{
			name:   "started again updates the name",
			events: numbered(accepted, routed, started(0, "c1", "f"), args("c1", "x"), started(0, "c1", "g")),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 5, StatusRunning
				s.ToolCalls = []ToolCall{{0, "c1", "g", "x"}}
			}),
		},
		{
			name:   "delta without type is text",
			events: numbered(accepted, routed, step{EventOutputDelta, `{"index":0,"text":"a"}`}),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 3, StatusRunning
				s.Output = []OutputPart{{0, "text", "a"}}
			}),
		},
		{
			name: "output result as given, artifacts accumulate",
			events: numbered(accepted, routed,
				step{EventOutputResult, `{"result": {"b": 1, "a": [1, 2]}, "artifacts": [{"uri": "https://x/1.png", "media_type": "image/png", "size_bytes": 3}]}`},
				step{EventOutputResult, `{"result": "final", "artifacts": [{"uri": "https://x/2.png", "media_type": "image/png"}]}`},
				step{EventOutputResult, `{"artifacts": [{"uri": "https://x/3.png", "media_type": "image/png"}]}`}),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 5, StatusRunning
				s.Result = json.RawMessage(`"final"`)
				size := int64(3)
				s.Artifacts = []Artifact{
					{URI: "https://x/1.png", MediaType: "image/png", SizeBytes: &size},
					{URI: "https://x/2.png", MediaType: "image/png"},
					{URI: "https://x/3.png", MediaType: "image/png"},
				}
			}),
		},
		{
			name: "usage listed per attempt, never summed",
			events: numbered(accepted, routed,
				usage(Usage{UnitInputTokens, 10, SourceProvider}, Usage{UnitRequests, 1, SourceRuntime}),
				usage(Usage{UnitInputTokens, 12, SourceProvider})),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 4, StatusRunning
				s.Usage = []Usage{{UnitInputTokens, 10, SourceProvider}, {UnitRequests, 1, SourceRuntime}, {UnitInputTokens, 12, SourceProvider}}
			}),
		},
		{
			name:   "completed",
			events: numbered(accepted, routed, text(0, "hi"), step{EventCompleted, CompletedData{FinishReason: "stop"}}),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status, s.FinishReason = 4, StatusCompleted, "stop"
				s.Output = []OutputPart{{0, "text", "hi"}}
			}),
		},
		{
			name:   "completed without finish reason",
			events: numbered(accepted, routed, step{EventCompleted, `{}`}),
			want:   snap(func(s *Snapshot) { s.Sequence, s.Status = 3, StatusCompleted }),
		},
		{
			name:   "failed",
			events: numbered(accepted, routed, step{EventFailed, FailedData{Error: completedErr}}),
			want:   snap(func(s *Snapshot) { s.Sequence, s.Status, s.Error = 3, StatusFailed, completedErr }),
		},
		{
			name:   "unknown event type only advances the sequence",
			events: numbered(accepted, step{"execution.future_thing", `{"x":1}`}, text(0, "a")),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 3, StatusRunning
				s.Output = []OutputPart{{0, "text", "a"}}
			}),
		},
		{
			name: "re-delivered events ignored",
			events: func() []Event {
				e := numbered(accepted, routed, text(0, "a"), text(0, "b"))
				return []Event{e[0], e[1], e[2], e[1], e[2], e[0], e[3], e[3]}
			}(),
			want: snap(func(s *Snapshot) {
				s.Sequence, s.Status = 4, StatusRunning
				s.Output = []OutputPart{{0, "text", "ab"}}
			}),
		},
		{
			name: "folding stops at a gap",
			events: func() []Event {
				e := numbered(accepted, routed, text(0, "a"), text(0, "b"), text(0, "c"))
				return []Event{e[0], e[1], e[3], e[4]}
			}(),
			want: snap(func(s *Snapshot) { s.Sequence, s.Status = 2, StatusRunning }),
		},
		{
			name:   "events after the terminal event skipped",
			events: numbered(accepted, step{EventCompleted, `{}`}, text(0, "late")),
			want:   snap(func(s *Snapshot) { s.Sequence, s.Status = 2, StatusCompleted }),
		},
		{
			name: "events of another execution skipped",
			events: func() []Event {
				e := numbered(accepted, routed)
				e[1].ExecutionID = "exe_other"
				return e
			}(),
			want: snap(func(s *Snapshot) { s.Sequence = 1 }),
		},
		{
			name:   "undecodable data not applied",
			events: numbered(accepted, routed, step{EventOutputDelta, `{"index":"zero"}`}),
			want:   snap(func(s *Snapshot) { s.Sequence, s.Status = 2, StatusRunning }),
		},
	}
	for _, tt := range tests {
		got := Materialize(testExecID, tt.events)
		if diff := cmp.Diff(tt.want, got, snapshotCmp...); diff != "" {
			t.Errorf("%s: Materialize mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestApplyErrors(t *testing.T) {
	base := numbered(accepted, routed, text(0, "a"))
	tests := []struct {
		name  string
		event Event
		check func(error) bool
	}{
		{
			name:  "gap",
			event: eventAt(5, text(0, "b")),
			check: func(err error) bool {
				var gap *SequenceGapError
				return errors.As(err, &gap) && *gap == SequenceGapError{Have: 3, Got: 5}
			},
		},
		{
			name:  "after terminal",
			event: eventAt(5, text(0, "b")),
			check: func(err error) bool { return errors.Is(err, ErrEventAfterTerminal) },
		},
		{
			name: "another execution",
			event: func() Event {
				e := eventAt(4, text(0, "b"))
				e.ExecutionID = "exe_other"
				return e
			}(),
			check: func(err error) bool { return err != nil },
		},
		{
			name:  "undecodable data",
			event: eventAt(4, step{EventToolCallArgsDelta, `[`}),
			check: func(err error) bool { return err != nil },
		},
	}
	for _, tt := range tests {
		s := Materialize(testExecID, base)
		if tt.name == "after terminal" {
			if err := s.Apply(eventAt(4, step{EventCompleted, `{}`})); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := json.Marshal(s)
		err := s.Apply(tt.event)
		if !tt.check(err) {
			t.Errorf("%s: Apply error = %v", tt.name, err)
		}
		after, _ := json.Marshal(s)
		if diff := cmp.Diff(string(before), string(after)); diff != "" {
			t.Errorf("%s: rejected event changed the snapshot (-before +after):\n%s", tt.name, diff)
		}
	}
}

func TestApplyZeroSnapshot(t *testing.T) {
	var s Snapshot
	for _, ev := range numbered(accepted, text(0, "x")) {
		if err := s.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := snap(func(s *Snapshot) {
		s.Sequence, s.Status = 2, StatusRunning
		s.Output = []OutputPart{{0, "text", "x"}}
	})
	if diff := cmp.Diff(want, s, snapshotCmp...); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestSnapshotJSON(t *testing.T) {
	size := int64(42)
	full := numbered(accepted, routed, text(0, "Hi \"there\"\n"), started(0, "call_1", "get_weather"),
		args("call_1", `{"city":"Oslo"}`),
		step{EventOutputResult, OutputResultData{Result: json.RawMessage(`{"ok":true}`), Artifacts: []Artifact{{URI: "https://x/a", MediaType: "image/png", SizeBytes: &size}}}},
		usage(Usage{UnitOutputTokens, 5, SourceProvider}),
		step{EventCompleted, CompletedData{FinishReason: "stop"}})
	failed := numbered(accepted, step{EventFailed, FailedData{Error: NewError(CodeCancelled, "execution cancelled")}})
	tests := []struct {
		name string
		snap Snapshot
		want string
	}{
		{
			name: "new",
			snap: NewSnapshot(testExecID),
			want: `{"id":"exe_01JDTEST","status":"accepted","sequence":0,"output":[],"tool_calls":[],"artifacts":[],"usage":[]}`,
		},
		{
			name: "zero value still has arrays",
			snap: Snapshot{},
			want: `{"id":"","status":"","sequence":0,"output":[],"tool_calls":[],"artifacts":[],"usage":[]}`,
		},
		{
			name: "completed",
			snap: Materialize(testExecID, full),
			want: `{"id":"exe_01JDTEST","status":"completed","sequence":8,` +
				`"output":[{"index":0,"type":"text","text":"Hi \"there\"\n"}],` +
				`"tool_calls":[{"index":0,"call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}],` +
				`"result":{"ok":true},` +
				`"artifacts":[{"uri":"https://x/a","media_type":"image/png","size_bytes":42}],` +
				`"usage":[{"unit":"output_tokens","quantity":5,"source":"provider"}],` +
				`"finish_reason":"stop"}`,
		},
		{
			name: "failed",
			snap: Materialize(testExecID, failed),
			want: `{"id":"exe_01JDTEST","status":"failed","sequence":2,"output":[],"tool_calls":[],"artifacts":[],"usage":[],` +
				`"error":{"code":"cancelled","message":"execution cancelled","retryable":false}}`,
		},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.snap)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, string(got)); diff != "" {
			t.Errorf("%s: JSON mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestApplyAfterJSON checks the client's resume path: decode a partial snapshot from JSON
// (GET /result), then fold the events after it, overlap included.
func TestApplyAfterJSON(t *testing.T) {
	events := numbered(accepted, routed, text(0, "Hel"), args("c1", "{"), started(0, "c1", "f"),
		text(0, "lo"), args("c1", "}"), text(1, "!"), step{EventCompleted, `{}`})
	want := mustJSON(t, Materialize(testExecID, events))
	for k := range len(events) + 1 {
		var s Snapshot
		if err := json.Unmarshal(mustJSON(t, Materialize(testExecID, events[:k])), &s); err != nil {
			t.Fatal(err)
		}
		for _, ev := range events { // from 1: the first k are re-deliveries
			if err := s.Apply(ev); err != nil {
				t.Fatalf("after %d: Apply(%d): %v", k, ev.Sequence, err)
			}
		}
		if diff := cmp.Diff(string(want), string(mustJSON(t, s))); diff != "" {
			t.Errorf("resumed after %d: mismatch (-want +got):\n%s", k, diff)
		}
	}
}

func TestClone(t *testing.T) {
	events := numbered(accepted, routed, text(0, "a"), started(0, "c", "f"), args("c", "x"), usage(Usage{UnitRequests, 1, SourceRuntime}))
	s := Materialize(testExecID, events[:5])
	c := s.Clone()
	frozen := mustJSON(t, c)
	if err := s.Apply(events[5]); err != nil {
		t.Fatal(err)
	}
	for _, more := range []step{text(0, "b"), args("c", "y")} {
		if err := s.Apply(eventAt(s.Sequence+1, more)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(string(frozen), string(mustJSON(t, c))); diff != "" {
		t.Errorf("applying to the original changed the clone (-before +after):\n%s", diff)
	}
	// The clone folds on its own.
	if err := c.Apply(events[5]); err != nil {
		t.Fatal(err)
	}
	if got, want := mustJSON(t, c), mustJSON(t, Materialize(testExecID, events)); string(got) != string(want) {
		t.Errorf("clone after Apply = %s, want %s", got, want)
	}
}

// TestCompact: a compacted snapshot reads the same, makes one allocation for its
// strings, leaves earlier clones alone and, should another event come, still folds.
func TestCompact(t *testing.T) {
	events := numbered(accepted, routed, text(0, "ab"), text(1, "c"), text(0, "d"), started(0, "c1", "f"), args("c1", `{"x"`), args("c1", ":1}"))
	s := Materialize(testExecID, events)
	before := mustJSON(t, s)
	c := s.Clone()
	s.Compact()
	if got := mustJSON(t, s); string(got) != string(before) {
		t.Errorf("compacted = %s, want %s", got, before)
	}
	if got := mustJSON(t, c); string(got) != string(before) {
		t.Errorf("the clone changed to %s", got)
	}
	// One allocation for every string.
	clones := make([]Snapshot, 11)
	for i := range clones {
		clones[i] = Materialize(testExecID, events)
	}
	n := 0
	if allocs := testing.AllocsPerRun(10, func() { clones[n].Compact(); n++ }); allocs != 1 {
		t.Errorf("Compact allocated %v times, want 1", allocs)
	}
	more := eventAt(s.Sequence+1, text(1, "e"))
	if err := s.Apply(more); err != nil {
		t.Fatal(err)
	}
	if got, want := mustJSON(t, s), mustJSON(t, Materialize(testExecID, append(events, more))); string(got) != string(want) {
		t.Errorf("after Apply = %s, want %s", got, want)
	}
}

// TestMaterializeSplitInvariance is a property test: however the same two texts and the
// same two argument strings are cut into deltas, and however those deltas (and the
// tool.call.started events) interleave and are re-delivered, the snapshot is the same.
func TestMaterializeSplitInvariance(t *testing.T) {
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		texts := [2]string{randomText(rng), randomText(rng)}
		argStrings := [2]string{randomText(rng), randomText(rng)}
		callIDs := [2]string{"call_a", "call_b"}
		names := [2]string{"get_weather", "search"}

		// One queue per stream; the order inside a queue is fixed, queues interleave.
		var queues [][]step
		for i, s := range texts {
			var q []step
			for _, piece := range randomSplit(rng, s) {
				q = append(q, text(i, piece))
			}
			queues = append(queues, q)
		}
		for i, s := range argStrings {
			var q []step
			for _, piece := range randomSplit(rng, s) {
				q = append(q, args(callIDs[i], piece))
			}
			// tool.call.started anywhere in its call's stream: before, between or after
			// the fragments.
			at := rng.IntN(len(q) + 1)
			q = append(q[:at], append([]step{started(i, callIDs[i], names[i])}, q[at:]...)...)
			queues = append(queues, q)
		}
		steps := []step{accepted, routed}
		for {
			var live []int
			for i, q := range queues {
				if len(q) > 0 {
					live = append(live, i)
				}
			}
			if len(live) == 0 {
				break
			}
			i := live[rng.IntN(len(live))]
			steps = append(steps, queues[i][0])
			queues[i] = queues[i][1:]
		}
		steps = append(steps, usage(Usage{UnitOutputTokens, 7, SourceProvider}), step{EventCompleted, CompletedData{FinishReason: "stop"}})
		events := numbered(steps...)

		want := mustJSON(t, Snapshot{
			ID: testExecID, Status: StatusCompleted, Sequence: uint64(len(events)),
			Output: []OutputPart{{0, "text", texts[0]}, {1, "text", texts[1]}},
			ToolCalls: []ToolCall{
				{0, callIDs[0], names[0], argStrings[0]},
				{1, callIDs[1], names[1], argStrings[1]},
			},
			Usage:        []Usage{{UnitOutputTokens, 7, SourceProvider}},
			FinishReason: "stop",
		})
		if got := mustJSON(t, Materialize(testExecID, events)); string(got) != string(want) {
			t.Fatalf("seed %d: Materialize = %s\nwant %s", seed, got, want)
		}

		// Incrementally, as a resuming client does: sometimes the stream restarts from an
		// earlier cursor (re-delivery), sometimes the client restarts from the JSON.
		var s Snapshot
		for next := 0; next < len(events); {
			if err := s.Apply(events[next]); err != nil {
				t.Fatalf("seed %d: Apply(%d): %v", seed, events[next].Sequence, err)
			}
			next++
			switch rng.IntN(10) {
			case 0:
				next = rng.IntN(next + 1)
			case 1:
				var decoded Snapshot
				if err := json.Unmarshal(mustJSON(t, s), &decoded); err != nil {
					t.Fatal(err)
				}
				s = decoded
			}
		}
		if got := mustJSON(t, s); string(got) != string(want) {
			t.Fatalf("seed %d: incremental fold = %s\nwant %s", seed, got, want)
		}
	}
}

// randomText returns up to 40 runes, JSON-escaped and multi-byte ones included.
func randomText(rng *rand.Rand) string {
	alphabet := []rune("ab {}\"\\\n\té☃𝄞:,")
	var b strings.Builder
	for range rng.IntN(41) {
		b.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

// randomSplit cuts s into pieces at random rune boundaries; pieces may be empty. Cuts stay
// on rune boundaries because a JSON event cannot carry half a UTF-8 sequence.
func randomSplit(rng *rand.Rand, s string) []string {
	var bounds []int
	for i := range s {
		bounds = append(bounds, i)
	}
	bounds = append(bounds, len(s))
	var pieces []string
	start := 0
	for n := rng.IntN(8); n >= 0; n-- {
		end := bounds[rng.IntN(len(bounds))]
		if end < start {
			continue
		}
		pieces = append(pieces, s[start:end])
		start = end
	}
	return append(pieces, s[start:])
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkMaterialize folds n text deltas (and n/10 tool argument fragments). ns/op
// growing linearly with n shows the fold is not quadratic in the output length.
func BenchmarkMaterialize(b *testing.B) {
	for _, n := range []int{1000, 10_000, 100_000} {
		steps := []step{accepted, routed, started(0, "call_1", "f")}
		for i := range n {
			steps = append(steps, text(i%2, "sixteen bytes.. "))
			if i%10 == 0 {
				steps = append(steps, args("call_1", `{"k":"v"},`))
			}
		}
		steps = append(steps, step{EventCompleted, `{}`})
		events := numbered(steps...)
		b.Run(fmt.Sprintf("deltas=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s := Materialize(testExecID, events)
				if s.Status != StatusCompleted {
					b.Fatal(s.Status)
				}
			}
		})
	}
}

// What the engine writes (encoding/json's encoding of the payload structs) is always in
// the plain form: the hand-written decoding is the one that runs.
func TestDecodePlainTakesWhatTheEngineWrites(t *testing.T) {
	for _, v := range []any{
		&OutputDeltaData{Index: 3, Type: "text", Text: "caf\u00e9 <b> \"quoted\"\n"},
		&RouteSelectedData{Attempt: 2, Deployment: "team/gpt", Provider: "openai", Model: "gpt-4o"},
		&CompletedData{FinishReason: "end_turn"},
		&CompletedData{},
		&UsageReportedData{Usage: []Usage{{Unit: UnitInputTokens, Quantity: 12, Source: SourceProvider}, {Unit: UnitAudioSeconds, Quantity: 2.75, Source: SourceProvider}}},
		&UsageReportedData{Usage: []Usage{}},
	} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if !decodePlain(data, got) {
			t.Errorf("%s: not taken in the plain form", data)
		} else if !cmp.Equal(got, v) {
			t.Errorf("%s: %s", data, cmp.Diff(v, got))
		}
	}
}

// FuzzDecodePlain: the hand-written decoding of the payloads every execution records
// agrees with encoding/json whenever it decodes, and declines only where encoding/json
// then decides.
func FuzzDecodePlain(f *testing.F) {
	for _, s := range []string{
		`{"index":0,"type":"text","text":"hello"}`,
		`{"index":12,"type":"text","text":"a\\u00e9\\n\\"b"}`,
		`{"text":"x","index":3}`,
		`{"Index":1,"text":"x"}`,
		`{"index":1,"index":2}`,
		`{"index":-1}`,
		`{"index":1.5}`,
		`{"index":01}`,
		`{"index":null,"text":null}`,
		`{"index":99999999999999999999}`,
		`{"text":"\xff"}`,
		`{"extra":[1,{"a":2}],"text":"y"}`,
		` { "index" : 4 , "text" : "z" } `,
		`{"attempt":2,"deployment":"team/gpt","provider":"openai","model":"gpt-4o"}`,
		`{"attempt":0,"model":"m","model":"n"}`,
		`{"finish_reason":"stop"}`, `{}`, `{"finish_reason":""}`,
		`{"usage":[{"unit":"input_tokens","quantity":12,"source":"provider"},{"unit":"images","quantity":1.5e-3,"source":"estimated"}]}`,
		`{"usage":[]}`, `{"usage":null}`, `{"usage":[{}]}`, `{"usage":[{"quantity":-0}]}`,
		`{"usage":[{"quantity":1e400}]}`, `{"usage":[{"Unit":"x"}]}`, `{"usage":[1]}`,
		`[]`, `"x"`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(got, want any) {
			t.Helper()
			if !decodePlain(data, got) {
				return
			}
			if err := json.Unmarshal(data, want); err != nil {
				t.Fatalf("plain decoding took %q into %T, encoding/json refuses it: %v", data, got, err)
			}
			if !cmp.Equal(got, want) {
				t.Fatalf("%q into %T: %s", data, got, cmp.Diff(want, got))
			}
		}
		check(&OutputDeltaData{}, &OutputDeltaData{})
		check(&RouteSelectedData{}, &RouteSelectedData{})
		check(&CompletedData{}, &CompletedData{})
		check(&UsageReportedData{}, &UsageReportedData{})

		// DecodeDelta, plain form or not, decodes what encoding/json does.
		var want OutputDeltaData
		wantErr := json.Unmarshal(data, &want)
		got, err := DecodeDelta(data)
		switch {
		case (err != nil) != (wantErr != nil):
			t.Fatalf("DecodeDelta(%q): error %v, encoding/json's %v", data, err, wantErr)
		case err == nil && (got.Index != want.Index || got.Type != want.Type || string(got.Text) != want.Text):
			t.Fatalf("DecodeDelta(%q) = %+v, encoding/json decodes %+v", data, got, want)
		}
	})
}

// DecodeDelta takes the engine's form of output.delta with its text sharing the data's
// bytes (without an allocation: TestDecodeDeltaAllocations), and decodes any other form
// into a view of its own.
func TestDecodeDelta(t *testing.T) {
	data := []byte(`{"index":2,"type":"text","text":"café <b>"}`)
	v, err := DecodeDelta(data)
	if err != nil {
		t.Fatal(err)
	}
	if v.Index != 2 || v.Type != "text" || string(v.Text) != "café <b>" {
		t.Fatalf("DecodeDelta = %+v", v)
	}
	if &v.Text[0] != &data[len(`{"index":2,"type":"text","text":"`)] {
		t.Error("the text of the plain form is a copy, want the data's bytes")
	}

	escaped := []byte(`{"Text":"a\nb","index":1}`) // a key's case and an escape: encoding/json decides
	v, err = DecodeDelta(escaped)
	if err != nil || v.Index != 1 || v.Type != "" || string(v.Text) != "a\nb" {
		t.Fatalf("DecodeDelta(%s) = %+v, %v", escaped, v, err)
	}
	if _, err := DecodeDelta([]byte(`{"index":"1"}`)); err == nil {
		t.Error("an index that is a string was accepted")
	}
}

// FuzzUnmarshalData: the folds' and clients' decoding accepts and refuses exactly what
// encoding/json does, into every payload type a fold decodes and the event envelope, and
// yields the same values.
func FuzzUnmarshalData(f *testing.F) {
	for _, s := range []string{
		`{"index":0,"type":"text","text":"hello"}`,
		`{"Index":1,"TEXT":"x","text":"y"}`,
		`{"call_id":"c1","index":0,"name":"f"}`,
		`{"call_id":"c1","delta":"{\"a\":"}`,
		`{"result":{"k":[1,2]},"artifacts":[{"uri":"https://x/y.png","media_type":"image/png"}]}`,
		`{"usage":[{"unit":"input_tokens","quantity":12,"source":"provider"},{"unit":"x","quantity":1.5e3}]}`,
		`{"deployment":"team/gpt","provider":"openai","model":"m","attempt":1}`,
		`{"finish_reason":"stop"}`,
		`{"error":{"code":"rate_limited","message":"slow down","retryable":true,"retry_after_ms":1000}}`,
		"{\"text\":\"\xff\xfe\",\"finish_reason\":\"\xc3(\"}",
		`{"usage":null,"result":null,"error":null}`,
		`{"execution_id":"exe_1","sequence":3,"timestamp":"2026-12-03T10:00:00.123456789Z","type":"output.delta","data":{"index":0,"text":"hi"}}`,
		`{"execution_id":"exe_1","sequence":1,"timestamp":"2026-12-03T10:00:00+02:00","type":"execution.accepted","data":{}}`,
		`{"sequence":-1}`, `{"timestamp":"yesterday"}`, `{"data":nul}`,
		`{"index":"1"}`, `{"quantity":true}`, `{"usage":{}}`, `[]`, `null`, `{`, ``, `{"a":1} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(got, want any) {
			t.Helper()
			gotErr, wantErr := UnmarshalData(data, got), json.Unmarshal(data, want)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%q into %T: UnmarshalData error %v, encoding/json error %v", data, got, gotErr, wantErr)
			}
			if wantErr == nil && !cmp.Equal(got, want) {
				t.Fatalf("%q into %T: %s", data, got, cmp.Diff(want, got))
			}
		}
		check(&OutputDeltaData{}, &OutputDeltaData{})
		check(&ToolCallStartedData{}, &ToolCallStartedData{})
		check(&ToolCallArgsDeltaData{}, &ToolCallArgsDeltaData{})
		check(&OutputResultData{}, &OutputResultData{})
		check(&UsageReportedData{}, &UsageReportedData{})
		check(&RouteSelectedData{}, &RouteSelectedData{})
		check(&CompletedData{}, &CompletedData{})
		check(&FailedData{}, &FailedData{})
		check(&Event{}, &Event{})
		if ev, err := DecodeEvent(data); err == nil {
			var want Event
			_ = json.Unmarshal(data, &want)
			if !cmp.Equal(ev, want) {
				t.Fatalf("DecodeEvent(%q): %s", data, cmp.Diff(want, ev))
			}
		}
	})
}

// DecodeEvent's event owns its data: a caller may reuse the buffer it decoded from (the
// Go client decodes each frame in its SSE decoder's buffer).
func TestDecodeEventCopiesData(t *testing.T) {
	buf := []byte(`{"execution_id":"exe_1","sequence":1,"timestamp":"2026-01-02T03:04:05.000006Z","type":"output.delta","data":{"index":0,"type":"text","text":"hi"}}`)
	ev, err := DecodeEvent(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := string(ev.Data)
	for i := range buf {
		buf[i] = 'X'
	}
	if string(ev.Data) != want || ev.ExecutionID != "exe_1" {
		t.Errorf("after reusing the buffer: data %s, id %q; want %s, exe_1", ev.Data, ev.ExecutionID, want)
	}
}
