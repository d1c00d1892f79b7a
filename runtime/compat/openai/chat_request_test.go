package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// png is a small canonical base64 payload.
const png = "iVBORw0KGgo="

func TestDecodeChatTranslation(t *testing.T) {
	body := `{
	  "model": "chat",
	  "messages": [
	    {"role": "system", "content": "Be brief."},
	    {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
	    {"role": "user", "content": [
	      {"type": "text", "text": "What is here?"},
	      {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,` + png + `", "detail": "low"}},
	      {"type": "image_url", "image_url": {"url": "https://example.com/photos/cat.webp?size=2"}},
	      {"type": "image_url", "image_url": {"url": "https://example.com/render"}},
	      {"type": "input_audio", "input_audio": {"data": "` + png + `", "format": "mp3"}},
	      {"type": "file", "file": {"file_data": "data:application/pdf;base64,` + png + `", "filename": "a.pdf"}},
	      {"type": "file", "file": {"filename": "notes.md", "file_data": "` + png + `"}}
	    ]},
	    {"content": "", "role": "assistant", "refusal": null, "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
	    ]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
	    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
	    {"role": "assistant", "content": [{"type": "text", "text": "It is "}, {"type": "refusal", "refusal": "no"}], "refusal": "really"}
	  ],
	  "tools": [
	    {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}},
	    {"type": "function", "function": {"name": "now"}}
	  ],
	  "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
	  "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "description": "d", "strict": true, "schema": {"type": "object"}}},
	  "stream": true, "stream_options": {"include_usage": true},
	  "max_completion_tokens": 100, "temperature": 0.5, "top_p": 1, "stop": "END", "seed": -3, "n": 1,
	  "user": "u-1", "metadata": {"team": "search"}, "parallel_tool_calls": false
	}`
	got, err := decodeChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got.model != "chat" || !got.stream || !got.includeUsage {
		t.Errorf("model %q stream %v usage %v", got.model, got.stream, got.includeUsage)
	}
	text := func(role protocol.Role, s string) protocol.Part {
		return protocol.Part{Type: protocol.PartText, Role: role, Text: s}
	}
	str := func(s string) *string { return &s }
	want := protocol.Request{
		Input: []protocol.Part{
			text(protocol.RoleSystem, "Be brief."),
			text(protocol.RoleSystem, "Use metric units."),
			text("", "What is here?"),
			{Type: protocol.PartImage, MediaType: "image/png", Data: png},
			{Type: protocol.PartImage, MediaType: "image/webp", URI: "https://example.com/photos/cat.webp?size=2"},
			{Type: protocol.PartImage, MediaType: "image/jpeg", URI: "https://example.com/render"},
			{Type: protocol.PartAudio, MediaType: "audio/mpeg", Data: png},
			{Type: protocol.PartFile, MediaType: "application/pdf", Data: png, Name: "a.pdf"},
			{Type: protocol.PartFile, MediaType: "text/markdown", Data: png, Name: "notes.md"},
			{Type: protocol.PartToolCall, Role: protocol.RoleAssistant, CallID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			{Type: protocol.PartToolResult, CallID: "call_1", Content: &protocol.ToolContent{Text: str("18 C")}},
			{Type: protocol.PartToolResult, CallID: "call_2", Content: &protocol.ToolContent{Parts: []protocol.Part{
				{Type: protocol.PartText, Text: "a"}, {Type: protocol.PartText, Text: "b"},
			}}},
			text(protocol.RoleAssistant, "It is "),
			text(protocol.RoleAssistant, "no"),
			text(protocol.RoleAssistant, "really"),
			{Type: protocol.PartTool, Name: "get_weather", Description: "Weather now", Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}}}`)},
			{Type: protocol.PartTool, Name: "now", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
		},
		Requirements: []protocol.Capability{protocol.CapStructuredOutput},
		Metadata:     map[string]string{"team": "search", "user": "u-1"},
		Extensions: map[string]json.RawMessage{
			"generation.tool_choice":          json.RawMessage(`"tool:get_weather"`),
			"generation.response_schema":      json.RawMessage(`{"type": "object"}`),
			"generation.response_schema_name": json.RawMessage(`"answer"`),
			"generation.max_output_tokens":    json.RawMessage(`100`),
			"generation.temperature":          json.RawMessage(`0.5`),
			"generation.top_p":                json.RawMessage(`1`),
			"generation.stop":                 json.RawMessage(`["END"]`),
			"generation.seed":                 json.RawMessage(`-3`),
		},
	}
	rawString := cmp.Transformer("raw", func(r json.RawMessage) string { return string(r) })
	if diff := cmp.Diff(want, got.native, rawString); diff != "" {
		t.Errorf("native request (-want +got):\n%s", diff)
	}
	// The translation is a request DecodeRequest takes, parts, options and limits alike.
	got.native.Ability = "chat"
	b, err := json.Marshal(&got.native)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.DecodeRequest(b); err != nil {
		t.Errorf("DecodeRequest: %v\n%s", err, b)
	}
}

func TestDecodeChatOptions(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		ext          map[string]string
		reqs         []protocol.Capability
	}{
		{"json object", `"response_format":{"type":"json_object"}`, map[string]string{"generation.response_format": `"json"`}, []protocol.Capability{protocol.CapOutputJSON}},
		{"text format", `"response_format":{"type":"text"}`, nil, nil},
		{"stop array", `"stop":["a","b"]`, map[string]string{"generation.stop": `["a","b"]`}, nil},
		{"empty stop", `"stop":[]`, nil, nil},
		{"max_tokens", `"max_tokens":5`, map[string]string{"generation.max_output_tokens": `5`}, nil},
		{"tool choice mode", `"tool_choice":"required"`, map[string]string{"generation.tool_choice": `"required"`}, nil},
		{"no obfuscation", `"stream":true,"stream_options":{"include_obfuscation":false}`, nil, nil},
		{"nulls", `"temperature":null,"stop":null,"user":null,"metadata":null,"tools":null,"tool_choice":null,"response_format":null,"stream":null,"n":null,"seed":null`, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],` + tc.fields + `}`))
			if err != nil {
				t.Fatal(err)
			}
			ext := map[string]string{}
			for k, v := range got.native.Extensions {
				ext[k] = string(v)
			}
			if len(tc.ext) == 0 && len(ext) == 0 {
				ext = nil
			}
			if diff := cmp.Diff(tc.ext, ext, cmp.Comparer(func(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })); diff != "" {
				t.Errorf("extensions (-want +got):\n%s", diff)
			}
			if !cmp.Equal(tc.reqs, got.native.Requirements) {
				t.Errorf("requirements %v", got.native.Requirements)
			}
		})
	}
}

