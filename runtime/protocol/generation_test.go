package protocol

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func generationRequest(t *testing.T, ext string, tools ...string) *Request {
	t.Helper()
	input := `{"type":"text","text":"Hello"}`
	for _, name := range tools {
		input += `,{"type":"tool","name":"` + name + `","parameters":{"type":"object"}}`
	}
	req, err := DecodeRequest([]byte(`{"ability":"chat","input":[` + input + `],"extensions":{` + ext + `}}`))
	if err != nil {
		t.Fatalf("DecodeRequest(%s): %v", ext, err)
	}
	return req
}

func ptr[T any](v T) *T { return &v }

// TestGeneration reads every option into its typed value, exactly (no rounding of
// 64-bit seeds, integers written with exponents), with the schema compacted and named.
func TestGeneration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ext   string
		tools []string
		want  GenerationOptions
	}{
		{"none", ``, nil, GenerationOptions{}},
		{"numbers", `"generation.max_output_tokens":1e3,"generation.temperature":0.7,"generation.top_p":1,"generation.top_k":40.0`, nil,
			GenerationOptions{MaxOutputTokens: ptr[int64](1000), Temperature: ptr(0.7), TopP: ptr(1.0), TopK: ptr[int64](40)}},
		{"largest seed", `"generation.seed":9223372036854775807`, nil, GenerationOptions{Seed: ptr[int64](math.MaxInt64)}},
		{"smallest seed", `"generation.seed":-9223372036854775808`, nil, GenerationOptions{Seed: ptr[int64](math.MinInt64)}},
		{"seed near 2^53", `"generation.seed":9007199254740993`, nil, GenerationOptions{Seed: ptr[int64](9007199254740993)}},
		{"negative zero seed", `"generation.seed":-0`, nil, GenerationOptions{Seed: ptr[int64](0)}},
		{"stop", `"generation.stop":["END","\n\nUser:"]`, nil, GenerationOptions{Stop: []string{"END", "\n\nUser:"}}},
		{"empty stop sets nothing", `"generation.stop":[]`, nil, GenerationOptions{}},
		{"auto without tools is moot", `"generation.tool_choice":"auto"`, nil, GenerationOptions{}},
		{"none without tools is moot", `"generation.tool_choice":"none"`, nil, GenerationOptions{}},
		{"auto", `"generation.tool_choice":"auto"`, []string{"f"}, GenerationOptions{ToolChoice: ToolChoice{Mode: ToolChoiceAuto}}},
		{"none", `"generation.tool_choice":"none"`, []string{"f"}, GenerationOptions{ToolChoice: ToolChoice{Mode: ToolChoiceNone}}},
		{"required", `"generation.tool_choice":"required"`, []string{"f"}, GenerationOptions{ToolChoice: ToolChoice{Mode: ToolChoiceRequired}}},
		{"one tool", `"generation.tool_choice":"tool:get_weather"`, []string{"f", "get_weather"},
			GenerationOptions{ToolChoice: ToolChoice{Mode: ToolChoiceTool, Name: "get_weather"}}},
		{"json", `"generation.response_format":"json"`, nil, GenerationOptions{JSON: true}},
		{"schema, default name", `"generation.response_schema":{ "type" : "object" }`, nil,
			GenerationOptions{ResponseSchema: json.RawMessage(`{"type":"object"}`), ResponseSchemaName: DefaultResponseSchemaName}},
		{"schema and name", `"generation.response_schema_name":"weather","generation.response_schema":{"type":"object"}`, nil,
			GenerationOptions{ResponseSchema: json.RawMessage(`{"type":"object"}`), ResponseSchemaName: "weather"}},
		{"a name without a schema names nothing", `"generation.response_schema_name":"weather"`, nil, GenerationOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Generation(generationRequest(t, tc.ext, tc.tools...))
			if err != nil {
				t.Fatalf("Generation: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Generation (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGenerationRefusals: a tool choice no model could honour, and a value of the wrong
// type in a request built in code, are invalid_request with fixed messages.
func TestGenerationRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ext   map[string]string
		tools []string
		want  string
	}{
		{"required without tools", map[string]string{GenerationToolChoice: `"required"`}, nil, errToolChoiceTools.Message},
		{"a tool without tools", map[string]string{GenerationToolChoice: `"tool:f"`}, nil, errToolChoiceTools.Message},
		{"an undefined tool", map[string]string{GenerationToolChoice: `"tool:g"`}, []string{"f", "gg"}, errToolChoiceName.Message},
		{"a temperature over 2", map[string]string{GenerationTemperature: `2.5`}, nil, errGenerationValue.Message},
		{"a string seed", map[string]string{GenerationSeed: `"7"`}, nil, errGenerationValue.Message},
		{"a seed beyond int64", map[string]string{GenerationSeed: `9223372036854775808`}, nil, errGenerationValue.Message},
		{"a tool choice outside the grammar", map[string]string{GenerationToolChoice: `"any"`}, []string{"f"}, errGenerationValue.Message},
		{"a schema with a URL", map[string]string{GenerationResponseSchema: `{"$id":"https://x.example/s"}`}, nil, errGenerationValue.Message},
		{"five stop sequences", map[string]string{GenerationStop: `["a","b","c","d","e"]`}, nil, errGenerationValue.Message},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Ability: "chat", Input: []Part{{Type: PartText, Text: "t"}}, Extensions: map[string]json.RawMessage{}}
			for _, name := range tc.tools {
				req.Input = append(req.Input, Part{Type: PartTool, Name: name})
			}
			for k, v := range tc.ext {
				req.Extensions[k] = json.RawMessage(v)
			}
			_, err := Generation(req)
			if err == nil || err.Code != CodeInvalidRequest || err.Message != tc.want {
				t.Fatalf("Generation = %v, want invalid_request %q", err, tc.want)
			}
		})
	}
}

