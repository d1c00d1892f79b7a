package openai_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Without declared streaming the adapter makes one non-streaming call and emits the
// whole text as one delta.
func TestCompletionOneDelta(t *testing.T) {
	up := serve(t, jsonReply(http.StatusOK, testdata(t, "completion.json"), "x-request-id", "req_sbNONSTREAM"))
	res := execute(t, context.Background(), deployment(up.endpoint()), request(t, hello))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	usage := `{"usage":[` +
		`{"unit":"input_tokens","quantity":19,"source":"provider"},` +
		`{"unit":"output_tokens","quantity":10,"source":"provider"},` +
		`{"unit":"cache_read_tokens","quantity":0,"source":"provider"},` +
		`{"unit":"reasoning_tokens","quantity":0,"source":"provider"}]}`
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventOutputDelta, `{"index":0,"type":"text","text":"Hello! How can I assist you today?"}`),
		ev(protocol.EventUsageReported, usage),
	})
	diffJSON(t, "snapshot", res.snapshot(t), `{
		"id":"exe_test","status":"completed","sequence":3,
		"output":[{"index":0,"type":"text","text":"Hello! How can I assist you today?"}],
		"tool_calls":[],"artifacts":[],
		"usage":[
			{"unit":"input_tokens","quantity":19,"source":"provider"},
			{"unit":"output_tokens","quantity":10,"source":"provider"},
			{"unit":"cache_read_tokens","quantity":0,"source":"provider"},
			{"unit":"reasoning_tokens","quantity":0,"source":"provider"}],
		"finish_reason":"stop"}`)
	got := up.only(t)
	if a := got.Header.Get("Accept"); a != "application/json" {
		t.Errorf("Accept = %q", a)
	}
	// No stream fields at all: a plain call.
	diffJSON(t, "request body", string(got.Body), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}]}`)
}

func TestCompletionToolCalls(t *testing.T) {
	up := serve(t, jsonReply(http.StatusOK, testdata(t, "completion_tools.json")))
	res := execute(t, context.Background(), deployment(up.endpoint(), with(protocol.CapTools)), request(t, hello))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	const id = "call_sbBOSTON00000000000000001"
	diffEvents(t, res.events, []enginetest.Emitted{
		ev(protocol.EventToolCallStarted, `{"index":0,"call_id":"`+id+`","name":"get_current_weather"}`),
		ev(protocol.EventToolCallArgsDelta, `{"call_id":"`+id+`","delta":"{\n\"location\": \"Boston, MA\"\n}"}`),
		ev(protocol.EventUsageReported, `{"usage":[`+
			`{"unit":"input_tokens","quantity":82,"source":"provider"},`+
			`{"unit":"output_tokens","quantity":17,"source":"provider"},`+
			`{"unit":"reasoning_tokens","quantity":0,"source":"provider"}]}`),
	})
	diffJSON(t, "snapshot", res.snapshot(t), `{
		"id":"exe_test","status":"completed","sequence":4,"output":[],
		"tool_calls":[{"index":0,"call_id":"`+id+`","name":"get_current_weather","arguments":"{\n\"location\": \"Boston, MA\"\n}"}],
		"artifacts":[],
		"usage":[
			{"unit":"input_tokens","quantity":82,"source":"provider"},
			{"unit":"output_tokens","quantity":17,"source":"provider"},
			{"unit":"reasoning_tokens","quantity":0,"source":"provider"}],
		"finish_reason":"tool_calls"}`)
}

// A compatible server that ignores stream:true and answers with one JSON completion is
// read as such.
func TestStreamingDeploymentJSONAnswer(t *testing.T) {
	up := serve(t, jsonReply(http.StatusOK, testdata(t, "completion.json")))
	res := execute(t, context.Background(), deployment(up.endpoint(), streaming()), request(t, hello))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	if len(res.events) != 2 || res.events[0].Type != protocol.EventOutputDelta {
		t.Errorf("events = %v, want one delta and usage", res.events)
	}
}

func TestCompletionMalformed(t *testing.T) {
	for name, body := range map[string]string{
		"not json":   `<html>bad gateway</html>`,
		"no choices": `{"id":"chatcmpl-x","object":"chat.completion","choices":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			up := serve(t, jsonReply(http.StatusOK, []byte(body)))
			res := execute(t, context.Background(), deployment(up.endpoint()), request(t, hello))
			want := &protocol.Error{
				Code: protocol.CodeProviderUnavailable, Message: "the provider's response could not be read", Retryable: true,
				ProviderError: &protocol.ProviderError{Provider: "openai"},
			}
			if d := cmp.Diff(want, res.protoErr(t)); d != "" {
				t.Errorf("error (-want +got):\n%s", d)
			}
		})
	}
}

func TestCompletionRefusal(t *testing.T) {
	body := `{"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I'm sorry, I cannot help with that."},"finish_reason":"stop"}]}`
	up := serve(t, jsonReply(http.StatusOK, []byte(body)))
	res := execute(t, context.Background(), deployment(up.endpoint()), request(t, hello))
	if pe := res.protoErr(t); pe.Code != protocol.CodeContentFiltered || pe.Retryable {
		t.Errorf("error = %+v, want content_filtered", pe)
	}
	diffEvents(t, res.events, nil)
}

// A provider that never answers: the call ends with the attempt's context, not later.
func TestCompletionNoAnswer(t *testing.T) {
	up := serve(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	const deadline = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	res := execute(t, ctx, deployment(up.endpoint()), request(t, hello))
	if pe := res.protoErr(t); pe.Code != protocol.CodeProviderTimeout {
		t.Errorf("error = %+v, want provider_timeout", pe)
	}
	if took := time.Since(start); took > deadline+2*time.Second {
		t.Errorf("Execute returned after %s", took)
	}
}