// marker stands for caller content: no refusal may hold it.
const marker = "ZQXCANARY"

func TestDecodeChatRefusals(t *testing.T) {
	m := func(messages string) string { return `{"model":"m","messages":[` + messages + `]}` }
	user := `{"role":"user","content":"x"}`
	withField := func(field string) string { return `{"model":"m","messages":[` + user + `],` + field + `}` }
	part := func(p string) string { return m(`{"role":"user","content":[` + p + `]}`) }
	for _, tc := range []struct{ name, body, param, rule string }{
		{"not JSON", `{"model":`, "body", "not valid JSON"},
		{"trailing data", withField(`"n":1`) + ` {}`, "body", "not valid JSON"},
		{"not an object", `["` + marker + `"]`, "body", "must be a JSON object"},
		{"repeated member", `{"model":"m","model":"m","messages":[` + user + `]}`, "body", "repeats a member"},
		{"unknown field", withField(`"` + marker + `":1`), "body", "unknown field"},
		{"unsupported field", withField(`"logit_bias":{}`), "logit_bias", "not supported by this front door"},
		{"no model", `{"messages":[` + user + `]}`, "model", ruleRequired},
		{"empty model", `{"model":"","messages":[` + user + `]}`, "model", ruleRequired},
		{"model type", `{"model":1,"messages":[` + user + `]}`, "model", "must be a string"},
		{"no messages", `{"model":"m"}`, "messages", ruleRequired},
		{"empty messages", m(``), "messages", "must be a non-empty array of messages"},
		{"no role", m(`{"content":"x"}`), "messages[0].role", ruleRequired},
		{"function role", m(`{"role":"function","content":"x","name":"f"}`), "messages[0].name", "not supported by this front door"},
		{"bad role", m(`{"role":"` + marker + `","content":"x"}`), "messages[0].role", ruleRole},
		{"message name", m(user + `,{"role":"user","content":"x","name":"` + marker + `"}`), "messages[1].name", "not supported by this front door"},
		{"unknown message field", m(`{"role":"user","content":"x","` + marker + `":1}`), "messages[0]", "unknown field"},
		{"user without content", m(`{"role":"user"}`), "messages[0].content", ruleRequired},
		{"null content", m(`{"role":"user","content":null}`), "messages[0].content", ruleRequired},
		{"empty parts", m(`{"role":"user","content":[]}`), "messages[0].content", ruleContent},
		{"content type", m(`{"role":"user","content":5}`), "messages[0].content", ruleContent},
		{"tool calls on user", m(`{"role":"user","content":"x","tool_calls":[]}`), "messages[0].tool_calls", ruleNotForRole},
		{"tool_call_id on user", m(`{"role":"user","content":"x","tool_call_id":"c"}`), "messages[0].tool_call_id", ruleNotForRole},
		{"image in system", m(`{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://a/b.png"}}]}`), "messages[0].content[0].type", rulePartForRole},
		{"refusal part from user", part(`{"type":"refusal","refusal":"x"}`), "messages[0].content[0].type", rulePartForRole},
		{"empty assistant", m(user + `,{"role":"assistant","content":null}`), "messages[1]", ruleAssistant},
		{"tool without id", m(`{"role":"tool","content":"x"}`), "messages[0].tool_call_id", ruleRequired},
		{"tool with image", m(`{"role":"tool","tool_call_id":"c","content":[{"type":"image_url","image_url":{"url":"https://a/b.png"}}]}`), "messages[0].content[0].type", rulePartForRole},
		{"empty call id", m(`{"role":"tool","tool_call_id":"","content":"x"}`), "messages[0].tool_call_id", ruleCallID},
		{"part without type", part(`{"text":"x"}`), "messages[0].content[0].type", ruleRequired},
		{"part type", part(`{"type":"` + marker + `"}`), "messages[0].content[0].type", rulePartType},
		{"text without text", part(`{"type":"text"}`), "messages[0].content[0].text", ruleRequired},
		{"member of another type", part(`{"type":"text","text":"x","image_url":{"url":"https://a"}}`), "messages[0].content[0].image_url", ruleNotForPart},
		{"unknown part field", part(`{"type":"text","text":"x","` + marker + `":1}`), "messages[0].content[0]", "unknown field"},
		{"image without url", part(`{"type":"image_url","image_url":{}}`), "messages[0].content[0].image_url.url", ruleRequired},
		{"image scheme", part(`{"type":"image_url","image_url":{"url":"ftp://` + marker + `"}}`), "messages[0].content[0].image_url.url", ruleImageURL},
		{"image data not an image", part(`{"type":"image_url","image_url":{"url":"data:text/plain;base64,` + png + `"}}`), "messages[0].content[0].image_url.url", ruleImageURL},
		{"image data not base64", part(`{"type":"image_url","image_url":{"url":"data:image/png,` + marker + `"}}`), "messages[0].content[0].image_url.url", ruleImageURL},
		{"image data not canonical", part(`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo"}}`), "messages[0].content[0].image_url.url", ruleBase64},
		{"image url with spaces", part(`{"type":"image_url","image_url":{"url":"https://a/b c.png"}}`), "messages[0].content[0].image_url.url", ruleURILength},
		{"detail", part(`{"type":"image_url","image_url":{"url":"https://a/b.png","detail":"` + marker + `"}}`), "messages[0].content[0].image_url.detail", ruleDetail},
		{"audio format", part(`{"type":"input_audio","input_audio":{"data":"` + png + `","format":"ogg"}}`), "messages[0].content[0].input_audio.format", ruleAudioFmt},
		{"audio data", part(`{"type":"input_audio","input_audio":{"data":"` + marker + `","format":"wav"}}`), "messages[0].content[0].input_audio.data", ruleBase64},
		{"audio without format", part(`{"type":"input_audio","input_audio":{"data":"` + png + `"}}`), "messages[0].content[0].input_audio.format", ruleRequired},
		{"file id", part(`{"type":"file","file":{"file_id":"file-` + marker + `"}}`), "messages[0].content[0].file.file_id", ruleFileDataID},
		{"file without data", part(`{"type":"file","file":{"filename":"a.pdf"}}`), "messages[0].content[0].file.file_data", ruleRequired},
		{"file data URL", part(`{"type":"file","file":{"file_data":"data:application/pdf,` + marker + `"}}`), "messages[0].content[0].file.file_data", ruleDataURL},
		{"file name", part(`{"type":"file","file":{"file_data":"` + png + `","filename":"a\u0001.pdf"}}`), "messages[0].content[0].file.filename", ruleFileName},
		{"call without id", m(`{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`), "messages[0].tool_calls[0].id", ruleRequired},
		{"custom call", m(`{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{}}]}`), "messages[0].tool_calls[0].custom", "not supported by this front door"},
		{"call type", m(`{"role":"assistant","tool_calls":[{"id":"c","type":"` + marker + `","function":{"name":"f","arguments":"{}"}}]}`), "messages[0].tool_calls[0].type", ruleFunctionType},
		{"call name", m(`{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"a b","arguments":"{}"}}]}`), "messages[0].tool_calls[0].function.name", ruleToolName},
		{"call without arguments", m(`{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f"}}]}`), "messages[0].tool_calls[0].function.arguments", ruleRequired},
		{"tool type", withField(`"tools":[{"type":"custom"}]`), "tools[0].type", ruleFunctionType},
		{"tool name", withField(`"tools":[{"type":"function","function":{"name":"` + marker + `!"}}]`), "tools[0].function.name", ruleToolName},
		{"tool parameters", withField(`"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]`), "tools[0].function.parameters", "must be an object"},
		{"unknown tool field", withField(`"tools":[{"type":"function","function":{"name":"f","` + marker + `":1}}]`), "tools[0].function", "unknown field"},
		{"tool choice", withField(`"tool_choice":"` + marker + `"`), "tool_choice", ruleToolChoice},
		{"tool choice type", withField(`"tool_choice":{"type":"allowed_tools","allowed_tools":{}}`), "tool_choice.allowed_tools", "not supported by this front door"},
		{"tool choice name", withField(`"tool_choice":{"type":"function","function":{"name":""}}`), "tool_choice.function.name", ruleToolName},
		{"format type", withField(`"response_format":{"type":"` + marker + `"}`), "response_format.type", ruleRespFormat},
		{"schema without name", withField(`"response_format":{"type":"json_schema","json_schema":{"schema":{}}}`), "response_format.json_schema.name", ruleSchemaName},
		{"schema missing", withField(`"response_format":{"type":"json_schema","json_schema":{"name":"a"}}`), "response_format.json_schema.schema", ruleRequired},
		{"json_schema without member", withField(`"response_format":{"type":"json_schema"}`), "response_format.json_schema", ruleRequired},
		{"schema on json_object", withField(`"response_format":{"type":"json_object","json_schema":{"name":"a","schema":{}}}`), "response_format.json_schema", ruleNotForPart},
		{"n", withField(`"n":2`), "n", ruleNOne},
		{"temperature", withField(`"temperature":2.5`), "temperature", ruleTemperature},
		{"top_p", withField(`"top_p":-1`), "top_p", ruleTopP},
		{"max_tokens", withField(`"max_tokens":0`), "max_tokens", ruleTokens},
		{"max_tokens above the native bound", withField(`"max_tokens":1000001`), "max_tokens", ruleTokens},
		{"max_tokens fraction", withField(`"max_completion_tokens":1.5`), "max_completion_tokens", ruleTokens},
		{"both caps", withField(`"max_tokens":1,"max_completion_tokens":1`), "max_tokens", ruleTokensBoth},
		{"seed", withField(`"seed":1.5`), "seed", ruleSeed},
		{"stop count", withField(`"stop":["a","b","c","d","e"]`), "stop", ruleStop},
		{"stop empty", withField(`"stop":""`), "stop", ruleStop},
		{"stop type", withField(`"stop":[1]`), "stop[0]", "must be a string"},
		{"stream_options alone", withField(`"stream_options":{"include_usage":true}`), "stream_options", ruleStreamOptions},
		{"obfuscation", withField(`"stream":true,"stream_options":{"include_obfuscation":true}`), "stream_options.include_obfuscation", ruleObfuscation},
		{"stream option", withField(`"stream":true,"stream_options":{"` + marker + `":true}`), "stream_options", "unknown field"},
		{"stream type", withField(`"stream":"yes"`), "stream", "must be a boolean"},
		{"metadata key", withField(`"metadata":{"` + marker + `":"x"}`), "metadata", ruleMetaKey},
		{"metadata value", withField(`"metadata":{"a":"` + strings.Repeat("v", 257) + `"}`), "metadata", ruleMetaValue},
		{"metadata type", withField(`"metadata":{"a":1}`), "metadata", ruleMetaValue},
		{"metadata count", withField(`"metadata":{"a0":"","a1":"","a2":"","a3":"","a4":"","a5":"","a6":"","a7":"","a8":"","a9":"","b0":"","b1":"","b2":"","b3":"","b4":"","b5":"","b6":""}`), "metadata", ruleMetaCount},
		{"metadata and user count", withField(`"user":"u","metadata":{"a0":"","a1":"","a2":"","a3":"","a4":"","a5":"","a6":"","a7":"","a8":"","a9":"","b0":"","b1":"","b2":"","b3":"","b4":"","b5":""}`), "metadata", ruleMetaCount},
		{"user twice", withField(`"user":"u","metadata":{"user":"v"}`), "user", ruleUserMetadata},
		{"user length", withField(`"user":"` + strings.Repeat("u", 257) + `"`), "user", ruleUser},
		{"too many parts", m(strings.Repeat(user+",", 256) + user), "messages", ruleTooManyParts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeChat([]byte(tc.body))
			var fe *compat.Refusal
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a refusal", err)
			}
			if fe.Loc != tc.param || fe.Err.Message != tc.param+": "+tc.rule || fe.Err.Code != protocol.CodeInvalidRequest {
				t.Errorf("refusal %q (param %q), want %q", fe.Err.Message, fe.Loc, tc.param+": "+tc.rule)
			}
			if strings.Contains(strings.ToLower(fe.Err.Message), strings.ToLower(marker)) {
				t.Errorf("the refusal echoes the caller: %s", fe.Err.Message)
			}
		})
	}
}

