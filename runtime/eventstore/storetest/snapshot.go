package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// snapshotSeeds is how many random event sequences testSnapshotFollowsEvents folds.
const snapshotSeeds = 16

// ignoreFold compares snapshots by their exported fields: the fold builders are private
// to whoever applied the events.
var ignoreFold = cmpopts.IgnoreUnexported(protocol.Snapshot{})

// testSnapshotFollowsEvents appends random event sequences (every event type; several
// output indexes interleaved; argument fragments before their tool.call.started; a
// tool.call.started that moves a call to another index; equal indexes; several
// output.result; usage; unknown types; payload-less events; either terminal event or
// none) and checks after every append that Snapshot is what protocol.Materialize makes
// of the stored events and that Get's fold agrees with them. Every fourth append is
// repeated, as a retry after a lost answer: it must change nothing.
func testSnapshotFollowsEvents(t *testing.T, h Harness[eventstore.Log]) {
	for seed := range uint64(snapshotSeeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			id := create(t, h.Store)
			checkFold(t, h, id, 0)
			for i, ev := range randomEvents(rng, id) {
				s, other := h.Store, h.Peer
				if i%2 == 1 {
					s, other = h.Peer, h.Store
				}
				if err := s.Append(t.Context(), eventstore.NoFence, ev); err != nil {
					t.Fatalf("Append %d %s %s: %v", ev.Sequence, ev.Type, ev.Data, err)
				}
				if i%4 == 3 {
					if err := other.Append(t.Context(), eventstore.NoFence, ev); err != nil {
						t.Fatalf("repeated Append %d: %v", ev.Sequence, err)
					}
				}
				checkFold(t, h, id, ev.Sequence)
				if t.Failed() {
					t.Fatalf("after event %d %s %s", ev.Sequence, ev.Type, ev.Data)
				}
			}
		})
	}
}

// checkFold asserts that both handles' Snapshot and Get agree with a fold of the stored
// events, which number last.
func checkFold(t *testing.T, h Harness[eventstore.Log], id string, last uint64) {
	t.Helper()
	evs, err := h.Peer.Read(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if uint64(len(evs)) != last {
		t.Fatalf("Read: %d events, want %d", len(evs), last)
	}
	want := protocol.Materialize(id, evs)
	if want.Sequence != last {
		t.Fatalf("protocol.Materialize stopped at %d of %d events: the store kept an event Apply rejects", want.Sequence, last)
	}
	wantStatus := foldStatus(evs)
	for name, s := range map[string]eventstore.Log{"store": h.Store, "peer": h.Peer} {
		got, err := s.Snapshot(t.Context(), id)
		if err != nil {
			t.Fatalf("%s: Snapshot: %v", name, err)
		}
		if diff := cmp.Diff(want, got, ignoreFold); diff != "" {
			t.Errorf("%s: Snapshot after %d events (-Materialize +got):\n%s", name, last, diff)
		}
		st := status(t, s, id)
		gotStatus := eventstore.Status{LastSequence: st.LastSequence, State: st.State, Attempts: st.Attempts,
			Route: st.Route, Error: st.Error, Output: st.Output, OutputBytes: st.OutputBytes}
		if diff := cmp.Diff(wantStatus, gotStatus); diff != "" {
			t.Errorf("%s: Get after %d events (-want +got):\n%s", name, last, diff)
		}
	}
}

// foldStatus folds evs into the progress fields of Status, independently of the stores:
// the state and error as protocol.Materialize has them, attempts and route from the
// route.selected events, the output facts from the output and tool events.
func foldStatus(evs []protocol.Event) eventstore.Status {
	snap := protocol.Materialize("", evs)
	st := eventstore.Status{LastSequence: snap.Sequence, State: snap.Status, Error: snap.Error}
	for _, ev := range evs {
		st.Output = st.Output || ev.Type.IsOutput()
		switch ev.Type {
		case protocol.EventRouteSelected:
			var d protocol.RouteSelectedData
			if json.Unmarshal(ev.Data, &d) == nil {
				st.Attempts++
				st.Route = &protocol.RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model}
			}
		case protocol.EventOutputDelta:
			var d protocol.OutputDeltaData
			if json.Unmarshal(ev.Data, &d) == nil {
				st.OutputBytes += int64(len(d.Text))
			}
		case protocol.EventToolCallArgsDelta:
			var d protocol.ToolCallArgsDeltaData
			if json.Unmarshal(ev.Data, &d) == nil {
				st.OutputBytes += int64(len(d.Delta))
			}
		case protocol.EventOutputResult:
			var d protocol.OutputResultData
			if json.Unmarshal(ev.Data, &d) == nil {
				st.OutputBytes += int64(len(d.Result))
			}
		}
	}
	return st
}

