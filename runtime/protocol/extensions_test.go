package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestReplicateVersionRefused: the caller never chooses the model or version, so a
// request carrying replicate.version is refused at decode (400) as undocumented.
func TestReplicateVersionRefused(t *testing.T) {
	_, err := DecodeRequest([]byte(`{"ability":"image","input":[{"type":"text","text":"hi"}],
		"extensions":{"replicate.version":"5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"}}`))
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeInvalidRequest || pe.Code.HTTPStatus() != 400 ||
		pe.Message != string(pExtensions)+": "+string(rUndocumented) {
		t.Fatalf("DecodeRequest = %v, want 400 undocumented key", err)
	}
}

// TestParametersValid: ExtensionSpec.Valid, which adapters use on requests built in
// code, gives the decoder's verdict on every value.
func TestParametersValid(t *testing.T) {
	spec, ok := LookupExtension("replicate.input")
	if !ok || spec.Type != ExtensionObject {
		t.Fatalf("replicate.input = %+v, %v", spec, ok)
	}
	for _, v := range []string{
		`{}`, `{"a":1}`, ` {"aspect_ratio":"16:9", "go_fast":false, "n":-0.5e-3} `, `{"x":1e308}`, `{"x":-10e307}`,
		`{"x":0.00000e999999}`, `{"s":"http:/x"}`, `{"s":"metadata:"}`,
		`{"a":1,"a":1}`, `{"a":null}`, `{"a":[]}`, `{"a":{}}`, `{"a":"https://x"}`, `{"a":"data:,x"}`,
		`{"a":"\u0064ata:,x"}`, `{"a":"\t DATA:x"}`, `{"1a":1}`, `{"a-b":1}`, `{"":1}`, `{"a":1.1e308}`,
		`{"a":100000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001}`,
		`[]`, `"x"`, `1`, `null`, `{"a":1} {}`, `{"a":`,
	} {
		_, err := DecodeRequest([]byte(`{"ability":"x","input":[{"type":"text","text":"t"}],"extensions":{"replicate.input":` + v + `}}`))
		// A value that is not one JSON document makes the whole body invalid.
		if got, want := spec.Valid(json.RawMessage(v)), err == nil; got != want {
			t.Errorf("Valid(%s) = %v, decoder accepts = %v (%v)", v, got, want, err)
		}
	}
}

// TestMagnitudeAtMost compares number literals with 10^308 exactly.
func TestMagnitudeAtMost(t *testing.T) {
	for lit, want := range map[string]bool{
		"0": true, "-0": true, "0e999999999": true, "1e308": true, "-1e308": true, "1.0e308": true, "10e307": true,
		"0.1e309": true, "9.999999999999999999999e307": true, "1E+308": true, "1e-400": true,
		"1.0000000000000001e308": false, "2e308": false, "1e309": false, "11e307": false, "1.5e308": false,
		"100e307": false, "1e999999999999": false,
	} {
		if got := magnitudeAtMost([]byte(lit), 308); got != want {
			t.Errorf("magnitudeAtMost(%s) = %v, want %v", lit, got, want)
		}
	}
}

// TestParameterErrorsAreRedacted: a replicate.input refusal names the schema location
// and a fixed rule, never the caller's parameter names or values.
func TestParameterErrorsAreRedacted(t *testing.T) {
	lower := strings.ToLower(canary)
	for name, value := range map[string]string{
		"name":          `{"` + canary + `-x":1}`,
		"url value":     `{"a":"https://` + canary + `.example/"}`,
		"data value":    `{"a":"data:text/plain,` + canary + `"}`,
		"long value":    `{"a":"` + strings.Repeat(canary, 500) + `"}`,
		"object value":  `{"a":{"` + canary + `":1}}`,
		"duplicate":     `{"` + canary + `":1,"` + canary + `":2}`,
		"too many":      `{` + manyParameters(canary) + `}`,
		"not an object": `"` + canary + `"`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(`{"ability":"image","input":[{"type":"text","text":"t"}],"extensions":{"replicate.input":` + value + `}}`))
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

func manyParameters(prefix string) string {
	var b strings.Builder
	for i := range MaxParameters + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + strings.ReplaceAll(prefix, "-", "_") + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1`)
	}
	return b.String()
}
