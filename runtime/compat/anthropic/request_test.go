package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// pdfData is a small PDF document, canonical base64; pngData a 1x1 PNG.
const (
	pdfData = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwvUm9vdCAxIDAgUj4+CiUlRU9GCg=="
	pngData = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)

// chatModel and pinnedModel are the two kinds of model names (spec/compat.md, "Model
// names").
var (
	chatModel   = compat.Model{ID: "chat", Ability: "chat"}
	pinnedModel = compat.Model{ID: "ai/claude", Ability: "chat", Deployment: "ai/claude", Namespace: "ai", Provider: "anthropic", ProviderModel: "claude-sonnet-4-5"}
)

// native decodes a request and returns its native JSON for m, parsed.
func native(t *testing.T, body string, m compat.Model) (*request, any) {
	t.Helper()
	r, err := decodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("decodeRequest: %v", err)
	}
	b, jerr := r.nativeJSON(m)
	if jerr != nil {
		t.Fatal(jerr)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return r, v
}

func parse(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad test JSON %s: %v", s, err)
	}
	return v
}

func TestTranslation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		model  compat.Model
		stream bool
		want   string // the native request
	}{
		{
			name: "the smallest request",
			body: `{"model":"chat","max_tokens":100,"messages":[{"role":"user","content":"Hello"}]}`,
			want: `{"ability":"chat","input":[{"type":"text","text":"Hello"}],"extensions":{"generation.max_output_tokens":100}}`,
		},
		{
			name:  "a deployment's name pins it",
			body:  `{"model":"ai/claude","max_tokens":1e3,"messages":[{"role":"user","content":"Hello"}],"stream":true}`,
			model: pinnedModel, stream: true,
			want: `{"ability":"chat","input":[{"type":"text","text":"Hello"}],"routing":{"only":["ai/claude"]},
				"extensions":{"generation.max_output_tokens":1000}}`,
		},
		{
			name: "a conversation with every block",
			body: `{"model":"chat","max_tokens":1024,
				"system":"Answer briefly.",
				"messages":[
					{"role":"user","content":[
						{"type":"text","text":"What is in these?"},
						{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngData + `"}},
						{"type":"image","source":{"type":"url","url":"https://example.com/cat.webp?size=2"}},
						{"type":"image","source":{"type":"url","url":"https://example.com/photo"}},
						{"type":"document","title":"report.pdf","source":{"type":"base64","media_type":"application/pdf","data":"` + pdfData + `"}},
						{"type":"document","source":{"type":"url","url":"https://example.com/paper.pdf"}}]},
					{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{ "city" : "Paris" }}],"role":"assistant"},
					{"role":"user","content":[
						{"type":"tool_result","tool_use_id":"toolu_1","content":"18C","is_error":false},
						{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"no map"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngData + `"}}]},
						{"type":"tool_result","tool_use_id":"toolu_3"}]},
					{"role":"assistant","content":"Partly"}],
				"tools":[{"name":"get_weather","description":"The weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
					{"type":"custom","name":"get_map","input_schema":{"type":"object"}}],
				"tool_choice":{"type":"any","disable_parallel_tool_use":true},
				"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END","\n\nHuman:"],
				"metadata":{"user_id":"user-42"}}`,
			want: `{"ability":"chat","input":[
				{"type":"text","role":"system","text":"Answer briefly."},
				{"type":"tool","name":"get_weather","description":"The weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},
				{"type":"tool","name":"get_map","parameters":{"type":"object"}},
				{"type":"text","text":"What is in these?"},
				{"type":"image","media_type":"image/png","data":"` + pngData + `"},
				{"type":"image","media_type":"image/webp","uri":"https://example.com/cat.webp?size=2"},
				{"type":"image","media_type":"image/jpeg","uri":"https://example.com/photo"},
				{"type":"file","media_type":"application/pdf","data":"` + pdfData + `","name":"report.pdf"},
				{"type":"file","media_type":"application/pdf","uri":"https://example.com/paper.pdf"},
				{"type":"text","role":"assistant","text":"Let me look."},
				{"type":"tool_call","role":"assistant","call_id":"toolu_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
				{"type":"tool_result","call_id":"toolu_1","content":"18C"},
				{"type":"tool_result","call_id":"toolu_2","content":[{"type":"text","text":"no map"},{"type":"image","media_type":"image/png","data":"` + pngData + `"}]},
				{"type":"tool_result","call_id":"toolu_3","content":""},
				{"type":"text","role":"assistant","text":"Partly"}],
				"metadata":{"user_id":"user-42"},
				"extensions":{"generation.max_output_tokens":1024,"generation.temperature":0.5,"generation.top_p":0.9,
					"generation.top_k":40,"generation.stop":["END","\n\nHuman:"],"generation.tool_choice":"required"}}`,
		},
		{
			name: "system text blocks",
			body: `{"model":"chat","max_tokens":5,"system":[{"type":"text","text":"One."},{"text":"Two.","type":"text"}],"messages":[{"role":"user","content":"Hi"}]}`,
			want: `{"ability":"chat","input":[{"type":"text","role":"system","text":"One."},{"type":"text","role":"system","text":"Two."},
				{"type":"text","text":"Hi"}],"extensions":{"generation.max_output_tokens":5}}`,
		},
		{
			name: "tool choices",
			body: `{"model":"chat","max_tokens":5,"tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"tool","name":"t"},"messages":[{"role":"user","content":"Hi"}]}`,
			want: `{"ability":"chat","input":[{"type":"tool","name":"t","parameters":{}},{"type":"text","text":"Hi"}],
				"extensions":{"generation.max_output_tokens":5,"generation.tool_choice":"tool:t"}}`,
		},
		{
			name: "tool choice none and auto",
			body: `{"model":"chat","max_tokens":5,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"Hi"}]}`,
			want: `{"ability":"chat","input":[{"type":"text","text":"Hi"}],"extensions":{"generation.max_output_tokens":5,"generation.tool_choice":"none"}}`,
		},
		{
			name: "null is absent for optional members",
			body: `{"model":"chat","max_tokens":5,"system":null,"tools":null,"tool_choice":null,"stream":null,"temperature":null,
				"top_p":null,"top_k":null,"stop_sequences":null,"metadata":{"user_id":null},"cache_control":null,
				"messages":[{"role":"user","content":[{"type":"text","text":"Hi","cache_control":null,"citations":null},
					{"type":"document","title":null,"context":null,"source":{"type":"base64","media_type":"application/pdf","data":"` + pdfData + `"}}]}]}`,
			want: `{"ability":"chat","input":[{"type":"text","text":"Hi"},{"type":"file","media_type":"application/pdf","data":"` + pdfData + `"}],
				"extensions":{"generation.max_output_tokens":5}}`,
		},
		{
			name: "an empty stop list and an empty user id ask for nothing",
			body: `{"model":"chat","max_tokens":5,"stop_sequences":[],"metadata":{"user_id":""},"messages":[{"role":"user","content":"Hi"}]}`,
			want: `{"ability":"chat","input":[{"type":"text","text":"Hi"}],"extensions":{"generation.max_output_tokens":5}}`,
		},
		{
			name: "cache breakpoints name the parts their blocks become",
			body: `{"model":"chat","max_tokens":5,
				"messages":[{"role":"user","content":[
					{"type":"text","text":"Doc","cache_control":{"type":"ephemeral"}},
					{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r","cache_control":{"type":"ephemeral","ttl":"5m"}}]},
					{"type":"text","text":"Q"}]}],
				"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral","ttl":"1h"}}],
				"tools":[{"name":"t","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]}`,
			want: `{"ability":"chat","input":[{"type":"text","role":"system","text":"S"},{"type":"tool","name":"t","parameters":{"type":"object"}},
				{"type":"text","text":"Doc"},{"type":"tool_result","call_id":"t1","content":[{"type":"text","text":"r"}]},{"type":"text","text":"Q"}],
				"extensions":{"generation.max_output_tokens":5,"anthropic.cache_control":["0:1h","1","2","3"]}}`,
		},
		{
			name: "top-level cache control and the last block's own are one breakpoint",
			body: `{"model":"chat","max_tokens":5,"cache_control":{"type":"ephemeral","ttl":"1h"},
				"messages":[{"role":"user","content":[{"type":"text","text":"Q","cache_control":{"type":"ephemeral"}}]}]}`,
			want: `{"ability":"chat","input":[{"type":"text","text":"Q"}],
				"extensions":{"generation.max_output_tokens":5,"anthropic.cache_control":["0:1h"]}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.model
			if m.ID == "" {
				m = chatModel
			}
			r, got := native(t, tc.body, m)
			if diff := cmp.Diff(parse(t, tc.want), got); diff != "" {
				t.Errorf("native request (-want +got):\n%s", diff)
			}
			if r.stream != tc.stream || r.model != m.ID {
				t.Errorf("stream, model = %v, %q; want %v, %q", r.stream, r.model, tc.stream, m.ID)
			}
		})
	}
}

// TestCacheMarksOverLimit: five breakpoints are refused, as Anthropic refuses them,
// even though the native limit would be met by fewer distinct parts.
func TestCacheMarksOverLimit(t *testing.T) {
	block := `{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}`
	body := `{"model":"chat","max_tokens":5,"messages":[{"role":"user","content":[` + strings.Repeat(block+",", 4) + block + `]}]}`
	_, err := decodeRequest([]byte(body))
	if err == nil || err.Message != "cache_control: at most 4 blocks may carry cache_control" {
		t.Errorf("err = %v", err)
	}
}

// TestNativeDecodes: what the door submits is a request the native decoder accepts,
// so no native limit is ever met under a native name.
func TestNativeDecodes(t *testing.T) {
	body := `{"model":"chat","max_tokens":1000000,"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Q"},
			{"type":"image","source":{"type":"url","url":"https://example.com/a.gif"}},
			{"type":"document","title":"a.pdf","source":{"type":"base64","media_type":"application/pdf","data":"` + pdfData + `"}}]},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"t","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngData + `"}}]}]}],
		"tools":[{"name":"t","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"t"},
		"temperature":1,"top_p":0,"top_k":1000000,"stop_sequences":["A","B","C","D"],"metadata":{"user_id":"u"}}`
	r, err := decodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []compat.Model{chatModel, pinnedModel} {
		b, jerr := r.nativeJSON(m)
		if jerr != nil {
			t.Fatal(jerr)
		}
		n, err := protocol.DecodeRequest(b)
		if err != nil {
			t.Fatalf("native request %s: %v", b, err)
		}
		if _, err := protocol.Generation(n); err != nil {
			t.Errorf("generation options of %s: %v", b, err)
		}
	}
}

// TestRefusals: every bad request is a 400 whose message names the location in the
// Messages schema and the rule, and never holds what the caller sent.
func TestRefusals(t *testing.T) {
	const marker = "ZQXCANARY"
	msg := func(content string) string {
		return `{"model":"chat","max_tokens":5,"messages":[{"role":"user","content":` + content + `}]}`
	}
	block := func(b string) string { return msg(`[` + b + `]`) }
	for _, tc := range []struct {
		name, body, want string
	}{
		{"not JSON", `{"model":`, "body: not valid JSON"},
		{"two documents", `{}{}`, "body: not valid JSON"},
		{"invalid UTF-8", "{\"model\":\"\xff\"}", "body: not valid JSON"},
		{"not an object", `["` + marker + `"]`, "body: must be an object"},
		{"an unknown member", `{"` + marker + `":1,"model":"chat"}`, "body: unknown field"},
		{"a member without a mapping", `{"thinking":{"type":"enabled","budget_tokens":1024}}`, "thinking: not supported by this runtime"},
		{"service tier", `{"service_tier":"auto"}`, "service_tier: not supported by this runtime"},
		{"a repeated member", `{"model":"chat","model":"` + marker + `"}`, "body: duplicate object key"},
		{"a repeated member inside a schema", `{"tools":[{"name":"t","input_schema":{"type":"object","type":"` + marker + `"}}]}`, "tools[0].input_schema: duplicate object key"},
		{"no model", `{"max_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`, "model: required"},
		{"an empty model", `{"model":""}`, "model: must not be empty"},
		{"a model that is not a string", `{"model":7}`, "model: must be a string"},
		{"no max_tokens", `{"model":"chat","messages":[{"role":"user","content":"Hi"}]}`, "max_tokens: required"},
		{"max_tokens zero", `{"max_tokens":0}`, "max_tokens: must be an integer from 1 to 1000000"},
		{"max_tokens fractional", `{"max_tokens":1.5}`, "max_tokens: must be an integer from 1 to 1000000"},
		{"max_tokens a string", `{"max_tokens":"5"}`, "max_tokens: must be an integer from 1 to 1000000"},
		{"max_tokens too large", `{"max_tokens":1000001}`, "max_tokens: must be an integer from 1 to 1000000"},
		{"no messages", `{"model":"chat","max_tokens":5}`, "messages: required"},
		{"no message", `{"model":"chat","max_tokens":5,"messages":[]}`, "messages: must hold at least one message with content"},
		{"messages not an array", `{"messages":{}}`, "messages: must be an array"},
		{"a system role", `{"messages":[{"content":"Hi","role":"system"}]}`, "messages[0].role: must be user or assistant"},
		{"no role", `{"messages":[{"content":"Hi"}]}`, "messages[0].role: required"},
		{"no content", `{"messages":[{"role":"user"}]}`, "messages[0].content: required"},
		{"a message member", `{"messages":[{"role":"user","content":"Hi","` + marker + `":1}]}`, "messages[0]: unknown field"},
		{"content of the wrong type", msg(`7`), "messages[0].content: must be a string or an array of content blocks"},
		{"a block member", block(`{"type":"text","text":"a","` + marker + `":1}`), "messages[0].content[0]: unknown field"},
		{"a block without type", block(`{"text":"a"}`), "messages[0].content[0].type: required"},
		{"an unknown block type", block(`{"type":"` + marker + `"}`), "messages[0].content[0].type: " + ruleBlockType},
		{"a thinking block", block(`{"signature":"x","thinking":"hm","type":"thinking"}`), "messages[0].content[0].type: not supported by this runtime"},
		{"a redacted thinking block", block(`{"type":"redacted_thinking"}`), "messages[0].content[0].type: not supported by this runtime"},
		{"citations", block(`{"type":"text","text":"a","citations":[]}`), "messages[0].content[0].citations: not supported by this runtime"},
		{"a member of another block type", block(`{"type":"image","text":"a","source":{"type":"url","url":"https://x/a.png"}}`), "messages[0].content[0].text: not allowed for this block type"},
		{"text without text", block(`{"type":"text"}`), "messages[0].content[0].text: required"},
		{"an image without source", block(`{"type":"image"}`), "messages[0].content[0].source: required"},
		{"bad base64", block(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + marker + `"}}`), "messages[0].content[0].source.data: must be non-empty canonical standard base64 (padded, no line breaks)"},
		{"base64 with a line break", block(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGk=\naGk="}}`), "messages[0].content[0].source.data: must be non-empty canonical standard base64 (padded, no line breaks)"},
		{"an image that is text", block(`{"type":"image","source":{"type":"base64","media_type":"text/plain","data":"aGk="}}`), "messages[0].content[0].source.media_type: must be an image media type such as image/png"},
		{"a base64 source without media type", block(`{"type":"image","source":{"type":"base64","data":"aGk="}}`), "messages[0].content[0].source.media_type: required"},
		{"a base64 source with a url", block(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGk=","url":"https://x"}}`), "messages[0].content[0].source.url: not allowed for base64 sources"},
		{"an image URL of another scheme", block(`{"type":"image","source":{"type":"url","url":"file:///` + marker + `"}}`), "messages[0].content[0].source.url: must be an http or https URL of printable ASCII, at most 8192 characters"},
		{"a url source with data", block(`{"type":"image","source":{"type":"url","url":"https://x/a.png","data":"aGk="}}`), "messages[0].content[0].source.data: not allowed for url sources"},
		{"a file source", block(`{"type":"image","source":{"type":"file","file_id":"f"}}`), "messages[0].content[0].source.file_id: not supported by this runtime"},
		{"an unknown source type", block(`{"type":"image","source":{"type":"` + marker + `"}}`), "messages[0].content[0].source.type: must be base64 or url"},
		{"a document that is no PDF", block(`{"type":"document","source":{"type":"base64","media_type":"image/png","data":"aGk="}}`), "messages[0].content[0].source.media_type: must be application/pdf"},
		{"a text document", block(`{"type":"document","source":{"type":"text","media_type":"text/plain"}}`), "messages[0].content[0].source.type: must be base64 or url: only PDF documents are supported by this runtime"},
		{"document context", block(`{"type":"document","context":"x","source":{"type":"url","url":"https://x/a.pdf"}}`), "messages[0].content[0].context: not supported by this runtime"},
		{"a title with a control character", block(`{"type":"document","title":"a\u0007b","source":{"type":"url","url":"https://x/a.pdf"}}`), "messages[0].content[0].title: must be at most 255 characters without control characters"},
		{"tool_use from the user", block(`{"type":"tool_use","id":"t","name":"n","input":{}}`), "messages[0].content[0]: tool_use blocks belong to assistant messages"},
		{"an image from the assistant", `{"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]}`, "messages[0].content[1]: image blocks belong to user messages"},
		{"a tool result from the assistant", `{"messages":[{"content":[{"type":"tool_result","tool_use_id":"t"}],"role":"assistant"}]}`, "messages[0].content[0]: tool_result blocks belong to user messages"},
		{"tool_use without input", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n"}]}]}`, "messages[0].content[0].input: required"},
		{"tool_use input that is no object", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":[1]}]}]}`, "messages[0].content[0].input: must be an object"},
		{"a tool call name", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a b","input":{}}]}]}`, "messages[0].content[0].name: must match " + protocol.ToolNamePattern},
		{"an empty tool call id", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"","name":"n","input":{}}]}]}`, "messages[0].content[0].id: must be 1 to 256 characters"},
		{"tool_use caller", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{},"caller":{"type":"direct"}}]}]}`, "messages[0].content[0].caller: not supported by this runtime"},
		{"a tool result without id", block(`{"type":"tool_result","content":"x"}`), "messages[0].content[0].tool_use_id: required"},
		{"a tool result inside a tool result", block(`{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_result","tool_use_id":"u"}]}`), "messages[0].content[0].content[0].type: must be text, image or document inside tool_result content"},
		{"content inside tool result content", block(`{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a","content":"b"}]}`), "messages[0].content[0].content[0]: unknown field"},
		{"tool result content of the wrong type", block(`{"type":"tool_result","tool_use_id":"t","content":7}`), "messages[0].content[0].content: must be a string or an array of content blocks"},
		{"is_error not a boolean", block(`{"type":"tool_result","tool_use_id":"t","is_error":"yes"}`), "messages[0].content[0].is_error: must be a boolean"},
		{"a system prompt of the wrong type", `{"system":7}`, "system: must be a string or an array of text blocks"},
		{"an image in the system prompt", `{"system":[{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}`, "system[0].type: must be text"},
		{"a tool without schema", `{"tools":[{"name":"t"}]}`, "tools[0].input_schema: required"},
		{"a tool without name", `{"tools":[{"input_schema":{}}]}`, "tools[0].name: required"},
		{"a tool name", `{"tools":[{"name":"` + marker + `!","input_schema":{}}]}`, "tools[0].name: must match " + protocol.ToolNamePattern},
		{"a server tool", `{"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "tools[0].type: only custom tools are supported by this runtime"},
		{"a strict tool", `{"tools":[{"name":"t","input_schema":{},"strict":true}]}`, "tools[0].strict: not supported by this runtime"},
		{"a tool member", `{"tools":[{"name":"t","input_schema":{},"` + marker + `":1}]}`, "tools[0]: unknown field"},
		{"a schema that is no object", `{"tools":[{"name":"t","input_schema":"` + marker + `"}]}`, "tools[0].input_schema: must be an object"},
		{"tool choice without type", `{"tool_choice":{}}`, "tool_choice.type: required"},
		{"an unknown tool choice", `{"tool_choice":{"type":"` + marker + `"}}`, "tool_choice.type: must be one of auto, any, tool, none"},
		{"tool choice tool without name", `{"tool_choice":{"type":"tool"}}`, "tool_choice.name: required"},
		{"tool choice auto with a name", `{"tool_choice":{"type":"auto","name":"t"}}`, "tool_choice.name: allowed only when type is tool"},
		{"serial tool use that is no boolean", `{"tool_choice":{"type":"auto","disable_parallel_tool_use":"yes"}}`, "tool_choice.disable_parallel_tool_use: must be a boolean"},
		{"any tool without tools", `{"model":"chat","max_tokens":5,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"Hi"}]}`, "tool_choice: requires tools"},
		{"a tool choice naming no tool", `{"model":"chat","max_tokens":5,"tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"tool","name":"` + marker + `"},"messages":[{"role":"user","content":"Hi"}]}`, "tool_choice.name: must name one of tools"},
		{"stream not a boolean", `{"stream":"yes"}`, "stream: must be a boolean"},
		{"temperature above 1", `{"temperature":1.5}`, "temperature: must be a number from 0 to 1"},
		{"temperature a string", `{"temperature":"hot"}`, "temperature: must be a number from 0 to 1"},
		{"top_p negative", `{"top_p":-0.1}`, "top_p: must be a number from 0 to 1"},
		{"top_k zero", `{"top_k":0}`, "top_k: must be an integer from 1 to 1000000"},
		{"a blank stop sequence", `{"stop_sequences":[" "]}`, "stop_sequences[0]: must contain non-whitespace characters"},
		{"a stop sequence that is no string", `{"stop_sequences":["a",1]}`, "stop_sequences[1]: must be a string"},
		{"five stop sequences", `{"stop_sequences":["a","b","c","d","e"]}`, "stop_sequences: must hold at most 4 sequences of at most 256 characters"},
		{"a metadata member", `{"metadata":{"` + marker + `":"x"}}`, "metadata: unknown field"},
		{"a long user id", `{"metadata":{"user_id":"` + strings.Repeat("x", 257) + `"}}`, "metadata.user_id: must be at most 256 characters"},
		{"a cache control of another type", block(`{"type":"text","text":"a","cache_control":{"type":"` + marker + `"}}`), "messages[0].content[0].cache_control.type: must be ephemeral"},
		{"a cache TTL", block(`{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"2h"}}`), "messages[0].content[0].cache_control.ttl: must be 5m or 1h"},
		{"a cache control without type", `{"cache_control":{}}`, "cache_control.type: required"},
		{"too many parts", msg(`[` + strings.Repeat(`{"type":"text","text":"a"},`, protocol.MaxInputParts) + `{"type":"text","text":"a"}]`), "messages: the system blocks, tools and content blocks together must be at most 256"},
		{"too many tool result blocks", block(`{"type":"tool_result","tool_use_id":"t","content":[` + strings.Repeat(`{"type":"text","text":"a"},`, protocol.MaxContentParts) + `{"type":"text","text":"a"}]}`), "messages[0].content[0].content: must hold at most 256 blocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeRequest([]byte(tc.body))
			if err == nil {
				t.Fatalf("accepted: %+v", r)
			}
			if err.Code != protocol.CodeInvalidRequest || err.Retryable {
				t.Errorf("error = %+v, want invalid_request, not retryable", err)
			}
			if err.Message != tc.want {
				t.Errorf("message = %q\n want %q", err.Message, tc.want)
			}
			if strings.Contains(strings.ToLower(err.Message), strings.ToLower(marker)) {
				t.Errorf("message echoes the caller: %q", err.Message)
			}
		})
	}
}