// randomEvents returns 20 to 80 events of execution id in sequence order: mostly what
// the engine records, and everything else Apply accepts.
func randomEvents(rng *rand.Rand, id string) []protocol.Event {
	n := 20 + rng.IntN(61)
	var evs []protocol.Event
	add := func(typ protocol.EventType, data json.RawMessage) {
		seq := uint64(len(evs)) + 1
		evs = append(evs, protocol.Event{
			ExecutionID: id,
			Sequence:    seq,
			Timestamp:   base.Add(time.Duration(seq) * time.Millisecond),
			Type:        typ,
			Data:        data,
		})
	}
	if rng.IntN(8) > 0 {
		add(protocol.EventAccepted, mustJSON(protocol.AcceptedData{Ability: "chat", DeadlineAt: base.Add(time.Minute)}))
	}
	for len(evs) < n {
		typ, data := randomEvent(rng)
		add(typ, data)
	}
	switch rng.IntN(3) {
	case 0:
		add(protocol.EventCompleted, pick(rng,
			mustJSON(protocol.CompletedData{FinishReason: pick(rng, "stop", "length", "tool_calls")}),
			json.RawMessage(`{}`), json.RawMessage(`null`)))
	case 1:
		e := protocol.NewError(pick(rng, protocol.CodeCancelled, protocol.CodeProviderUnavailable, protocol.CodeOutputTooLarge), "it failed")
		if rng.IntN(2) == 0 {
			e.ProviderError = &protocol.ProviderError{Provider: "openai", HTTPStatus: 503, RequestID: "req_1"}
			e.RetryAfterMs = 1500
		}
		add(protocol.EventFailed, pick(rng, mustJSON(protocol.FailedData{Error: e}), json.RawMessage(`{"error":null}`)))
	}
	return evs
}

// Pools that make events collide: a few output indexes and call ids, so that parts
// interleave, calls share indexes and fragments arrive for calls not yet started.
var (
	outputIndexes = []int{0, 0, 1, 2, 5, -3}
	callIDs       = []string{"call_1", "call_2", "call_3", "", "call 4\n{x}"}
	callIndexes   = []int{0, 1, 1, 2, -1}
	texts         = []string{"a", "hello ", "é", "\n", `"quoted"`, "\u2028", "🙂", "\x00", "", " { ", "ü\t"}
)

func randomEvent(rng *rand.Rand) (protocol.EventType, json.RawMessage) {
	switch rng.IntN(20) {
	case 0:
		return protocol.EventRouteSelected, mustJSON(protocol.RouteSelectedData{
			Attempt: 1 + rng.IntN(3), Deployment: pick(rng, "ai/a", "ai/b", "other/c"),
			Provider: pick(rng, "openai", "anthropic"), Model: pick(rng, "m-a", "m-b"),
		})
	case 1:
		return protocol.EventAttemptFailed, pick(rng, mustJSON(protocol.AttemptFailedData{
			Attempt: 1, Deployment: "ai/a", Error: protocol.NewError(protocol.CodeRateLimited, "slow down"),
		}), nil)
	case 2, 3:
		return protocol.EventToolCallStarted, mustJSON(protocol.ToolCallStartedData{
			Index: pick(rng, callIndexes...), CallID: pick(rng, callIDs...), Name: pick(rng, "get_weather", "search", "a b\nc", "n\x00 %d", ""),
		})
	case 4, 5, 6:
		return protocol.EventToolCallArgsDelta, mustJSON(protocol.ToolCallArgsDeltaData{
			CallID: pick(rng, callIDs...), Delta: pick(rng, texts...) + pick(rng, `{"city":`, `"Paris"}`, "[1,", ""),
		})
	case 7:
		return protocol.EventProgress, pick(rng, mustJSON(protocol.ProgressData{Stage: protocol.StageRunning}), nil)
	case 8:
		return protocol.EventOutputResult, randomResult(rng)
	case 9:
		var usage []protocol.Usage
		for range rng.IntN(3) {
			usage = append(usage, protocol.Usage{
				Unit:     pick(rng, protocol.UnitInputTokens, protocol.UnitOutputTokens, "replicate.predict_seconds"),
				Quantity: pick(rng, 0, 12, 0.1, 1e-7, 3.5e12), Source: pick(rng, protocol.SourceProvider, protocol.SourceRuntime),
			})
		}
		return protocol.EventUsageReported, pick(rng, mustJSON(protocol.UsageReportedData{Usage: usage}),
			json.RawMessage(`{"usage":null}`), json.RawMessage(`{ "usage" : [ {"unit":"requests","quantity":1,"source":"runtime"} ] }`))
	case 10:
		// A type this version does not know: its data is never decoded.
		return "x.future.event", pick(rng, json.RawMessage(`not JSON at all`), nil, json.RawMessage(`{"index":"x"}`))
	case 11:
		if rng.IntN(4) == 0 {
			return protocol.EventAccepted, nil // status goes back to accepted, as Apply has it
		}
		fallthrough
	default:
		d := protocol.OutputDeltaData{Index: pick(rng, outputIndexes...), Text: pick(rng, texts...)}
		switch rng.IntN(10) {
		case 0:
			// Raw bytes: invalid UTF-8 (decoded to U+FFFD), escapes, an unknown field.
			return protocol.EventOutputDelta, json.RawMessage(fmt.Sprintf("{\"index\":%d,\"text\":\"\xff\u00e9\\n\\ud83d\\ude42\\ud800\",\"extra\":[1]}", d.Index))
		case 1:
			d.Type = "image" // only the first delta of an index names its type
		case 2, 3, 4, 5, 6:
			d.Type = "text"
		}
		return protocol.EventOutputDelta, mustJSON(d)
	}
}

