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
			g, err := s.Read(req, &routing.Deployment{Capabilities: tc.caps}, tc.refusals...)
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

// TestGenerationOutputCap: a deployment's output cap is sent when the request sets no
// limit, lowers a larger one and leaves a smaller one; a provider key that carries the
// limit instead leaves it to the adapter (which lowers that key's value with OutputCap),
// and a provider that takes no limit is sent none, cap or not.
func TestGenerationOutputCap(t *testing.T) {
	honours := providerhttp.GenerationSupport{
		Adapter:   "acme",
		Honours:   []string{protocol.GenerationMaxOutputTokens},
		Overrides: map[string]string{"anthropic.max_tokens": protocol.GenerationMaxOutputTokens},
	}
	none := providerhttp.GenerationSupport{Adapter: "acme"}
	for _, tc := range []struct {
		name    string
		support *providerhttp.GenerationSupport
		ext     string
		cap     int64
		want    int64 // the limit Read returns; 0 for none
	}{
		{name: "no cap, no limit", support: &honours},
		{name: "no cap, the request's limit", support: &honours, ext: `"generation.max_output_tokens":5000`, want: 5000},
		{name: "the cap alone", support: &honours, cap: 4096, want: 4096},
		{name: "a lower request", support: &honours, ext: `"generation.max_output_tokens":100`, cap: 4096, want: 100},
		{name: "the request equal to the cap", support: &honours, ext: `"generation.max_output_tokens":4096`, cap: 4096, want: 4096},
		{name: "a higher request is clamped", support: &honours, ext: `"generation.max_output_tokens":5000`, cap: 4096, want: 4096},
		{name: "a provider key carries it", support: &honours,
			ext: `"generation.max_output_tokens":5000,"anthropic.max_tokens":9000`, cap: 4096},
		{name: "no limit for a provider that takes none", support: &none, cap: 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := generationRequest(t, tc.ext)
			g, err := tc.support.Read(req, &routing.Deployment{MaxOutputTokens: tc.cap})
			if err != nil {
				t.Fatalf("Read refused: %v", err)
			}
			var got int64
			if g.MaxOutputTokens != nil {
				got = *g.MaxOutputTokens
			}
			if got != tc.want {
				t.Errorf("max output tokens = %d, want %d (0: none)", got, tc.want)
			}
		})
	}
}

// TestOutputCap: the smaller of the request's limit and the cap; either alone when the
// other is absent.
func TestOutputCap(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		requested *int64
		limit     int64
		want      *int64
	}{
		{nil, 0, nil},
		{n(7), 0, n(7)},
		{nil, 10, n(10)},
		{n(7), 10, n(7)},
		{n(10), 10, n(10)},
		{n(11), 10, n(10)},
	} {
		got := providerhttp.OutputCap(tc.requested, tc.limit)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("OutputCap(%v, %d) = %v, want %v", deref(tc.requested), tc.limit, deref(got), deref(tc.want))
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return "nil"
	}
	return *p
}
