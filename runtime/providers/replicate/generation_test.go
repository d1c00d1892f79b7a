package replicate

import (
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestGeneration: the sampling options become the inputs Replicate's language models
// name max_tokens, temperature, top_p, top_k and seed, each only when the deployment
// allows that name; replicate.input wins over the option of the same input; everything
// else (an option whose input is not allowed, stop sequences, JSON or structured output)
// is declined.
func TestGeneration(t *testing.T) {
	const unsupported = protocol.CodeUnsupportedCapability
	text := routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText)
	llm := []string{"max_tokens", "temperature", "top_p", "top_k", "seed"}
	providertest.CheckGeneration(t, wire.Subject, []providertest.GenerationCase{
		{Name: "every sampling input allowed", Caps: text, Parameters: llm,
			Extensions: `"generation.max_output_tokens":1e3,"generation.temperature":0.7,"generation.top_p":0.9,` +
				`"generation.top_k":40,"generation.seed":-9223372036854775808`,
			Want: `{"input":{"max_tokens":1000,"prompt":"Hello","seed":-9223372036854775808,"temperature":0.7,"top_k":40,"top_p":0.9}}`},
		{Name: "replicate.input wins", Caps: text, Parameters: llm,
			Extensions: `"generation.seed":1,"generation.temperature":0.7,"replicate.input":{"seed":2}`,
			Want:       `{"input":{"prompt":"Hello","seed":2,"temperature":0.7}}`},
		{Name: "tool choice without tools is moot", Caps: text, Extensions: `"generation.tool_choice":"none"`,
			Want: `{"input":{"prompt":"Hello"}}`},
		{Name: "an input the deployment does not allow", Caps: text, Parameters: []string{"seed"},
			Extensions: `"generation.temperature":0.7`, Refused: unsupported,
			Message: "a sampling temperature is not supported by the replicate adapter"},
		{Name: "no inputs allowed", Caps: text, Extensions: `"generation.seed":1`, Refused: unsupported},
		{Name: "stop", Caps: text, Parameters: llm, Extensions: `"generation.stop":["END"]`, Refused: unsupported,
			Message: "stop sequences are not supported by the replicate adapter"},
		{Name: "json", Caps: text | routing.CapsOf(protocol.CapOutputJSON), Parameters: llm,
			Extensions: `"generation.response_format":"json"`, Refused: unsupported},
		{Name: "required without tools", Caps: text, Extensions: `"generation.tool_choice":"required"`, Refused: protocol.CodeInvalidRequest},
	})
}

// TestOutputCap: on a deployment that allows the max_tokens input, its output cap is
// sent as max_tokens on every call; the request's generation.max_output_tokens or a
// replicate.input max_tokens may only lower it, and a larger one — or one that is no
// number, which cannot be compared with the cap — is clamped to it, never refused. A
// deployment without that input is sent no cap (Replicate cannot take it there).
func TestOutputCap(t *testing.T) {
	text := routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText)
	llm := []string{"max_tokens", "temperature"}
	providertest.CheckGeneration(t, wire.Subject, []providertest.GenerationCase{
		{Name: "cap only", Caps: text, Parameters: llm, MaxOutputTokens: 1000,
			Want: `{"input":{"max_tokens":1000,"prompt":"Hello"}}`},
		{Name: "caller lower", Caps: text, Parameters: llm, MaxOutputTokens: 1000,
			Extensions: `"generation.max_output_tokens":300`, Want: `{"input":{"max_tokens":300,"prompt":"Hello"}}`},
		{Name: "caller higher", Caps: text, Parameters: llm, MaxOutputTokens: 1000,
			Extensions: `"generation.max_output_tokens":5000`, Want: `{"input":{"max_tokens":1000,"prompt":"Hello"}}`},
		{Name: "parameter lower", Caps: text, Parameters: llm, MaxOutputTokens: 1000,
			Extensions: `"generation.max_output_tokens":5000,"replicate.input":{"max_tokens":200}`,
			Want:       `{"input":{"max_tokens":200,"prompt":"Hello"}}`},
		{Name: "parameter higher", Caps: text, Parameters: llm, MaxOutputTokens: 1000,
			Extensions: `"replicate.input":{"max_tokens":9000.5,"temperature":0.5}`,
			Want:       `{"input":{"max_tokens":1000,"prompt":"Hello","temperature":0.5}}`},
		{Name: "parameter not a number", Caps: text, Parameters: llm, MaxOutputTokens: 1000,
			Extensions: `"replicate.input":{"max_tokens":"200"}`, Want: `{"input":{"max_tokens":1000,"prompt":"Hello"}}`},
		{Name: "parameter without a cap kept as given", Caps: text, Parameters: llm,
			Extensions: `"replicate.input":{"max_tokens":9000}`, Want: `{"input":{"max_tokens":9000,"prompt":"Hello"}}`},
		{Name: "no max_tokens input: no cap sent", Caps: text, Parameters: []string{"temperature"}, MaxOutputTokens: 1000,
			Want: `{"input":{"prompt":"Hello"}}`},
	})
}