// TestGenerationClear: clearing an option (a provider key overrides it) leaves the others.
func TestGenerationClear(t *testing.T) {
	g, err := Generation(generationRequest(t, `"generation.max_output_tokens":5,"generation.temperature":1,"generation.top_p":1,`+
		`"generation.top_k":3,"generation.stop":["x"],"generation.seed":1,"generation.tool_choice":"required",`+
		`"generation.response_format":"json","generation.response_schema":{},"generation.response_schema_name":"n"`, "f"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range GenerationKeys {
		if !g.Has(key) {
			t.Errorf("Has(%s) = false before Clear", key)
		}
	}
	g.Clear(GenerationResponseSchemaName)
	if g.ResponseSchemaName != DefaultResponseSchemaName {
		t.Errorf("a cleared name is %q, want the default", g.ResponseSchemaName)
	}
	for i, key := range GenerationKeys {
		g.Clear(key)
		if g.Has(key) {
			t.Errorf("Has(%s) after Clear", key)
		}
		for _, later := range GenerationKeys[i+1:] {
			if !g.Has(later) && later != GenerationResponseSchemaName {
				t.Errorf("Clear(%s) cleared %s", key, later)
			}
		}
	}
	if g.Has("openai.seed") {
		t.Error("Has of a provider key")
	}
}

// TestSchemaValid: ExtensionSpec.Valid gives the decoder's verdict on every schema value,
// and the decoder refuses URLs, data URIs, external references, huge numbers and
// repeated names at any depth.
func TestSchemaValid(t *testing.T) {
	spec, ok := LookupExtension(GenerationResponseSchema)
	if !ok || spec.Type != ExtensionSchema {
		t.Fatalf("%s = %+v, %v", GenerationResponseSchema, spec, ok)
	}
	for v, want := range map[string]bool{
		`{}`: true,
		`{"type":"object","properties":{"a":{"type":["string","null"],"maxLength":3}},"required":["a"]}`: true,
		`{"$ref":"#"}`:                                          true,
		`{"a":{"$ref":"#/$defs/x"}}`:                            true,
		`{"properties":{"$ref":{"type":"string"}}}`:             true,
		`{"description":"see http:/x"}`:                         true,
		`{"x":[1e308,-1e308,true,null,"s"]}`:                    true,
		`{"description":"see https://x.example"}`:               false,
		`{"$schema":"http://json-schema.org/draft-07/schema#"}`: false,
		`{"$ref":"s.json"}`:                                     false,
		`{"$ref":"https://x/s#"}`:                               false,
		`{"a":{"$ref":"/x"}}`:                                   false,
		`{"enum":["data:,x"]}`:                                  false,
		`{"enum":["\u0064ata:,x"]}`:                             false,
		`{"enum":[["\tData:"]]}`:                                false,
		`{"maximum":1.1e308}`:                                   false,
		`{"a":1,"a":1}`:                                         false,
		`{"a":{"b":[{"c":1,"c":2}]}}`:                           false,
		`[]`:                                                    false,
		`"s"`:                                                   false,
		`null`:                                                  false,
		`{"a":1} {}`:                                            false,
	} {
		_, err := DecodeRequest([]byte(`{"ability":"x","input":[{"type":"text","text":"t"}],"extensions":{"generation.response_schema":` + v + `}}`))
		if decoded := err == nil; decoded != want {
			t.Errorf("decoder accepts %s = %v (%v), want %v", v, decoded, err, want)
		}
		if got := spec.Valid(json.RawMessage(v)); got != want {
			t.Errorf("Valid(%s) = %v, want %v", v, got, want)
		}
	}
}

// TestSchemaErrorsAreRedacted: a response_schema refusal names the schema location and a
// fixed rule, never the caller's names or values.
func TestSchemaErrorsAreRedacted(t *testing.T) {
	lower := strings.ToLower(canary)
	for name, value := range map[string]string{
		"url value":    `{"` + canary + `":"https://` + canary + `.example/"}`,
		"data value":   `{"a":["data:text/plain,` + canary + `"]}`,
		"external ref": `{"$ref":"` + canary + `.json"}`,
		"duplicate":    `{"` + canary + `":1,"` + canary + `":2}`,
		"huge number":  `{"` + canary + `":1e309}`,
		"not object":   `["` + canary + `"]`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(`{"ability":"chat","input":[{"type":"text","text":"t"}],"extensions":{"generation.response_schema":` + value + `}}`))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("DecodeRequest accepted %s", value)
			}
			out, _ := json.Marshal(ErrorBody{Error: pe})
			if strings.Contains(strings.ToLower(string(out)), lower) {
				t.Fatalf("error body leaks the canary: %s", out)
			}
			if pe.Code != CodeInvalidRequest || !isValidationMessage(pe.Message) || !strings.HasPrefix(pe.Message, string(pExtensionVal)+": ") {
				t.Fatalf("unexpected error %s", out)
			}
		})
	}
}
