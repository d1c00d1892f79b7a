package replicate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

func TestBuildInput(t *testing.T) {
	all := routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapInputImage,
		protocol.CapInputAudio, protocol.CapInputVideo, protocol.CapInputFile)
	allowed := []string{"steps", "seed", "aspect_ratio", "go_fast"}
	tests := []struct {
		name   string
		input  string // the request's input array
		ext    string // the request's replicate.input, if any
		caps   routing.CapSet
		params []string // the deployment's allowed parameters; nil means allowed
		want   string   // the input object, or the error JSON
	}{
		{
			name:  "text parts are joined whatever their role",
			input: `[{"type":"text","role":"system","text":"Be brief."},{"type":"text","text":"a fox"}]`,
			want:  `{"prompt":"Be brief.\n\na fox"}`,
		},
		{
			name: "json parts join the prompt as compact JSON, in part order; their keys are never input fields",
			input: `[{"type":"text","text":"derived"},{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"},
				{"type":"json","json":{"prompt": "explicit", "steps": 4}},{"type":"text","role":"assistant","text":"then"},
				{"type":"json","json":{"steps":8,"image":"https://example.com/b.png","tools":[{"name":"x"}]}}]`,
			want: `{"prompt":"derived\n\n{\"prompt\":\"explicit\",\"steps\":4}\n\nthen\n\n{\"steps\":8,\"image\":\"https://example.com/b.png\",\"tools\":[{\"name\":\"x\"}]}",
				"image":"https://example.com/a.png"}`,
		},
		{
			name:  "json scalars and arrays are data too",
			input: `[{"type":"json","json":[1, 2]},{"type":"json","json":null},{"type":"json","json":"s"}]`,
			want:  `{"prompt":"[1,2]\n\nnull\n\n\"s\""}`,
		},
		{
			name: "media as data URIs and uris, one key per type",
			input: `[{"type":"image","media_type":"image/png","data":"iVBORw0KGgo="},
				{"type":"audio","media_type":"audio/ogg; codecs=opus","uri":"https://example.com/a.ogg"},
				{"type":"video","media_type":"video/mp4","data":"AAAA"},
				{"type":"file","media_type":"application/pdf","uri":"https://example.com/a.pdf","name":"a.pdf"}]`,
			want: `{"image":"data:image/png;base64,iVBORw0KGgo=","audio":"https://example.com/a.ogg",
				"video":"data:video/mp4;base64,AAAA","file":"https://example.com/a.pdf"}`,
		},
		{
			name:  "media type parameters lose their spaces in a data URI",
			input: `[{"type":"audio","media_type":"audio/ogg; codecs=opus","data":"AAAA"}]`,
			want:  `{"audio":"data:audio/ogg;codecs=opus;base64,AAAA"}`,
		},
		{
			name:  "allowed parameters are sent beside the prompt, values as given",
			input: `[{"type":"text","text":"a fox"}]`,
			ext:   `{"steps":4,"seed":-1e3,"aspect_ratio":"16:9","go_fast":true}`,
			want:  `{"prompt":"a fox","steps":4,"seed":-1e3,"aspect_ratio":"16:9","go_fast":true}`,
		},
		{
			name:   "no parameters",
			input:  `[{"type":"text","text":"a fox"}]`,
			ext:    `{}`,
			params: []string{},
			want:   `{"prompt":"a fox"}`,
		},
		{
			name:  "a parameter the deployment does not allow",
			input: `[{"type":"text","text":"a fox"}]`,
			ext:   `{"steps":4,"num_outputs":4}`,
			want:  `{"code":"invalid_request","message":"a model parameter the request sets is not allowed by the deployment","retryable":false}`,
		},
		{
			name:   "parameters without an allow-list",
			input:  `[{"type":"text","text":"a fox"}]`,
			ext:    `{"seed":1}`,
			params: []string{},
			want:   `{"code":"invalid_request","message":"a model parameter the request sets is not allowed by the deployment","retryable":false}`,
		},
		{
			name:   "a parameter never replaces the prompt, even when allowed",
			input:  `[{"type":"text","text":"a fox"}]`,
			ext:    `{"prompt":"other"}`,
			params: []string{"prompt"},
			want:   `{"code":"invalid_request","message":"model parameters cannot set the prompt or a media input: those come from the input parts","retryable":false}`,
		},
		{
			name:   "a parameter never sets a media input, even when allowed",
			input:  `[{"type":"text","text":"a fox"}]`,
			ext:    `{"image":"a fox"}`,
			params: []string{"image"},
			want:   `{"code":"invalid_request","message":"model parameters cannot set the prompt or a media input: those come from the input parts","retryable":false}`,
		},
		{
			name:  "two images",
			input: `[{"type":"image","media_type":"image/png","data":"AAAA"},{"type":"image","media_type":"image/png","data":"AAAA"}]`,
			want:  `{"code":"unsupported_capability","message":"replicate takes at most one part of each media type","retryable":false}`,
		},
		{
			name:  "undeclared modality",
			input: `[{"type":"video","media_type":"video/mp4","data":"AAAA"}]`,
			caps:  routing.CapsOf(protocol.CapInputText, protocol.CapInputImage),
			want:  `{"code":"unsupported_capability","message":"the deployment does not declare an input modality the request uses","retryable":false}`,
		},
		{
			name:  "json part on a deployment without input.json",
			input: `[{"type":"text","text":"a fox"},{"type":"json","json":{"image":"https://example.com/b.png"}}]`,
			caps:  routing.CapsOf(protocol.CapInputText, protocol.CapInputImage),
			want:  `{"code":"unsupported_capability","message":"the deployment does not declare an input modality the request uses","retryable":false}`,
		},
		{
			name:  "tool result",
			input: `[{"type":"tool_result","call_id":"c1","content":"42"}]`,
			want:  `{"code":"unsupported_capability","message":"replicate deployments cannot take tool, tool_call or tool_result parts","retryable":false}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := tt.caps
			if caps == 0 {
				caps = all
			}
			params := tt.params
			if params == nil {
				params = allowed
			}
			body := `{"ability":"image","input":` + tt.input
			if tt.ext != "" {
				body += `,"extensions":{"replicate.input":` + tt.ext + `}`
			}
			req := request(t, body+`}`)
			got, perr := check(req, &routing.Deployment{Capabilities: caps, Parameters: params})
			if perr != nil {
				assertJSON(t, "error", perr, tt.want)
				return
			}
			assertJSON(t, "input", buildInput(req.Input, got), tt.want)
		})
	}
}

func TestArtifacts(t *testing.T) {
	completed := time.Date(2024, 8, 31, 12, 0, 2, 0, time.UTC)
	tests := []struct {
		name   string
		output string
		known  bool
		want   string
	}{
		{"one URL", `"https://replicate.delivery/a/out.png"`, true,
			`[{"uri":"https://replicate.delivery/a/out.png","media_type":"image/png","expires_at":"2024-08-31T13:00:02Z"}]`},
		{"list, repeats once", `["https://replicate.delivery/a/0.jpg","https://replicate.delivery/a/1.jpg","https://replicate.delivery/a/0.jpg"]`, false,
			`[{"uri":"https://replicate.delivery/a/0.jpg","media_type":"image/jpeg"},{"uri":"https://replicate.delivery/a/1.jpg","media_type":"image/jpeg"}]`},
		{"object values in document order, keys ignored", `{"vocals":"https://replicate.delivery/s/vocals.unknownext","https://key.example/k.png":1,"bass":"https://replicate.delivery/s/bass"}`, false,
			`[{"uri":"https://replicate.delivery/s/vocals.unknownext","media_type":"application/octet-stream"},{"uri":"https://replicate.delivery/s/bass","media_type":"application/octet-stream"}]`},
		{"nested", `{"a":[{"b":"http://files.example/x.json"}],"c":{"d":["https://files.example/y.pdf"]}}`, false,
			`[{"uri":"http://files.example/x.json","media_type":"application/json"},{"uri":"https://files.example/y.pdf","media_type":"application/pdf"}]`},
		{"text tokens are not files", `["Hello"," world","see https://x.example/a.png","data:image/png;base64,AAAA","ftp://x.example/a"]`, true, `[]`},
		{"null", `null`, true, `[]`},
		{"number", `42`, true, `[]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertJSON(t, "artifacts", artifacts(json.RawMessage(tt.output), completed, tt.known), tt.want)
		})
	}
}

