package openai_test

import (
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const weatherTool = `{"type":"tool","name":"get_weather","parameters":{"type":"object"}}`

// genRequest is a text request with the given generation keys and, when tools is set, a
// tool part.
func genRequest(ext string, tools bool) string {
	input := `{"type":"text","text":"hi"}`
	if tools {
		input += "," + weatherTool
	}
	return `{"ability":"chat","input":[` + input + `],"extensions":{` + ext + `}}`
}

func provider(name string) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.Provider = name }
}

// TestMapGeneration: each generation key becomes its Chat Completions field; the output
// token cap is max_completion_tokens on OpenAI and Azure OpenAI, max_tokens on
// compatible servers.
func TestMapGeneration(t *testing.T) {
	const ext = `"generation.max_output_tokens":256,"generation.temperature":1.5,"generation.top_p":0.9,` +
		`"generation.stop":["END","\n\nUser:"],"generation.seed":9007199254740993`
	const sampling = `"temperature":1.5,"top_p":0.9,`
	const rest = `,"seed":9007199254740993,"stop":["END","\n\nUser:"]`
	for _, tc := range []struct {
		provider, tokens string
	}{
		{openai.ProviderOpenAI, `"max_completion_tokens":256`},
		{openai.ProviderAzure, `"max_completion_tokens":256`},
		{openai.ProviderCompatible, `"max_tokens":256`},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			got := mapped(t, genRequest(ext, false), provider(tc.provider))
			diffJSON(t, "request body", got, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],`+
				sampling+tc.tokens+rest+`}`)
		})
	}
}

// TestMapToolChoice: auto, none and required are sent as OpenAI's words, tool:<name> as
// a named function; without tools auto and none send nothing (OpenAI refuses a tool
// choice without tools).
func TestMapToolChoice(t *testing.T) {
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	for choice, want := range map[string]string{
		"auto":             `"auto"`,
		"none":             `"none"`,
		"required":         `"required"`,
		"tool:get_weather": `{"type":"function","function":{"name":"get_weather"}}`,
	} {
		t.Run(choice, func(t *testing.T) {
			got := mapped(t, genRequest(`"generation.tool_choice":"`+choice+`"`, true), with(protocol.CapTools))
			diffJSON(t, "request body", got, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],`+
				tools+`,"tool_choice":`+want+`}`)
		})
	}
	for _, choice := range []string{"auto", "none"} {
		got := mapped(t, genRequest(`"generation.tool_choice":"`+choice+`"`, false))
		diffJSON(t, "request body", got, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	}
	// No model could honour these: invalid_request.
	refused(t, protocol.CodeInvalidRequest, request(t, genRequest(`"generation.tool_choice":"required"`, false)))
	refused(t, protocol.CodeInvalidRequest, request(t, genRequest(`"generation.tool_choice":"tool:other"`, true)), with(protocol.CapTools))
}

// TestMapResponseFormat: JSON mode is json_object, a schema json_schema in strict mode
// (named "response" unless the request names it), each only on a deployment declaring
// output.json or structured_output.
func TestMapResponseFormat(t *testing.T) {
	const messages = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],`
	got := mapped(t, genRequest(`"generation.response_format":"json"`, false), with(protocol.CapOutputJSON))
	diffJSON(t, "request body", got, messages+`"response_format":{"type":"json_object"}}`)

	schema := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`
	got = mapped(t, genRequest(`"generation.response_schema":`+schema, false), with(protocol.CapStructuredOutput))
	diffJSON(t, "request body", got, messages+`"response_format":{"type":"json_schema","json_schema":{"name":"response","schema":`+schema+`,"strict":true}}}`)

	got = mapped(t, genRequest(`"generation.response_format":"json","generation.response_schema_name":"weather","generation.response_schema":`+schema, false),
		with(protocol.CapStructuredOutput, protocol.CapOutputJSON))
	diffJSON(t, "request body", got, messages+`"response_format":{"type":"json_schema","json_schema":{"name":"weather","schema":`+schema+`,"strict":true}}}`)

	refused(t, protocol.CodeUnsupportedCapability, request(t, genRequest(`"generation.response_format":"json"`, false)))
	refused(t, protocol.CodeUnsupportedCapability, request(t, genRequest(`"generation.response_schema":{}`, false)), with(protocol.CapOutputJSON))
}

// TestGenerationDeclined: top_k is no Chat Completions field, so the request is declined
// (unsupported_capability, nothing sent) on every provider of the adapter.
func TestGenerationDeclined(t *testing.T) {
	for _, p := range []string{openai.ProviderOpenAI, openai.ProviderAzure, openai.ProviderCompatible} {
		refused(t, protocol.CodeUnsupportedCapability, request(t, genRequest(`"generation.top_k":40`, false)), provider(p))
	}
	pe := openai.CanEncode(request(t, genRequest(`"generation.top_k":40`, false)), deployment("http://127.0.0.1:1"))
	if pe == nil || pe.Message != "top-k sampling is not supported by the openai adapter" {
		t.Errorf("CanEncode = %v", pe)
	}
}

// TestProviderKeyWins: an openai.* key overrides the generation key of the same field,
// and only one token cap is ever sent.
func TestProviderKeyWins(t *testing.T) {
	got := mapped(t, genRequest(`"generation.temperature":2,"openai.temperature":0.1,"generation.top_p":0.5,"openai.top_p":0.6,`+
		`"generation.seed":1,"openai.seed":2,"generation.max_output_tokens":10,"openai.max_completion_tokens":20`, false),
		provider(openai.ProviderCompatible))
	diffJSON(t, "request body", got, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],`+
		`"temperature":0.1,"top_p":0.6,"max_completion_tokens":20,"seed":2}`)
}

func outputCap(n int64) func(*routing.Deployment) {
	return func(d *routing.Deployment) { d.MaxOutputTokens = n }
}

// TestOutputCap: a deployment's output cap is sent as the token limit field on every
// call; the caller's generation.max_output_tokens or openai.max_completion_tokens may
// only lower it, and a larger one is clamped to it, never refused.
func TestOutputCap(t *testing.T) {
	const messages = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],`
	for _, tc := range []struct {
		name, ext  string
		openai     string // the body's limit on OpenAI and Azure OpenAI
		compatible string // on compatible servers
	}{
		{name: "cap only", openai: `"max_completion_tokens":1000`, compatible: `"max_tokens":1000`},
		{name: "caller lower", ext: `"generation.max_output_tokens":300`,
			openai: `"max_completion_tokens":300`, compatible: `"max_tokens":300`},
		{name: "caller higher", ext: `"generation.max_output_tokens":5000`,
			openai: `"max_completion_tokens":1000`, compatible: `"max_tokens":1000`},
		{name: "provider key lower", ext: `"generation.max_output_tokens":5000,"openai.max_completion_tokens":200`,
			openai: `"max_completion_tokens":200`, compatible: `"max_completion_tokens":200`},
		{name: "provider key higher", ext: `"openai.max_completion_tokens":9000`,
			openai: `"max_completion_tokens":1000`, compatible: `"max_completion_tokens":1000`},
	} {
		for _, p := range []struct{ name, want string }{
			{openai.ProviderOpenAI, tc.openai}, {openai.ProviderAzure, tc.openai}, {openai.ProviderCompatible, tc.compatible},
		} {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				got := mapped(t, genRequest(tc.ext, false), provider(p.name), outputCap(1000))
				diffJSON(t, "request body", got, messages+p.want+`}`)
			})
		}
	}
}