func randomResult(rng *rand.Rand) json.RawMessage {
	var artifacts []string
	for range rng.IntN(3) {
		a := fmt.Sprintf(`{"uri":"https://example.com/%d.png","media_type":"image/png"`, rng.IntN(100))
		if rng.IntN(2) == 0 {
			a += `,"size_bytes":1024,"expires_at":"2026-12-02T15:00:00.5+02:00"`
		}
		artifacts = append(artifacts, a+"}")
	}
	list := "[" + strings.Join(artifacts, ",") + "]"
	return json.RawMessage(pick(rng,
		`{"result": {"a": [1, 2], "b": "x"}, "artifacts": `+list+`}`,
		`{"result":"text result","artifacts":`+list+`}`,
		`{"result":null,"artifacts":[]}`,
		`{"artifacts":`+list+`}`,
		`{}`,
	))
}

// testSnapshotRejectsUndecodableData appends events whose data does not decode as their
// type's data. Apply would reject them and Materialize would stop at them, so the store
// refuses them with ErrInvalid and stores and folds nothing; the checks on sequence and
// terminal state still come first. Types that are not folded keep any data.
func testSnapshotRejectsUndecodableData(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	id := create(t, h.Store)
	stored := []protocol.Event{
		event(id, 1, protocol.EventAccepted),
		withData(event(id, 2, protocol.EventOutputDelta), `{"index":0,"text":"kept"}`),
	}
	appendAll(t, h.Store, stored)
	bad := []struct {
		typ  protocol.EventType
		data string // "nil": no data
	}{
		{protocol.EventOutputDelta, "nil"},
		{protocol.EventOutputDelta, `"text"`},
		{protocol.EventOutputDelta, `{"index":"0","text":"x"}`},
		{protocol.EventOutputDelta, `{"index":0,"text":5}`},
		{protocol.EventOutputDelta, `{"index":0,"text":"x"`},
		{protocol.EventToolCallStarted, `{"index":1.5,"call_id":"c","name":"n"}`},
		{protocol.EventToolCallArgsDelta, `{"call_id":"c","delta":[]}`},
		{protocol.EventOutputResult, `{"artifacts":{}}`},
		{protocol.EventOutputResult, `{"artifacts":[{"uri":"u","media_type":"m","size_bytes":"1"}]}`},
		{protocol.EventUsageReported, `{"usage":[{"unit":"requests","quantity":"1","source":"runtime"}]}`},
		{protocol.EventUsageReported, `{"usage":[{"quantity":1e400}]}`},
		{protocol.EventRouteSelected, "nil"},
		{protocol.EventRouteSelected, `[]`},
		{protocol.EventCompleted, "nil"},
		{protocol.EventCompleted, `{"finish_reason":1}`},
		{protocol.EventFailed, `{"error":"failed"}`},
		{protocol.EventFailed, ""},
	}
	for _, tc := range bad {
		ev := withData(event(id, 3, tc.typ), tc.data)
		for i, s := range []eventstore.Log{h.Store, h.Peer} {
			if err := s.Append(ctx, eventstore.NoFence, ev); !errors.Is(err, eventstore.ErrInvalid) {
				t.Errorf("Append #%d of %s with data %q: got %v, want ErrInvalid", i+1, tc.typ, tc.data, err)
			}
		}
		gap := ev
		gap.Sequence = 5
		if err := h.Store.Append(ctx, eventstore.NoFence, gap); !errors.Is(err, eventstore.ErrSequence) {
			t.Errorf("Append of %s with data %q out of sequence: got %v, want ErrSequence", tc.typ, tc.data, err)
		}
	}
	checkEvents(t, h.Peer, id, stored)
	checkFold(t, h, id, 2)

	// Types whose data is not folded take any data, or none.
	free := []protocol.Event{
		withData(event(id, 3, protocol.EventProgress), "nil"),
		withData(event(id, 4, protocol.EventAttemptFailed), `"not an object"`),
		withData(event(id, 5, "x.future.event"), `not JSON`),
		withData(event(id, 6, protocol.EventAccepted), `{"ability":1}`),
	}
	appendAll(t, h.Store, free)
	stored = append(stored, free...)
	checkFold(t, h, id, 6)

	end := withData(event(id, 7, protocol.EventCompleted), `{"finish_reason":"stop"}`)
	appendAll(t, h.Store, []protocol.Event{end})
	stored = append(stored, end)
	if err := h.Peer.Append(ctx, eventstore.NoFence, withData(event(id, 8, protocol.EventCompleted), "nil")); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Append of an undecodable event after the terminal event: got %v, want ErrTerminated", err)
	}
	checkEvents(t, h.Peer, id, stored)
	checkFold(t, h, id, 7)
}

