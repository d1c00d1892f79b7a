package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

const testExec = "exe_06h44pjtsdr2ffy3487y2fqe0z0317zcbrxg"

var testStart = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

// execution builds an execution's events from (type, data) pairs, numbered from 1 after
// execution.accepted.
func execution(pairs ...any) []protocol.Event {
	evs := []protocol.Event{{ExecutionID: testExec, Sequence: 1, Timestamp: testStart, Type: protocol.EventAccepted,
		Data: json.RawMessage(`{"ability":"chat","deadline_at":"2026-12-02T13:05:00Z"}`)}}
	for i := 0; i < len(pairs); i += 2 {
		seq := uint64(len(evs) + 1)
		evs = append(evs, protocol.Event{ExecutionID: testExec, Sequence: seq,
			Timestamp: testStart.Add(time.Duration(seq) * time.Millisecond),
			Type:      pairs[i].(protocol.EventType), Data: json.RawMessage(pairs[i+1].(string))})
	}
	return evs
}

var (
	routeEv = []any{protocol.EventRouteSelected, `{"attempt":1,"deployment":"e2e/echo","provider":"openai-compatible","model":"echo"}`}
	usageEv = []any{protocol.EventUsageReported, `{"usage":[{"unit":"input_tokens","quantity":3,"source":"provider"},{"unit":"output_tokens","quantity":2,"source":"provider"}]}`}
)

func text(index int, s string) []any {
	return []any{protocol.EventOutputDelta, fmt.Sprintf(`{"index":%d,"type":"text","text":%q}`, index, s)}
}

