package bedrock_test

import (
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestGeneration: each generation option Converse takes becomes its inferenceConfig or
// toolConfig.toolChoice field, a bedrock.* key wins over the generation key of its
// field, and the rest (top_k, seed, a temperature over 1, tool choice none, JSON and
// structured output) is declined.
func TestGeneration(t *testing.T) {
	const unsupported = protocol.CodeUnsupportedCapability
	all := providertest.AllInput | routing.CapsOf(protocol.CapOutputJSON, protocol.CapStructuredOutput)
	const toolSpec = `{"toolSpec":{"name":"get_weather","inputSchema":{"json":{"type":"object"}}}}`
	providertest.CheckGeneration(t, subject, []providertest.GenerationCase{
		{Name: "sampling", Extensions: `"generation.max_output_tokens":512,"generation.temperature":0.7,"generation.top_p":0.9,` +
			`"generation.stop":["END","\n\nHuman:"]`,
			Want: `{"inferenceConfig":{"maxTokens":512,"temperature":0.7,"topP":0.9,"stopSequences":["END","\n\nHuman:"]}}`},
		{Name: "merged with bedrock keys, which win", Extensions: `"generation.max_output_tokens":512,"bedrock.max_tokens":64,` +
			`"generation.temperature":1.5,"bedrock.temperature":0.3,"generation.stop":["A"],"bedrock.stop_sequences":["B"],"generation.top_p":0.5`,
			Want: `{"inferenceConfig":{"maxTokens":64,"temperature":0.3,"topP":0.5,"stopSequences":["B"]}}`},
		{Name: "tool choice auto", Extensions: `"generation.tool_choice":"auto"`, Tool: true,
			Want: `{"toolConfig":{"tools":[` + toolSpec + `],"toolChoice":{"auto":{}}}}`},
		{Name: "tool choice required", Extensions: `"generation.tool_choice":"required"`, Tool: true,
			Want: `{"toolConfig":{"tools":[` + toolSpec + `],"toolChoice":{"any":{}}}}`},
		{Name: "tool choice of one tool", Extensions: `"generation.tool_choice":"tool:get_weather"`, Tool: true,
			Want: `{"toolConfig":{"tools":[` + toolSpec + `],"toolChoice":{"tool":{"name":"get_weather"}}}}`},
		{Name: "tool choice none without tools sends nothing", Extensions: `"generation.tool_choice":"none"`,
			Want: `{}`, Absent: []string{"toolConfig", "inferenceConfig"}},
		{Name: "tool choice none", Extensions: `"generation.tool_choice":"none"`, Tool: true, Refused: unsupported,
			Message: "a tool choice of none is not supported by the bedrock adapter"},
		{Name: "an undefined tool", Extensions: `"generation.tool_choice":"tool:other"`, Tool: true, Refused: protocol.CodeInvalidRequest},
		{Name: "temperature over 1", Extensions: `"generation.temperature":1.5`, Refused: unsupported,
			Message: "the bedrock adapter takes temperatures from 0 to 1 only"},
		{Name: "top_k", Extensions: `"generation.top_k":40`, Refused: unsupported, Message: "top-k sampling is not supported by the bedrock adapter"},
		{Name: "seed", Extensions: `"generation.seed":7`, Refused: unsupported, Message: "a sampling seed is not supported by the bedrock adapter"},
		{Name: "json", Extensions: `"generation.response_format":"json"`, Caps: all, Refused: unsupported},
		{Name: "schema", Extensions: `"generation.response_schema":{}`, Caps: all, Refused: unsupported},
	})
}

// TestOutputCap: the deployment's output cap is inferenceConfig.maxTokens on every call;
// the request's generation.max_output_tokens or bedrock.max_tokens may only lower it,
// and a larger one is clamped to it, never refused.
func TestOutputCap(t *testing.T) {
	providertest.CheckGeneration(t, subject, []providertest.GenerationCase{
		{Name: "cap only", MaxOutputTokens: 1000, Want: `{"inferenceConfig":{"maxTokens":1000}}`},
		{Name: "caller lower", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":300`,
			Want: `{"inferenceConfig":{"maxTokens":300}}`},
		{Name: "caller higher", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":5000`,
			Want: `{"inferenceConfig":{"maxTokens":1000}}`},
		{Name: "provider key lower", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":5000,"bedrock.max_tokens":200`,
			Want: `{"inferenceConfig":{"maxTokens":200}}`},
		{Name: "provider key higher", MaxOutputTokens: 1000, Extensions: `"bedrock.max_tokens":9000,"bedrock.temperature":0.5`,
			Want: `{"inferenceConfig":{"maxTokens":1000,"temperature":0.5}}`},
	})
}
