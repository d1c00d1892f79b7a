package bedrock_test

import (
	"net/http"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Non-streaming Converse answers (testdata/converse_*.json).

func TestConverseText(t *testing.T) {
	up := newUpstream(t, jsonReply(http.StatusOK, testdata(t, "converse_text.json")))
	res := run(t, deployment(up.URL), hello(t))
	if res.err != nil || res.outcome.FinishReason != "end_turn" {
		t.Fatalf("Execute = %+v, %v", res.outcome, res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Hello! How can I help?"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 12), enginetest.ProviderUsage(protocol.UnitOutputTokens, 9)),
	})
	c := up.only(t)
	if c.Header.Get("Accept") != "application/json" {
		t.Errorf("Accept = %q", c.Header.Get("Accept"))
	}
}

// TestConverseToolUse: the text is one delta, each toolUse a started event and one
// arguments delta holding its compact input, then usage with the cache reads.
func TestConverseToolUse(t *testing.T) {
	up := newUpstream(t, jsonReply(http.StatusOK, testdata(t, "converse_tool_use.json")))
	req := decode(t, `{"ability":"chat","input":[{"type":"text","text":"Weather?"},{"type":"tool","name":"get_weather","parameters":{}}]}`)
	res := run(t, deployment(up.URL, withCaps(protocol.CapTools)), req)
	if res.err != nil || res.outcome.FinishReason != "tool_use" {
		t.Fatalf("Execute = %+v, %v", res.outcome, res.err)
	}
	const id = "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Let me check the weather."),
		enginetest.ToolStarted(0, id, "get_weather"),
		enginetest.ArgsDelta(id, `{"city":"Paris","unit":"celsius"}`),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 402), enginetest.ProviderUsage(protocol.UnitOutputTokens, 57),
			enginetest.ProviderUsage(protocol.UnitCacheReadTokens, 128), enginetest.ProviderUsage(protocol.UnitCacheWriteTokens, 0)),
	})
	if snap := materialize(t, res); len(snap.ToolCalls) != 1 || snap.ToolCalls[0].Arguments != `{"city":"Paris","unit":"celsius"}` {
		t.Errorf("snapshot tool calls = %+v", snap.ToolCalls)
	}
}

func TestConverseGuardrail(t *testing.T) {
	up := newUpstream(t, jsonReply(http.StatusOK, testdata(t, "converse_guardrail.json")))
	res := run(t, deployment(up.URL), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeContentFiltered || pe.Retryable || pe.ProviderError.Code != "guardrail_intervened" {
		t.Errorf("error %+v", pe)
	}
}

func TestConverseUnreadable(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":   `<html>oops</html>`,
		"no output":  `{"stopReason":"end_turn"}`,
		"no message": `{"output":{}}`,
		"bad tool":   `{"output":{"message":{"content":[{"toolUse":{"toolUseId":"a b","name":"f","input":{}}}]}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, jsonReply(http.StatusOK, []byte(body)))
			res := run(t, deployment(up.URL, withCaps(protocol.CapTools)), hello(t))
			if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
				t.Errorf("error %+v", pe)
			}
		})
	}
}