func join(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// mixed is an execution with everything the projection maps: a fallback, text, two
// interleaved tool calls (one whose fragment precedes its start), usage, progress and
// the end.
func mixed() []protocol.Event {
	return execution(join(
		[]any{protocol.EventAttemptFailed, `{"attempt":1,"deployment":"e2e/flaky","error":{"code":"provider_unavailable","message":"x","retryable":true}}`},
		routeEv,
		[]any{protocol.EventProgress, `{"stage":"running"}`},
		text(0, "Hel"),
		[]any{protocol.EventToolCallStarted, `{"index":0,"call_id":"call_a","name":"get_weather"}`},
		text(0, "lo"),
		[]any{protocol.EventToolCallArgsDelta, `{"call_id":"call_b","delta":"{\"q\""}`},
		[]any{protocol.EventToolCallArgsDelta, `{"call_id":"call_a","delta":"{\"city\":"}`},
		[]any{protocol.EventToolCallStarted, `{"index":1,"call_id":"call_b","name":"search"}`},
		[]any{protocol.EventToolCallArgsDelta, `{"call_id":"call_a","delta":"\"Paris\"}"}`},
		[]any{protocol.EventToolCallArgsDelta, `{"call_id":"call_b","delta":":1}"}`},
		usageEv,
		[]any{protocol.EventCompleted, `{"finish_reason":"tool_calls"}`},
	)...)
}

// project runs a fresh projection over evs, fed in batches of size batch, writing the
// events numbered above after.
func project(evs []protocol.Event, after int64, batch int) ([]byte, *respProjection) {
	p := newRespProjection(respView{id: testExec, createdAt: testStart, metadata: map[string]string{"team": "a"}}, after)
	var out []byte
	for len(evs) > 0 {
		n := min(batch, len(evs))
		for i := range evs[:n] {
			out = p.apply(out, &evs[i])
		}
		evs = evs[n:]
	}
	return out, p
}

// frame is one parsed SSE frame.
type frame struct {
	event string
	data  string
}

func frames(t *testing.T, stream []byte) []frame {
	t.Helper()
	var out []frame
	for _, block := range strings.Split(strings.TrimSuffix(string(stream), "\n\n"), "\n\n") {
		if block == "" || strings.HasPrefix(block, ":") {
			continue // a keep-alive comment
		}
		lines := strings.Split(block, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") || !strings.HasPrefix(lines[1], "data: ") {
			t.Fatalf("malformed frame %q", block)
		}
		out = append(out, frame{strings.TrimPrefix(lines[0], "event: "), strings.TrimPrefix(lines[1], "data: ")})
	}
	return out
}

func TestProjectionNumbersEveryEventOnce(t *testing.T) {
	full, p := project(mixed(), -1, 1000)
	fs := frames(t, full)
	var types []string
	for i, f := range fs {
		var head struct {
			Type           string `json:"type"`
			SequenceNumber int64  `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(f.data), &head); err != nil {
			t.Fatalf("frame %d: %v: %s", i, err, f.data)
		}
		if head.SequenceNumber != int64(i) || head.Type != f.event {
			t.Errorf("frame %d: event %s, type %s, sequence_number %d", i, f.event, head.Type, head.SequenceNumber)
		}
		types = append(types, f.event)
		// Every frame decodes as the official SDK's stream event.
		var ev responses.ResponseStreamEventUnion
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.Type != f.event {
			t.Errorf("frame %d does not decode as openai-go's event: %v", i, err)
		}
	}
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", // Hel
		"response.output_item.added",                                           // call_a
		"response.output_text.delta",                                           // lo
		"response.function_call_arguments.delta",                               // call_a
		"response.output_item.added", "response.function_call_arguments.delta", // call_b and its early fragment
		"response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.completed",
	}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Fatalf("event types (-want +got):\n%s", diff)
	}
	if p.next != int64(len(want)) {
		t.Errorf("next = %d, want %d", p.next, len(want))
	}

	var done responses.ResponseCompletedEvent
	if err := json.Unmarshal([]byte(fs[len(fs)-1].data), &done); err != nil {
		t.Fatal(err)
	}
	r := done.Response
	if r.ID != testExec || r.Status != "completed" || r.Model != "echo" || r.OutputText() != "Hello" || r.Metadata["team"] != "a" {
		t.Errorf("completed response: id %s, status %s, model %s, text %q, metadata %v", r.ID, r.Status, r.Model, r.OutputText(), r.Metadata)
	}
	if len(r.Output) != 3 || r.Output[1].CallID != "call_a" || r.Output[1].Arguments.OfString != `{"city":"Paris"}` ||
		r.Output[2].Name != "search" || r.Output[2].Arguments.OfString != `{"q":1}` {
		t.Errorf("completed output: %s", fs[len(fs)-1].data)
	}
	if r.Usage.InputTokens != 3 || r.Usage.OutputTokens != 2 || r.Usage.TotalTokens != 5 {
		t.Errorf("usage: %+v", r.Usage)
	}
}

// TestProjectionResumes: for every N, resuming after N writes exactly the frames of the
// full projection numbered above N, byte for byte, however the events are batched.
func TestProjectionResumes(t *testing.T) {
	for name, evs := range map[string][]protocol.Event{
		"mixed":          mixed(),
		"two text parts": execution(join(routeEv, text(0, "a"), text(1, "b"), text(0, "c"), []any{protocol.EventCompleted, `{}`})...),
		"failed":         execution(join(routeEv, text(0, "partial"), []any{protocol.EventFailed, `{"error":{"code":"provider_unavailable","message":"the provider is unavailable","retryable":false}}`})...),
	} {
		t.Run(name, func(t *testing.T) {
			full, _ := project(evs, -1, 1000)
			fs := frames(t, full)
			for n := -1; n <= len(fs); n++ {
				for _, batch := range []int{1, 3, 1000} {
					got, _ := project(evs, int64(n), batch)
					var want []byte
					for _, f := range fs[min(max(n+1, 0), len(fs)):] {
						want = append(want, "event: "+f.event+"\ndata: "+f.data+"\n\n"...)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("resume after %d in batches of %d:\n got %s\nwant %s", n, batch, got, want)
					}
				}
			}
		})
	}
}

// TestProjectionOfPartialLog: the projection of a prefix of the log is a prefix of the
// projection of the whole log, so a live stream and a later replay agree.
func TestProjectionOfPartialLog(t *testing.T) {
	evs := mixed()
	full, _ := project(evs, -1, 1000)
	for n := range evs {
		got, _ := project(evs[:n], -1, 1000)
		if !bytes.HasPrefix(full, got) {
			t.Fatalf("projection of the first %d events is not a prefix of the full one", n)
		}
	}
}

func TestProjectionEnds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pairs      []any
		last       string
		status     string
		incomplete string
		errCode    string
	}{
		{"length", join(routeEv, text(0, "abc"), []any{protocol.EventCompleted, `{"finish_reason":"length"}`}),
			"response.incomplete", "incomplete", "max_output_tokens", ""},
		{"anthropic max_tokens", join(routeEv, text(0, "abc"), []any{protocol.EventCompleted, `{"finish_reason":"max_tokens"}`}),
			"response.incomplete", "incomplete", "max_output_tokens", ""},
		{"filter", join(routeEv, text(0, "abc"), []any{protocol.EventCompleted, `{"finish_reason":"SAFETY"}`}),
			"response.incomplete", "incomplete", "content_filter", ""},
		{"cancelled", join(routeEv, text(0, "abc"), []any{protocol.EventFailed, `{"error":{"code":"cancelled","message":"the execution was cancelled","retryable":false}}`}),
			"response.failed", "cancelled", "", "cancelled"},
		{"failed before any route", []any{protocol.EventFailed, `{"error":{"code":"deadline_exceeded","message":"the deadline passed","retryable":false}}`},
			"response.failed", "failed", "", "deadline_exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := project(execution(tc.pairs...), -1, 1000)
			fs := frames(t, out)
			if fs[0].event != "response.created" || fs[len(fs)-1].event != tc.last {
				t.Fatalf("first %s, last %s; want response.created, %s", fs[0].event, fs[len(fs)-1].event, tc.last)
			}
			var ev struct {
				Response responses.Response `json:"response"`
			}
			if err := json.Unmarshal([]byte(fs[len(fs)-1].data), &ev); err != nil {
				t.Fatal(err)
			}
			r := ev.Response
			if string(r.Status) != tc.status || r.IncompleteDetails.Reason != tc.incomplete || string(r.Error.Code) != tc.errCode {
				t.Errorf("status %s, incomplete %q, error %q; want %s, %q, %q", r.Status, r.IncompleteDetails.Reason, r.Error.Code,
					tc.status, tc.incomplete, tc.errCode)
			}
		})
	}
}

// TestProjectionTextParts: each native output part is a message of its own, its deltas
// concatenated whatever came between them.
func TestProjectionTextParts(t *testing.T) {
	_, p := project(execution(join(routeEv, text(0, "a"), text(1, "b"), text(0, "c"), []any{protocol.EventCompleted, `{}`})...), -1, 1000)
	if len(p.view.items) != 2 || p.view.items[0].body.String() != "ac" || p.view.items[1].body.String() != "b" ||
		p.view.items[1].id != messageID(testExec, 1) {
		t.Errorf("items %+v", p.view.items)
	}
}

// TestProjectionIgnoresWhatFollowsTheEnd: nothing after the terminal event is written,
// and undecodable data maps to nothing (the store records neither).
func TestProjectionIgnoresWhatFollowsTheEnd(t *testing.T) {
	evs := execution(join(routeEv, text(0, "a"), []any{protocol.EventOutputDelta, `{"index":"x"}`},
		[]any{protocol.EventCompleted, `{}`}, text(0, "late"))...)
	out, p := project(evs, -1, 1000)
	if strings.Contains(string(out), "late") || !strings.HasSuffix(frames(t, out)[len(frames(t, out))-1].event, "completed") {
		t.Errorf("projection wrote past the end: %s", out)
	}
	if got := p.view.items[0].body.String(); got != "a" {
		t.Errorf("text %q, want a", got)
	}
}

// TestObjectAgreesWithStream: the response read from the status and snapshot equals the
// stream's final response when text comes before the calls.
func TestObjectAgreesWithStream(t *testing.T) {
	evs := execution(join(routeEv, text(0, "Hi"),
		[]any{protocol.EventToolCallStarted, `{"index":0,"call_id":"call_a","name":"get_weather"}`},
		[]any{protocol.EventToolCallArgsDelta, `{"call_id":"call_a","delta":"{}"}`},
		usageEv, []any{protocol.EventCompleted, `{"finish_reason":"tool_calls"}`})...)
	out, _ := project(evs, -1, 1000)
	fs := frames(t, out)
	var done struct {
		Response json.RawMessage `json:"response"`
	}
	if err := json.Unmarshal([]byte(fs[len(fs)-1].data), &done); err != nil {
		t.Fatal(err)
	}
	snap := protocol.Materialize(testExec, evs)
	st := kitStatusOf(evs, map[string]string{"team": "a"})
	got := appendResponse(nil, responseFromStatus(st, &snap))
	if !bytes.Equal(got, done.Response) {
		t.Errorf("object from status and snapshot:\n%s\nstream's final response:\n%s", got, done.Response)
	}
}
