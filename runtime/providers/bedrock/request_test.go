package bedrock_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const png = `"media_type":"image/png","data":"iVBORw0KGgo="`

// sentBody runs req on a non-streaming deployment with caps added and returns the body
// the upstream received.
func sentBody(t *testing.T, req *protocol.Request, caps ...protocol.Capability) []byte {
	t.Helper()
	up := newUpstream(t, jsonReply(http.StatusOK, testdata(t, "converse_text.json")))
	res := run(t, deployment(up.URL, withCaps(caps...)), req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	c := up.only(t)
	checkPlacement(t, c)
	if got := c.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	return c.Body
}

func TestRequestMapping(t *testing.T) {
	all := []protocol.Capability{protocol.CapTools, protocol.CapInputImage, protocol.CapInputVideo, protocol.CapInputFile}
	for _, tc := range []struct {
		name string
		body string
		ext  []string
		want string
	}{
		{name: "user text", body: `[{"type":"text","text":"Hello"}]`,
			want: `{"messages":[{"role":"user","content":[{"text":"Hello"}]}]}`},
		{name: "system text and json go to system; empty texts are dropped",
			body: `[{"type":"text","role":"system","text":"Be brief."},{"type":"json","role":"system","json":{"lang": "en"}},
				{"type":"text","role":"system","text":""},{"type":"text","text":""},{"type":"text","text":"Hello"}]`,
			want: `{"system":[{"text":"Be brief."},{"text":"{\"lang\":\"en\"}"}],"messages":[{"role":"user","content":[{"text":"Hello"}]}]}`},
		{name: "consecutive parts of a role merge; role tool is a user turn",
			body: `[{"type":"text","text":"a"},{"type":"json","json":[1, 2]},{"type":"text","role":"assistant","text":"b"},
				{"type":"text","role":"assistant","text":"c"},{"type":"text","role":"tool","text":"d"},{"type":"text","text":"e"}]`,
			want: `{"messages":[
				{"role":"user","content":[{"text":"a"},{"text":"[1,2]"}]},
				{"role":"assistant","content":[{"text":"b"},{"text":"c"}]},
				{"role":"user","content":[{"text":"d"},{"text":"e"}]}]}`},
		{name: "image data and s3 uri",
			body: `[{"type":"text","text":"Compare"},{"type":"image",` + png + `},
				{"type":"image","media_type":"image/webp","uri":"s3://my-bucket/cats/a.webp"}]`,
			want: `{"messages":[{"role":"user","content":[{"text":"Compare"},
				{"image":{"format":"png","source":{"bytes":"iVBORw0KGgo="}}},
				{"image":{"format":"webp","source":{"s3Location":{"uri":"s3://my-bucket/cats/a.webp"}}}}]}]}`},
		{name: "video data and s3 uri",
			body: `[{"type":"video","media_type":"video/mp4","data":"AAAA"},{"type":"video","media_type":"video/3gpp","uri":"S3://b/v.3gp"}]`,
			want: `{"messages":[{"role":"user","content":[
				{"video":{"format":"mp4","source":{"bytes":"AAAA"}}},
				{"video":{"format":"three_gp","source":{"s3Location":{"uri":"s3://b/v.3gp"}}}}]}]}`},
		{name: "documents get safe, unique names",
			body: `[{"type":"file","media_type":"application/pdf","data":"JVBERg==","name":"Q3 report_final.v2.pdf"},
				{"type":"file","media_type":"text/plain; charset=utf-8","data":"aGk=","name":"Q3 report_final.v2.txt"},
				{"type":"file","media_type":"text/markdown","data":"aGk="},
				{"type":"file","media_type":"text/csv","uri":"s3://b/data.csv","name":"ünïcode  name [draft].csv"}]`,
			want: `{"messages":[{"role":"user","content":[
				{"document":{"format":"pdf","name":"Q3 report-final-v2","source":{"bytes":"JVBERg=="}}},
				{"document":{"format":"txt","name":"Q3 report-final-v2 (2)","source":{"bytes":"aGk="}}},
				{"document":{"format":"md","name":"document","source":{"bytes":"aGk="}}},
				{"document":{"format":"csv","name":"-n-code name [draft]","source":{"s3Location":{"uri":"s3://b/data.csv"}}}}]}]}`},
		{name: "tools, a tool call and its result",
			body: `[{"type":"tool","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},
				{"type":"tool","name":"now","parameters":{}},
				{"type":"text","text":"Weather in Paris?"},
				{"type":"tool_call","role":"assistant","call_id":"tooluse_1","name":"get_weather","arguments":" {\"city\": \"Paris\"} "},
				{"type":"tool_call","role":"assistant","call_id":"tooluse_2","name":"now","arguments":""},
				{"type":"text","text":"Also: thanks."},
				{"type":"tool_result","call_id":"tooluse_1","content":"18C"},
				{"type":"tool_result","role":"tool","call_id":"tooluse_2","content":[{"type":"text","text":"noon"},{"type":"json","json":{"tz": "CET"}},{"type":"image",` + png + `}]},
				{"type":"tool_result","call_id":"tooluse_3","content":""}]`,
			want: `{"messages":[
				{"role":"user","content":[{"text":"Weather in Paris?"}]},
				{"role":"assistant","content":[
					{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather","input":{"city":"Paris"}}},
					{"toolUse":{"toolUseId":"tooluse_2","name":"now","input":{}}}]},
				{"role":"user","content":[
					{"toolResult":{"toolUseId":"tooluse_1","content":[{"text":"18C"}]}},
					{"toolResult":{"toolUseId":"tooluse_2","content":[{"text":"noon"},{"text":"{\"tz\":\"CET\"}"},
						{"image":{"format":"png","source":{"bytes":"iVBORw0KGgo="}}}]}},
					{"toolResult":{"toolUseId":"tooluse_3","content":[]}},
					{"text":"Also: thanks."}]}],
				"toolConfig":{"tools":[
					{"toolSpec":{"name":"get_weather","description":"Weather","inputSchema":{"json":{"type":"object","properties":{"city":{"type":"string"}}}}}},
					{"toolSpec":{"name":"now","inputSchema":{"json":{}}}}]}}`},
		{name: "extensions fill inferenceConfig; others are ignored",
			body: `[{"type":"text","text":"Hello"}]`,
			ext: []string{"bedrock.max_tokens", "1e3", "bedrock.temperature", "0.5", "bedrock.top_p", "1",
				"bedrock.stop_sequences", `["\n\nHuman:", "END"]`, "anthropic.max_tokens", "7", "bedrock.model", `"evil"`,
				"bedrock.additional_model_request_fields", `{"tools":[{"name":"x"}]}`, "bedrock.system", `"obey"`},
			want: `{"messages":[{"role":"user","content":[{"text":"Hello"}]}],
				"inferenceConfig":{"maxTokens":1000,"temperature":0.5,"topP":1,"stopSequences":["\n\nHuman:","END"]}}`},
		{name: "an empty stop_sequences list sets nothing",
			body: `[{"type":"text","text":"Hello"}]`, ext: []string{"bedrock.stop_sequences", `[]`},
			want: `{"messages":[{"role":"user","content":[{"text":"Hello"}]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := decode(t, `{"ability":"chat","input":`+tc.body+`}`)
			if tc.ext != nil {
				withExtensions(req, tc.ext...)
			}
			jsonEqual(t, sentBody(t, req, all...), tc.want)
		})
	}
}

// TestRequestRefused: every refusal is made alike by CanEncode and Execute (wrapped by
// engine.NotSent), with nothing sent and a fixed message.
func TestRequestRefused(t *testing.T) {
	media := []protocol.Capability{protocol.CapInputImage, protocol.CapInputVideo, protocol.CapInputFile}
	tools := []protocol.Capability{protocol.CapTools}
	for _, tc := range []struct {
		name string
		body string
		ext  []string
		caps []protocol.Capability
		code protocol.Code
	}{
		{name: "audio", body: `{"type":"audio","media_type":"audio/wav","data":"UklGRg=="}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "image not declared", body: `{"type":"image",` + png + `}`, code: protocol.CodeUnsupportedCapability},
		{name: "video not declared", body: `{"type":"video","media_type":"video/mp4","data":"AAAA"}`, code: protocol.CodeUnsupportedCapability},
		{name: "file not declared", body: `{"type":"file","media_type":"application/pdf","data":"JVBERg=="}`, code: protocol.CodeUnsupportedCapability},
		{name: "image over https", body: `{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "document over https", body: `{"type":"file","media_type":"application/pdf","uri":"https://example.com/a.pdf"}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "image type bedrock lacks", body: `{"type":"image","media_type":"image/bmp","data":"Qk0="}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "video type bedrock lacks", body: `{"type":"video","media_type":"video/ogg","data":"AAAA"}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "file type bedrock lacks", body: `{"type":"file","media_type":"application/zip","data":"UEs="}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "audio in a tool result", body: `{"type":"tool","name":"f","parameters":{}},{"type":"tool_result","call_id":"c1","content":[{"type":"audio","media_type":"audio/wav","data":"UklGRg=="}]}`, caps: append(media, tools...), code: protocol.CodeUnsupportedCapability},
		{name: "system image", body: `{"type":"image","role":"system",` + png + `}`, caps: media, code: protocol.CodeUnsupportedCapability},
		{name: "tools not declared", body: `{"type":"tool","name":"f","parameters":{}}`, code: protocol.CodeUnsupportedCapability},
		{name: "tool call without tools declared", body: `{"type":"tool_call","role":"assistant","call_id":"c1","name":"f","arguments":"{}"}`, code: protocol.CodeUnsupportedCapability},
		{name: "tool call without tool definitions", body: `{"type":"tool_call","role":"assistant","call_id":"c1","name":"f","arguments":"{}"},{"type":"tool_result","call_id":"c1","content":"x"}`, caps: tools, code: protocol.CodeUnsupportedCapability},
		{name: "tool result without tool definitions", body: `{"type":"tool_result","call_id":"c1","content":"x"}`, caps: tools, code: protocol.CodeUnsupportedCapability},
		{name: "tool call arguments not an object", body: `{"type":"tool","name":"f","parameters":{}},{"type":"tool_call","role":"assistant","call_id":"c1","name":"f","arguments":"[1]"}`, caps: tools, code: protocol.CodeInvalidRequest},
		{name: "tool call arguments broken", body: `{"type":"tool","name":"f","parameters":{}},{"type":"tool_call","role":"assistant","call_id":"c1","name":"f","arguments":"{"}`, caps: tools, code: protocol.CodeInvalidRequest},
		{name: "call id bedrock cannot carry", body: `{"type":"tool","name":"f","parameters":{}},{"type":"tool_result","call_id":"call.1","content":"x"}`, caps: tools, code: protocol.CodeUnsupportedCapability},
		{name: "assistant first", body: `{"type":"text","role":"assistant","text":"Hi"},{"type":"text","text":"Hello"}`, code: protocol.CodeUnsupportedCapability},
		{name: "system only", body: `{"type":"text","role":"system","text":"Be brief."}`, code: protocol.CodeUnsupportedCapability},
		{name: "empty text only", body: `{"type":"text","text":""}`, code: protocol.CodeUnsupportedCapability},
		{name: "max_tokens zero", ext: []string{"bedrock.max_tokens", "0"}, code: protocol.CodeInvalidRequest},
		{name: "max_tokens fractional", ext: []string{"bedrock.max_tokens", "1.5"}, code: protocol.CodeInvalidRequest},
		{name: "max_tokens a string", ext: []string{"bedrock.max_tokens", `"10"`}, code: protocol.CodeInvalidRequest},
		{name: "temperature above 1", ext: []string{"bedrock.temperature", "1.01"}, code: protocol.CodeInvalidRequest},
		{name: "top_p negative", ext: []string{"bedrock.top_p", "-0.1"}, code: protocol.CodeInvalidRequest},
		{name: "stop_sequences not a list", ext: []string{"bedrock.stop_sequences", `"END"`}, code: protocol.CodeInvalidRequest},
		{name: "stop_sequences null", ext: []string{"bedrock.stop_sequences", `null`}, code: protocol.CodeInvalidRequest},
		{name: "stop_sequences with an empty string", ext: []string{"bedrock.stop_sequences", `["a",""]`}, code: protocol.CodeInvalidRequest},
		{name: "stop_sequences with a number", ext: []string{"bedrock.stop_sequences", `["a",1]`}, code: protocol.CodeInvalidRequest},
		{name: "too many stop_sequences", ext: []string{"bedrock.stop_sequences", `[` + strings.Repeat(`"a",`, 2500) + `"a"]`}, code: protocol.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if body == "" {
				body = `{"type":"text","text":"Hello"}`
			} else if !strings.Contains(body, `"type":"text"`) && !strings.Contains(body, "tool_call") && !strings.Contains(body, "tool_result") {
				body = `{"type":"text","text":"Look"},` + body
			}
			req := decode(t, `{"ability":"chat","input":[`+body+`]}`)
			if tc.ext != nil {
				withExtensions(req, tc.ext...)
			}
			up := newUpstream(t, jsonReply(http.StatusOK, testdata(t, "converse_text.json")))
			d := deployment(up.URL, withCaps(tc.caps...))
			refusal := bedrock.CanEncode(req, d)
			if refusal == nil || refusal.Code != tc.code {
				t.Fatalf("CanEncode = %v, want %s", refusal, tc.code)
			}
			res := run(t, d, req)
			if !errors.Is(res.err, engine.ErrNotSent) {
				t.Fatalf("Execute error %v, want a NotSent refusal", res.err)
			}
			if pe := asError(t, res.err); pe.Code != refusal.Code || pe.Message != refusal.Message || pe.Retryable {
				t.Errorf("Execute refused with %+v, CanEncode with %+v", pe, refusal)
			}
			if n := len(up.requests()); n != 0 {
				t.Errorf("upstream received %d requests", n)
			}
			for _, s := range []string{"Hello", "Look", "evil", "c1", "call.1", "END"} {
				if strings.Contains(refusal.Message, s) {
					t.Errorf("refusal message %q echoes request content", refusal.Message)
				}
			}
		})
	}
}

// TestCanEncodeMissing: a nil request or deployment is refused, not a panic.
func TestCanEncodeMissing(t *testing.T) {
	if pe := bedrock.CanEncode(nil, &routing.Deployment{}); pe == nil || pe.Code != protocol.CodeInvalidRequest {
		t.Errorf("CanEncode(nil, d) = %v", pe)
	}
	if pe := bedrock.CanEncode(hello(t), nil); pe == nil || pe.Code != protocol.CodeInvalidRequest {
		t.Errorf("CanEncode(req, nil) = %v", pe)
	}
}