func TestLastLogLine(t *testing.T) {
	redact := func(s string) string { return strings.ReplaceAll(s, "secret", "[redacted]") }
	tests := []struct{ logs, want string }{
		{"", ""},
		{"one", "one"},
		{"one\ntwo\n", "two"},
		{"one\n\n  \n", "one"},
		{"bar 10%\rbar 20%\r", "bar 20%"},
		{"a\r\nb\r\n", "b"},
		{"token secret\n", "token [redacted]"},
		{"tab\there\x1b[0m\n", "tab here [0m"},
		{strings.Repeat("é", 300), strings.Repeat("é", maxProgressMessage)},
		{"bad \xff utf8", "bad  utf8"},
	}
	for _, tt := range tests {
		if got := lastLogLine(tt.logs, redact); got != tt.want {
			t.Errorf("lastLogLine(%q) = %q, want %q", tt.logs, got, tt.want)
		}
	}
}

// FuzzArtifacts: any provider output gives artifacts with an http(s) URI and a media
// type, never a panic.
func FuzzArtifacts(f *testing.F) {
	for _, s := range []string{
		`"https://replicate.delivery/a/out.png"`,
		`["https://replicate.delivery/a/0.webp","x"]`,
		`{"a":{"b":["https://x.example/c"]},"d":"e"}`,
		`[[[{}]]]`, `{"":""}`, `nul`, `"\ud800"`, `[1,{"k":[true,null]}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, output string) {
		for _, a := range artifacts(json.RawMessage(output), time.Time{}, false) {
			if _, ok := fileURL(a.URI); !ok || a.MediaType == "" || a.ExpiresAt != nil {
				t.Errorf("artifact %+v from %q", a, output)
			}
		}
	})
}
