package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// decodeNative decodes a native request body as Kit.Submit does, with
// protocol.DecodeRequest. The generation.* keys are checked by protocol's extension
// registry once it documents them; until then they are set aside for the check and put
// back, so that the rest of the request is still proven valid.
func decodeNative(t *testing.T, body []byte) *protocol.Request {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	var ext map[string]json.RawMessage
	_ = json.Unmarshal(raw["extensions"], &ext)
	aside := map[string]json.RawMessage{}
	for k, v := range ext {
		if _, documented := protocol.LookupExtension(k); !documented && strings.HasPrefix(k, "generation.") {
			aside[k] = v
			delete(ext, k)
		}
	}
	if len(aside) > 0 {
		if len(ext) == 0 {
			delete(raw, "extensions")
		} else {
			raw["extensions"], _ = json.Marshal(ext)
		}
		body, _ = json.Marshal(raw)
	}
	r, err := protocol.DecodeRequest(body)
	if err != nil {
		t.Fatalf("native request %s refused: %v", body, err)
	}
	if len(aside) > 0 {
		if r.Extensions == nil {
			r.Extensions = map[string]json.RawMessage{}
		}
		for k, v := range aside {
			r.Extensions[k] = v
		}
	}
	return r
}

// native decodes want, a native request body.
func native(t *testing.T, want string) *protocol.Request {
	t.Helper()
	return decodeNative(t, []byte(want))
}

// translate decodes body and returns the native request the door submits, decoded as
// Kit.Submit decodes it (the ability set as for model "chat").
func translate(t *testing.T, body string) (*responsesRequest, *protocol.Request) {
	t.Helper()
	req, err := decodeResponsesRequest([]byte(body))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	req.native.Ability = "chat"
	b, err := json.Marshal(&req.native)
	if err != nil {
		t.Fatal(err)
	}
	return req, decodeNative(t, b)
}

const png1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="

func TestTranslateRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want string // the native request, ability chat
	}{
		{"string input",
			`{"model":"chat","input":"Hello"}`,
			`{"ability":"chat","input":[{"type":"text","text":"Hello"}]}`},
		{"instructions become the system part, first",
			`{"model":"chat","instructions":"Be brief.","input":"Hello"}`,
			`{"ability":"chat","input":[{"type":"text","role":"system","text":"Be brief."},{"type":"text","text":"Hello"}]}`},
		{"messages of every role, string and part content",
			`{"model":"chat","input":[
				{"role":"developer","content":"Rules."},
				{"type":"message","role":"system","content":[{"type":"input_text","text":"More rules."}]},
				{"role":"user","content":[{"type":"input_text","text":"What is this?"},
					{"type":"input_image","image_url":"data:image/png;base64,` + png1x1 + `","detail":"low"},
					{"type":"input_image","image_url":"https://example.com/a/cat.JPG?x=1"}]},
				{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"A cat.","annotations":[],"logprobs":[]}]}]}`,
			`{"ability":"chat","input":[
				{"type":"text","role":"system","text":"Rules."},
				{"type":"text","role":"system","text":"More rules."},
				{"type":"text","role":"user","text":"What is this?"},
				{"type":"image","role":"user","media_type":"image/png","data":"` + png1x1 + `"},
				{"type":"image","role":"user","media_type":"image/jpeg","uri":"https://example.com/a/cat.JPG?x=1"},
				{"type":"text","role":"assistant","text":"A cat."}]}`},
		{"files: a data URL, or base64 named .pdf",
			`{"model":"chat","input":[{"role":"user","content":[
				{"type":"input_file","filename":"a.txt","file_data":"data:text/plain;base64,aGk="},
				{"type":"input_file","filename":"doc.pdf","file_data":"JVBERi0="}]}]}`,
			`{"ability":"chat","input":[
				{"type":"file","role":"user","media_type":"text/plain","data":"aGk=","name":"a.txt"},
				{"type":"file","role":"user","media_type":"application/pdf","data":"JVBERi0=","name":"doc.pdf"}]}`},
		{"a function call round trip",
			`{"model":"chat","input":[{"role":"user","content":"Weather?"},
				{"type":"function_call","id":"fc_1","status":"completed","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
				{"type":"function_call_output","call_id":"call_1","output":"sunny"},
				{"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"rain"}]}],
			 "tools":[{"type":"function","name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},
				{"type":"function","name":"noop"}],
			 "tool_choice":"required"}`,
			`{"ability":"chat","input":[{"type":"text","role":"user","text":"Weather?"},
				{"type":"tool_call","role":"assistant","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
				{"type":"tool_result","call_id":"call_1","content":"sunny"},
				{"type":"tool_result","call_id":"call_2","content":[{"type":"text","text":"rain"}]},
				{"type":"tool","name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},
				{"type":"tool","name":"noop","parameters":{"type":"object","properties":{}}}],
			 "extensions":{"generation.tool_choice":"required"}}`},
		{"a forced function",
			`{"model":"chat","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"}}`,
			`{"ability":"chat","input":[{"type":"text","text":"x"},{"type":"tool","name":"f","parameters":{"type":"object"}}],
			 "extensions":{"generation.tool_choice":"tool:f"}}`},
		{"generation parameters and metadata",
			`{"model":"chat","input":"x","max_output_tokens":256,"temperature":0.2,"top_p":1,"metadata":{"team":"search"},"store":false,"stream":true,"background":false}`,
			`{"ability":"chat","input":[{"type":"text","text":"x"}],"metadata":{"team":"search"},
			 "extensions":{"generation.max_output_tokens":256,"generation.temperature":0.2,"generation.top_p":1}}`},
		{"json_schema needs structured output",
			`{"model":"chat","input":"x","text":{"format":{"type":"json_schema","name":"answer","strict":true,"description":"d","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}}`,
			`{"ability":"chat","input":[{"type":"text","text":"x"}],"requirements":["structured_output"],
			 "extensions":{"generation.response_schema":{"type":"object","properties":{"a":{"type":"string"}}},"generation.response_schema_name":"answer"}}`},
		{"json_object needs JSON output",
			`{"model":"chat","input":"x","text":{"format":{"type":"json_object"}}}`,
			`{"ability":"chat","input":[{"type":"text","text":"x"}],"requirements":["output.json"],"extensions":{"generation.response_format":"json"}}`},
		{"text format and nulls change nothing",
			`{"model":"chat","input":"x","text":{"format":{"type":"text"}},"instructions":null,"tools":null,"metadata":null,"previous_response_id":null,"user":null,"temperature":null}`,
			`{"ability":"chat","input":[{"type":"text","text":"x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := native(t, tc.want)
			_, got := translate(t, tc.body)
			// The generation keys are compared as JSON values.
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b json.RawMessage) bool {
				return string(compactJSON(a)) == string(compactJSON(b))
			})); diff != "" {
				t.Errorf("native request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTranslateModes(t *testing.T) {
	req, _ := translate(t, `{"model":"e2e/echo","input":"x","stream":true,"background":true}`)
	if req.model != "e2e/echo" || !req.stream || !req.background {
		t.Errorf("model %q, stream %v, background %v", req.model, req.stream, req.background)
	}
	req, _ = translate(t, `{"input":"x","model":"chat"}`)
	if req.stream || req.background {
		t.Errorf("stream %v, background %v without either", req.stream, req.background)
	}
}

// TestRefuseRequest: every refusal names OpenAI's schema location with a fixed rule and
// never the value, key or index the caller sent.
func TestRefuseRequest(t *testing.T) {
	const secret = "ZQXCANARY"
	for _, tc := range []struct {
		body string
		want string
	}{
		{`not json`, "body: not valid JSON"},
		{`[]`, "body: must be an object"},
		{`{"input":"x"}`, "model: required"},
		{`{"model":1,"input":"x"}`, "model: must be a string"},
		{`{"model":"","input":"x"}`, "model: must be a non-empty string"},
		{`{"model":"chat","model":"chat","input":"x"}`, "body: duplicate object key"},
		{`{"model":"chat","input":"x","` + secret + `":1}`, "body: unknown field"},
		{`{"model":"chat","input":"x","previous_response_id":"resp_` + secret + `"}`,
			"previous_response_id: stored conversations are not supported: send the whole conversation in input"},
		{`{"model":"chat","input":"x","reasoning":{"effort":"low"}}`, "reasoning: not supported by this front door"},
		{`{"model":"chat","input":"x","parallel_tool_calls":false}`, "parallel_tool_calls: not supported by this front door"},
		{`{"model":"chat","input":"x","include":["` + secret + `"]}`, "include: not supported by this front door"},
		{`{"model":"chat","input":3}`, "input: must be a string or an array of items"},
		{`{"model":"chat","input":["x"]}`, "input[]: must be an object"},
		{`{"model":"chat","input":[{"type":"reasoning","summary":[]}]}`, "input[].type: must be message, function_call or function_call_output"},
		{`{"model":"chat","input":[{"type":"item_reference","id":"` + secret + `"}]}`, "input[].type: must be message, function_call or function_call_output"},
		{`{"model":"chat","input":[{"role":"user","content":"x","` + secret + `":1}]}`, "input[]: unknown field"},
		{`{"model":"chat","input":[{"role":"` + secret + `","content":"x"}]}`, "input[].role: must be user, assistant, system or developer"},
		{`{"model":"chat","input":[{"role":"user"}]}`, "input[].content: required"},
		{`{"model":"chat","input":[{"role":"user","content":{}}]}`, "input[].content: must be a string or an array of content parts"},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"output_text","text":"x"}]}]}`,
			"input[].content[].type: must be input_text, input_image or input_file (output_text in assistant messages)"},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`,
			"input[].content[].type: must be input_text, input_image or input_file (output_text in assistant messages)"},
		{`{"model":"chat","input":[{"role":"assistant","content":[{"type":"input_image","image_url":"https://a/b.png"}]}]}`,
			"input[].content[].type: assistant messages hold only text"},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_text","text":"x","` + secret + `":1}]}]}`, "input[].content[]: unknown field"},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-` + secret + `"}]}]}`,
			"input[].content[].file_id: file references are not supported: send the content inline"},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,not base64"}]}]}`,
			"input[].content[].image_url: " + string(rrImageURL)},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_file","filename":"a.txt","file_data":"data:text/plain,hi"}]}]}`,
			"input[].content[].file_data: " + string(rrFileData)},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://` + secret + `/a.pdf"}]}]}`,
			"input[].content[].file_url: file references are not supported: send the content inline"},
		{`{"model":"chat","input":[{"role":"user","content":[{"type":"input_file","filename":"a\u0001.pdf","file_data":"aGk="}]}]}`,
			"input[].content[].filename: must be 1 to 255 characters without control characters"},
		{`{"model":"chat","input":[{"type":"function_call","call_id":"c","name":"bad name","arguments":"{}"}]}`,
			"input[].name: must match " + protocol.ToolNamePattern},
		{`{"model":"chat","input":[{"type":"function_call","call_id":"","name":"f","arguments":"{}"}]}`, "input[].call_id: must be 1 to 256 characters"},
		{`{"model":"chat","input":[{"type":"function_call","call_id":"c","name":"f"}]}`, "input[].arguments: required"},
		{`{"model":"chat","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}","status":"` + secret + `"}]}`,
			"input[].status: must be in_progress, completed or incomplete"},
		{`{"model":"chat","input":[{"type":"function_call_output","call_id":"c"}]}`, "input[].output: required"},
		{`{"model":"chat","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"output_text","text":"x"}]}]}`,
			"input[].output[].type: must be input_text, input_image or input_file"},
		{`{"model":"chat","input":"x","tools":{}}`, "tools: must be an array"},
		{`{"model":"chat","input":"x","tools":[{"type":"web_search"}]}`, "tools[].type: only function tools are supported"},
		{`{"model":"chat","input":"x","tools":[{"type":"function","name":"` + secret + ` x"}]}`, "tools[].name: must match " + protocol.ToolNamePattern},
		{`{"model":"chat","input":"x","tools":[{"type":"function"}]}`, "tools[].name: required"},
		{`{"model":"chat","input":"x","tools":[{"type":"function","name":"f","parameters":[]}]}`, "tools[].parameters: must be a JSON Schema object"},
		{`{"model":"chat","input":"x","tools":[{"type":"function","name":"f","function":{}}]}`, "tools[]: unknown field"},
		{`{"model":"chat","input":"x","tool_choice":"` + secret + `"}`, "tool_choice: " + string(rrToolChoice)},
		{`{"model":"chat","input":"x","tool_choice":{"type":"allowed_tools","tools":[]}}`, "tool_choice: " + string(rrToolChoice)},
		{`{"model":"chat","input":"x","max_output_tokens":0}`, "max_output_tokens: must be an integer from 1 to 1000000"},
		{`{"model":"chat","input":"x","max_output_tokens":1.5}`, "max_output_tokens: must be an integer from 1 to 1000000"},
		{`{"model":"chat","input":"x","temperature":3}`, "temperature: must be a number from 0 to 2"},
		{`{"model":"chat","input":"x","temperature":"1"}`, "temperature: must be a number from 0 to 2"},
		{`{"model":"chat","input":"x","top_p":-0.1}`, "top_p: must be a number from 0 to 1"},
		{`{"model":"chat","input":"x","text":{"verbosity":"low"}}`, "text.verbosity: not supported by this front door"},
		{`{"model":"chat","input":"x","text":{"format":{"type":"` + secret + `"}}}`, "text.format.type: must be text, json_object or json_schema"},
		{`{"model":"chat","input":"x","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name: required"},
		{`{"model":"chat","input":"x","text":{"format":{"type":"json_schema","name":"a"}}}`, "text.format.schema: required"},
		{`{"model":"chat","input":"x","metadata":{"k":1}}`, "metadata: must be an object of strings"},
		{`{"model":"chat","input":"x","stream":"yes"}`, "stream: must be a boolean"},
		{`{"model":"chat","input":"x","background":1}`, "background: must be a boolean"},
	} {
		_, err := decodeResponsesRequest([]byte(tc.body))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || pe.Message != tc.want {
			t.Errorf("%s:\n got %v\nwant invalid_request: %s", tc.body, err, tc.want)
			continue
		}
		if strings.Contains(pe.Message, secret) {
			t.Errorf("%s: the message echoes the caller: %s", tc.body, pe.Message)
		}
		if !respMessageKnown(pe.Message) {
			t.Errorf("%s: message %q is not in the closed set", tc.body, pe.Message)
		}
	}
}

// respMessageKnown reports whether msg is "<path>: <rule>" from the door's closed sets.
func respMessageKnown(msg string) bool {
	for p := range respPaths {
		if rule, ok := strings.CutPrefix(msg, string(p)+": "); ok && respRules[respRule(rule)] {
			return true
		}
	}
	return false
}

// TestNativeLimitsStillHold: what the door accepts but the native decoder refuses is
// refused with the native message, which names the native field and no caller content.
func TestNativeLimitsStillHold(t *testing.T) {
	req, err := decodeResponsesRequest([]byte(`{"model":"chat","input":"x","metadata":{"Bad Key":"v"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.native.Ability = "chat"
	b, _ := json.Marshal(&req.native)
	var pe *protocol.Error
	if _, err := protocol.DecodeRequest(b); !errors.As(err, &pe) || !strings.HasPrefix(pe.Message, "metadata") {
		t.Errorf("native decode of a bad metadata key: %v", err)
	}
}

func TestDecodeGetBody(t *testing.T) {
	for _, tc := range []struct {
		body   string
		stream bool
		err    bool
	}{
		{"", false, false},
		{`{"stream":true}`, true, false},
		{`{"stream":false}`, false, false},
		{`{}`, false, false},
		{`{"other":1}`, false, true},
		{`{"stream":"true"}`, false, true},
		{`[`, false, true},
		{`{"stream":true}` + strings.Repeat(" ", respMaxGetBody), false, true},
	} {
		stream, err := decodeGetBody(strings.NewReader(tc.body))
		if stream != tc.stream || (err != nil) != tc.err {
			t.Errorf("%q: stream %v, err %v; want %v, error %v", tc.body, stream, err, tc.stream, tc.err)
		}
	}
}