// An assistant's empty content is no text beside its tool calls, and text on its own.
func TestDecodeChatEmptyAssistantContent(t *testing.T) {
	for _, tc := range []struct {
		message string
		want    []protocol.PartType
	}{
		{`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`, []protocol.PartType{protocol.PartToolCall}},
		{`{"role":"assistant","content":""}`, []protocol.PartType{protocol.PartText}},
	} {
		got, err := decodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"},` + tc.message + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		var types []protocol.PartType
		for _, p := range got.native.Input[1:] {
			types = append(types, p.Type)
		}
		if !cmp.Equal(types, tc.want) {
			t.Errorf("%s: parts %v, want %v", tc.message, types, tc.want)
		}
	}
}

// BenchmarkDecodeChat decodes and translates a typical small request.
func BenchmarkDecodeChat(b *testing.B) {
	body := []byte(`{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[` +
		`{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"Write a haiku about switchboards and the people who run them, please."}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeChat(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSchemaMetadataDropped: generated schemas name their dialect by URL ("$schema", as
// zod-to-json-schema writes it), which the native registry refuses as it refuses every
// URL; the door drops the root's document metadata so that such a schema is accepted.
func TestSchemaMetadataDropped(t *testing.T) {
	body := `{"model":"chat","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":` +
		`{"$schema":"http://json-schema.org/draft-07/schema#","$id":"https://example.com/a.json","type":"object","properties":{"x":{"type":"string"}}}}}}`
	got, err := decodeChat([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	schema := string(got.native.Extensions[protocol.GenerationResponseSchema])
	if want := `{"properties":{"x":{"type":"string"}},"type":"object"}`; schema != want {
		t.Errorf("schema sent on: %s, want %s", schema, want)
	}
	got.native.Ability = "chat" // the model's, set when the name is resolved
	native, err := json.Marshal(&got.native)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.DecodeRequest(native); err != nil {
		t.Errorf("the native decoder refused the translated request: %v", err)
	}
	if got := upstreamSchema(json.RawMessage(`{"type":"object"}`)); string(got) != `{"type":"object"}` {
		t.Errorf("a schema without metadata changed: %s", got)
	}
}
