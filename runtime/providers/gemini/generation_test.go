package gemini_test

import (
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// generationCases: each generation option becomes its generationConfig or toolConfig
// field, the same on both providers; a gemini.* key wins over the generation key of its
// field; a seed beyond 32 bits, and JSON or structured output the deployment does not
// declare, are declined.
func generationCases() []providertest.GenerationCase {
	const unsupported = protocol.CodeUnsupportedCapability
	jsonOut := providertest.TextJSON | routing.CapsOf(protocol.CapOutputJSON)
	structured := providertest.TextJSON | routing.CapsOf(protocol.CapStructuredOutput)
	schema := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	return []providertest.GenerationCase{
		{Name: "sampling", Extensions: `"generation.max_output_tokens":512,"generation.temperature":1.5,"generation.top_p":0.9,` +
			`"generation.top_k":40,"generation.stop":["END"],"generation.seed":-2147483648`,
			Want: `{"generationConfig":{"temperature":1.5,"topP":0.9,"topK":40,"maxOutputTokens":512,"seed":-2147483648,"stopSequences":["END"]}}`},
		{Name: "merged with gemini keys, which win", Extensions: `"generation.temperature":1.5,"gemini.temperature":0.1,` +
			`"generation.stop":["A"],"gemini.stop_sequences":["B"],"generation.seed":1099511627776,"gemini.seed":3,` +
			`"generation.top_p":0.5,"gemini.thinking_budget":0`,
			Want: `{"generationConfig":{"temperature":0.1,"topP":0.5,"seed":3,"stopSequences":["B"],"thinkingConfig":{"thinkingBudget":0}}}`},
		{Name: "json", Extensions: `"generation.response_format":"json"`, Caps: jsonOut,
			Want: `{"generationConfig":{"responseMimeType":"application/json"}}`},
		{Name: "schema", Extensions: `"generation.response_schema":` + schema + `,"generation.response_schema_name":"city"`, Caps: structured,
			Want: `{"generationConfig":{"responseMimeType":"application/json","responseJsonSchema":` + schema + `}}`},
		{Name: "tool choice auto", Extensions: `"generation.tool_choice":"auto"`, Tool: true,
			Want: `{"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}}`},
		{Name: "tool choice none", Extensions: `"generation.tool_choice":"none"`, Tool: true,
			Want: `{"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}}`},
		{Name: "tool choice required", Extensions: `"generation.tool_choice":"required"`, Tool: true,
			Want: `{"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`},
		{Name: "tool choice of one tool", Extensions: `"generation.tool_choice":"tool:get_weather"`, Tool: true,
			Want: `{"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}}`},
		{Name: "tool choice without tools sends nothing", Extensions: `"generation.tool_choice":"auto"`,
			Want: `{}`, Absent: []string{"toolConfig", "generationConfig"}},
		{Name: "an undefined tool", Extensions: `"generation.tool_choice":"tool:other"`, Tool: true, Refused: protocol.CodeInvalidRequest},
		{Name: "a 64-bit seed", Extensions: `"generation.seed":1099511627776`, Refused: unsupported,
			Message: "the gemini adapter takes 32-bit seeds only"},
		{Name: "json undeclared", Extensions: `"generation.response_format":"json"`, Caps: structured, Refused: unsupported,
			Message: "the deployment does not declare JSON output (output.json)"},
		{Name: "schema undeclared", Extensions: `"generation.response_schema":{}`, Caps: jsonOut, Refused: unsupported,
			Message: "the deployment does not declare structured output (structured_output)"},
		// The deployment's output cap is maxOutputTokens on every call; the request's
		// generation.max_output_tokens or gemini.max_output_tokens may only lower it, and
		// a larger one is clamped to it, never refused.
		{Name: "cap only", MaxOutputTokens: 1000, Want: `{"generationConfig":{"maxOutputTokens":1000}}`},
		{Name: "caller lower than the cap", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":300`,
			Want: `{"generationConfig":{"maxOutputTokens":300}}`},
		{Name: "caller higher than the cap", MaxOutputTokens: 1000, Extensions: `"generation.max_output_tokens":5000`,
			Want: `{"generationConfig":{"maxOutputTokens":1000}}`},
		{Name: "provider key lower than the cap", MaxOutputTokens: 1000,
			Extensions: `"generation.max_output_tokens":5000,"gemini.max_output_tokens":200`,
			Want:       `{"generationConfig":{"maxOutputTokens":200}}`},
		{Name: "provider key higher than the cap", MaxOutputTokens: 1000,
			Extensions: `"gemini.max_output_tokens":9000,"gemini.temperature":0.5`,
			Want:       `{"generationConfig":{"temperature":0.5,"maxOutputTokens":1000}}`},
	}
}

func TestGenerationGemini(t *testing.T) {
	providertest.CheckGeneration(t, subject(func(endpoint string) *routing.Deployment { return geminiDeployment(endpoint) }), generationCases())
}

func TestGenerationVertex(t *testing.T) {
	sa, _ := newTokenServer(t).account(0, "sbkey0generation")
	providertest.CheckGeneration(t, subject(func(endpoint string) *routing.Deployment { return vertexDeployment(endpoint, sa) }), generationCases())
}