// testSnapshotCopies checks that a returned Snapshot and Status are the caller's own:
// mutating them, pointers included, changes nothing stored.
func testSnapshotCopies(t *testing.T, h Harness[eventstore.Log]) {
	ctx := t.Context()
	id := create(t, h.Store)
	failure := protocol.NewError(protocol.CodeProviderRejected, "rejected")
	failure.ProviderError = &protocol.ProviderError{Provider: "openai", HTTPStatus: 401}
	evs := []protocol.Event{
		event(id, 1, protocol.EventAccepted),
		withData(event(id, 2, protocol.EventRouteSelected), `{"attempt":1,"deployment":"ai/a","provider":"openai","model":"m"}`),
		withData(event(id, 3, protocol.EventOutputDelta), `{"index":0,"type":"text","text":"hi"}`),
		withData(event(id, 4, protocol.EventToolCallStarted), `{"index":1,"call_id":"c1","name":"f"}`),
		withData(event(id, 5, protocol.EventOutputResult),
			`{"result":{"x":1},"artifacts":[{"uri":"u","media_type":"m","size_bytes":7,"expires_at":"2026-12-02T15:00:00Z"}]}`),
		withData(event(id, 6, protocol.EventUsageReported), `{"usage":[{"unit":"requests","quantity":1,"source":"runtime"}]}`),
		{ExecutionID: id, Sequence: 7, Timestamp: base.Add(7 * time.Millisecond), Type: protocol.EventFailed,
			Data: mustJSON(protocol.FailedData{Error: failure})},
	}
	appendAll(t, h.Store, evs)
	want := protocol.Materialize(id, evs)

	snap, err := h.Store.Snapshot(ctx, id)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	snap.Output[0].Index = 9
	snap.ToolCalls[0].Name = "g"
	snap.Result[0] = 'X'
	*snap.Artifacts[0].SizeBytes = 8
	*snap.Artifacts[0].ExpiresAt = base
	snap.Usage[0].Quantity = 2
	snap.Error.Message = "changed"
	snap.Error.ProviderError.HTTPStatus = 500
	got, err := h.Store.Snapshot(ctx, id)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if diff := cmp.Diff(want, got, ignoreFold); diff != "" {
		t.Errorf("mutating a returned Snapshot changed the store (-want +got):\n%s", diff)
	}

	st := status(t, h.Store, id)
	st.Route.Model = "changed"
	st.Error.Code = protocol.CodeInternal
	st.Error.ProviderError.Provider = "changed"
	st = status(t, h.Store, id)
	if st.Route.Model != "m" || !cmp.Equal(st.Error, failure) {
		t.Errorf("mutating a returned Status changed the store: route %+v, error %+v", st.Route, st.Error)
	}
}

// withData returns ev with data as its payload; "nil" means none.
func withData(ev protocol.Event, data string) protocol.Event {
	ev.Data = nil
	if data != "nil" {
		ev.Data = json.RawMessage(data)
	}
	return ev
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func pick[T any](rng *rand.Rand, choices ...T) T {
	return choices[rng.IntN(len(choices))]
}
