package providerhttp_test

import (
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

func generationRequest(t *testing.T, ext string) *protocol.Request {
	t.Helper()
	req, err := protocol.DecodeRequest([]byte(`{"ability":"chat","input":[{"type":"text","text":"t"},` +
		`{"type":"tool","name":"f","parameters":{}}],"extensions":{` + ext + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestGenerationSupport: the adapter's own refusals come first, then protocol.Generation's,
// then the first option (in protocol.GenerationKeys order) the provider cannot honour; a
// provider key drops the option it overrides before any check.
func TestGenerationSupport(t *testing.T) {
	s := providerhttp.GenerationSupport{
		Adapter:          "acme",
		Honours:          []string{protocol.GenerationTemperature, protocol.GenerationSeed, protocol.GenerationToolChoice, protocol.GenerationResponseFormat},
		MaxTemperature:   1,
		Seed32:           true,
		NoToolChoiceNone: true,
		Overrides:        map[string]string{"openai.temperature": protocol.GenerationTemperature},
	}
	jsonOut := routing.CapsOf(protocol.CapOutputJSON)
	own := protocol.NewError(protocol.CodeUnsupportedCapability, "own refusal")
	for _, tc := range []struct {
		name, ext string
		caps      routing.CapSet
		refusals  []*protocol.Error
		want      string // the refusal's message, or "" when admitted
	}{
		{name: "admitted", ext: `"generation.temperature":1,"generation.seed":-2147483648,"generation.tool_choice":"required"`},
		{name: "the adapter's refusal first", ext: `"generation.top_k":1`, refusals: []*protocol.Error{nil, own}, want: "own refusal"},
		{name: "invalid before declined", ext: `"generation.top_k":1,"generation.tool_choice":"tool:g"`,
			want: "the tool choice names a tool the request does not define"},
		{name: "first key in order", ext: `"generation.stop":["x"],"generation.max_output_tokens":5`,
			want: "an output token limit is not supported by the acme adapter"},
		{name: "temperature range", ext: `"generation.temperature":1.5`, want: "the acme adapter takes temperatures from 0 to 1 only"},
		{name: "overridden temperature is not checked", ext: `"generation.temperature":1.5,"openai.temperature":0.5`},
		{name: "seed range", ext: `"generation.seed":2147483648`, want: "the acme adapter takes 32-bit seeds only"},
		{name: "tool choice none", ext: `"generation.tool_choice":"none"`, want: "a tool choice of none is not supported by the acme adapter"},
		{name: "json undeclared", ext: `"generation.response_format":"json"`, want: "the deployment does not declare JSON output (output.json)"},
		{name: "json declared", ext: `"generation.response_format":"json"`, caps: jsonOut},
		{name: "schema not honoured", ext: `"generation.response_schema":{}`, caps: jsonOut,
			want: "structured output is not supported by the acme adapter"},
		{name: "a schema name alone is never declined", ext: `"generation.response_schema_name":"x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := generationRequest(t, tc.ext)
			g, err := s.Read(req, tc.caps, tc.refusals...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Read refused: %v", err)
			case tc.want != "" && (err == nil || err.Message != tc.want):
				t.Fatalf("Read = %v, want %q", err, tc.want)
			case err != nil && err.Code != protocol.CodeUnsupportedCapability && err.Code != protocol.CodeInvalidRequest:
				t.Fatalf("Read refused with %s", err.Code)
			}
			if tc.name == "overridden temperature is not checked" && g.Temperature != nil {
				t.Errorf("an overridden temperature was kept: %v", *g.Temperature)
			}
		})
	}
}
