package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

const canary = "CANARY-7f3a"

// TestDecodeErrorsAreRedacted sends invalid requests carrying a canary in every place a
// caller controls and checks that no error body mentions it (spec/http-api.md, "Errors").
func TestDecodeErrorsAreRedacted(t *testing.T) {
	lower := strings.ToLower(canary)
	long := strings.Repeat(canary, 30)
	text := `{"type":"text","text":"` + canary + `"}`
	for name, body := range map[string]string{
		"ability":                    `{"ability":"` + canary + `","input":[` + text + `]}`,
		"ability too long":           `{"ability":"` + strings.Repeat(lower, 7) + `","input":[` + text + `]}`,
		"ability wrong type":         `{"ability":{"` + canary + `":1},"input":[` + text + `]}`,
		"unknown top-level field":    `{"ability":"chat","input":[` + text + `],"` + canary + `":1}`,
		"metadata key":               `{"ability":"chat","input":[` + text + `],"metadata":{"` + canary + `":"v"}}`,
		"metadata value":             `{"ability":"chat","input":[` + text + `],"metadata":{"k":"` + long + `"}}`,
		"metadata duplicate key":     `{"ability":"chat","input":[` + text + `],"metadata":{"` + lower + `":"a","` + lower + `":"b"}}`,
		"valid metadata, bad field":  `{"ability":"chat","input":[` + text + `],"metadata":{"` + lower + `":"` + canary + `"},"deadline_ms":0}`,
		"extension key":              `{"ability":"chat","input":[` + text + `],"extensions":{"` + lower + `.x":1}}`,
		"extension key pattern":      `{"ability":"chat","input":[` + text + `],"extensions":{"` + canary + `":1}}`,
		"extension value":            `{"ability":"chat","input":[` + text + `],"extensions":{"openai.temperature":"` + canary + `"}}`,
		"extension string value":     `{"ability":"chat","input":[` + text + `],"extensions":{"openai.reasoning_effort":"` + canary + `"}}`,
		"text part, foreign field":   `{"ability":"chat","input":[{"type":"text","text":"` + canary + `","uri":"` + canary + `"}]}`,
		"part type":                  `{"ability":"chat","input":[{"type":"` + canary + `","text":"x"}]}`,
		"part unknown field":         `{"ability":"chat","input":[{"type":"text","text":"x","` + canary + `":1}]}`,
		"tool name":                  `{"ability":"chat","input":[{"type":"tool","name":"` + canary + ` tool","parameters":{}}]}`,
		"tool parameters":            `{"ability":"chat","input":[{"type":"tool","name":"f","parameters":"` + canary + `"}]}`,
		"json duplicate key":         `{"ability":"chat","input":[{"type":"json","json":{"` + canary + `":1,"` + canary + `":2}}]}`,
		"media type":                 `{"ability":"chat","input":[{"type":"image","media_type":"` + canary + `/png","data":"AAAA"}]}`,
		"base64":                     `{"ability":"chat","input":[{"type":"image","media_type":"image/png","data":"` + canary + `"}]}`,
		"uri":                        `{"ability":"chat","input":[{"type":"image","media_type":"image/png","uri":"` + canary + `"}]}`,
		"file name":                  `{"ability":"chat","input":[{"type":"file","media_type":"text/plain","uri":"s3://b/k","name":"` + canary + `\n"}]}`,
		"call id":                    `{"ability":"chat","input":[{"type":"tool_call","role":"assistant","call_id":"` + long + `","name":"f","arguments":""}]}`,
		"nested part type":           `{"ability":"chat","input":[{"type":"tool_result","call_id":"c","content":[{"type":"` + canary + `"}]}]}`,
		"nested foreign field":       `{"ability":"chat","input":[{"type":"tool_result","call_id":"c","content":[{"type":"text","text":"` + canary + `","name":"` + canary + `"}]}]}`,
		"nested unknown field":       `{"ability":"chat","input":[{"type":"tool_result","call_id":"c","content":[{"type":"text","text":"x","` + canary + `":1}]}]}`,
		"requirement":                `{"ability":"chat","input":[` + text + `],"requirements":["` + canary + `"]}`,
		"prefer":                     `{"ability":"chat","input":[` + text + `],"routing":{"prefer":["` + canary + `"]}}`,
		"routing unknown field":      `{"ability":"chat","input":[` + text + `],"routing":{"` + canary + `":1}}`,
		"deadline wrong type":        `{"ability":"chat","input":[` + text + `],"deadline_ms":"` + canary + `"}`,
		"syntax error":               `{"ability":"` + canary + `","input":[` + text,
		"trailing data":              `{"ability":"chat","input":[` + text + `]}"` + canary + `"`,
		"top-level string":           `"` + canary + `"`,
		"escaped canary in ability":  `{"ability":"\u0043ANARY-7f3a","input":[` + text + `]}`,
		"canary in part of bad body": `{"ability":"chat","input":[` + text + `,{"type":"json"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(body))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("DecodeRequest accepted the body or returned %T", err)
			}
			out, jerr := json.Marshal(ErrorBody{Error: pe})
			if jerr != nil {
				t.Fatal(jerr)
			}
			if strings.Contains(strings.ToLower(string(out)), lower) {
				t.Fatalf("error body leaks the canary: %s", out)
			}
			if pe.Code != CodeInvalidRequest || !isValidationMessage(pe.Message) {
				t.Fatalf("unexpected error %s", out)
			}
		})
	}
}

// isValidationMessage reports whether msg is "<known path>: <known rule>".
func isValidationMessage(msg string) bool {
	for p := range schemaPaths {
		if r, ok := strings.CutPrefix(msg, string(p)+": "); ok && validationRules[rule(r)] {
			return true
		}
	}
	return false
}

// vocabulary is every message DecodeRequest can produce, one per line.
var vocabulary = sync.OnceValue(func() string {
	var b strings.Builder
	for p := range schemaPaths {
		for r := range validationRules {
			b.WriteString(string(p) + ": " + string(r) + "\n")
		}
	}
	return b.String()
})

// leak returns a substring of at least 8 bytes that msg shares with input and that is not
// fixed vocabulary, or "". Shared vocabulary is expected: a body naming "media_type"
// gets an error naming input[].media_type.
func leak(input []byte, msg string) string {
	const n = 8
	for i := 0; i+n <= len(msg); i++ {
		w := msg[i : i+n]
		if bytes.Contains(input, []byte(w)) && !strings.Contains(vocabulary(), w) {
			return w
		}
	}
	return ""
}

// FuzzDecodeRequest: DecodeRequest never panics; every error is an invalid_request
// *Error whose message comes from the closed set and shares no non-vocabulary text with
// the input; every accepted body has a fingerprint and survives an encode/decode round
// trip unchanged.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`))
	f.Add([]byte(`{"ability":"chat","input":[{"type":"tool_result","call_id":"c","content":[{"type":"image","media_type":"image/png","uri":"https://e.com/a"}]}],"extensions":{"openai.temperature":1e-1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRequest(body)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != CodeInvalidRequest || pe.Retryable {
				t.Fatalf("error %#v is not a non-retryable invalid_request *Error", err)
			}
			if !isValidationMessage(pe.Message) {
				t.Fatalf("message %q is not from the closed set", pe.Message)
			}
			if w := leak(body, pe.Message); w != "" {
				t.Fatalf("message %q echoes input %q", pe.Message, w)
			}
			return
		}
		if _, err := Fingerprint(body); err != nil {
			t.Fatalf("accepted body has no fingerprint: %v", err)
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("encode accepted request: %v", err)
		}
		r2, err := DecodeRequest(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		enc2, err := json.Marshal(r2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the request:\n%s\n%s", enc, enc2)
		}
	})
}
