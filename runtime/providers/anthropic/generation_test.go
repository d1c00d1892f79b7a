package anthropic_test

import (
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestGeneration: each generation option becomes its Messages API field, an
// anthropic.* key wins over the generation key of its field, and what the API cannot
// honour (a temperature over 1, a seed, JSON or structured output) is declined.
func TestGeneration(t *testing.T) {
	const unsupported = protocol.CodeUnsupportedCapability
	all := providertest.AllInput | routing.CapsOf(protocol.CapOutputJSON, protocol.CapStructuredOutput)
	providertest.CheckGeneration(t, subject, []providertest.GenerationCase{
		{Name: "sampling", Extensions: `"generation.max_output_tokens":512,"generation.temperature":0.7,"generation.top_p":0.9,` +
			`"generation.top_k":40,"generation.stop":["END","\n\nHuman:"]`,
			Want: `{"max_tokens":512,"temperature":0.7,"top_p":0.9,"top_k":40,"stop_sequences":["END","\n\nHuman:"]}`},
		{Name: "the default token cap stays without the option", Extensions: `"generation.top_p":1`,
			Want: `{"max_tokens":4096,"top_p":1}`, Absent: []string{"temperature", "top_k", "stop_sequences", "tool_choice"}},
		{Name: "anthropic keys win", Extensions: `"generation.max_output_tokens":512,"anthropic.max_tokens":100,` +
			`"generation.temperature":1.8,"anthropic.temperature":0.2,"generation.top_k":40,"anthropic.top_k":0`,
			Want: `{"max_tokens":100,"temperature":0.2,"top_k":0}`},
		{Name: "tool choice auto", Extensions: `"generation.tool_choice":"auto"`, Tool: true, Want: `{"tool_choice":{"type":"auto"}}`},
		{Name: "tool choice none", Extensions: `"generation.tool_choice":"none"`, Tool: true, Want: `{"tool_choice":{"type":"none"}}`},
		{Name: "tool choice required", Extensions: `"generation.tool_choice":"required"`, Tool: true, Want: `{"tool_choice":{"type":"any"}}`},
		{Name: "tool choice of one tool", Extensions: `"generation.tool_choice":"tool:get_weather"`, Tool: true,
			Want: `{"tool_choice":{"type":"tool","name":"get_weather"}}`},
		{Name: "tool choice without tools sends nothing", Extensions: `"generation.tool_choice":"none"`, Want: `{}`, Absent: []string{"tool_choice"}},
		{Name: "required without tools", Extensions: `"generation.tool_choice":"required"`, Refused: protocol.CodeInvalidRequest},
		{Name: "an undefined tool", Extensions: `"generation.tool_choice":"tool:other"`, Tool: true, Refused: protocol.CodeInvalidRequest},
		{Name: "temperature over 1", Extensions: `"generation.temperature":1.01`, Refused: unsupported,
			Message: "the anthropic adapter takes temperatures from 0 to 1 only"},
		{Name: "seed", Extensions: `"generation.seed":7`, Refused: unsupported, Message: "a sampling seed is not supported by the anthropic adapter"},
		{Name: "json", Extensions: `"generation.response_format":"json"`, Caps: all, Refused: unsupported,
			Message: "JSON output mode is not supported by the anthropic adapter"},
		{Name: "schema", Extensions: `"generation.response_schema":{"type":"object"}`, Caps: all, Refused: unsupported,
			Message: "structured output is not supported by the anthropic adapter"},
	})
}

// TestOutputCap: the deployment's output cap is max_tokens (which the API requires) when
// the request sets no limit — in place of DefaultMaxTokens, above it or below; the
// request's generation.max_output_tokens or anthropic.max_tokens may only lower it, and
// a larger one is clamped to it, never refused.
func TestOutputCap(t *testing.T) {
	providertest.CheckGeneration(t, subject, []providertest.GenerationCase{
		{Name: "cap only", MaxOutputTokens: 1000, Want: `{"max_tokens":1000}`},
		{Name: "cap only, above the default", MaxOutputTokens: 8192, Want: `{"max_tokens":8192}`},
		{Name: "caller lower", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":300`, Want: `{"max_tokens":300}`},
		{Name: "caller higher", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":5000`, Want: `{"max_tokens":1000}`},
		{Name: "provider key lower", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":5000,"anthropic.max_tokens":200`,
			Want: `{"max_tokens":200}`},
		{Name: "provider key higher", MaxOutputTokens: 1000, Extensions: `"anthropic.max_tokens":9000`, Want: `{"max_tokens":1000}`},
	})
}
