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
	tests := []struct {
		name  string
		input string // the request's input array
		caps  routing.CapSet
		want  string // the input object, or the error JSON
	}{
		{
			name:  "text parts are joined whatever their role",
			input: `[{"type":"text","role":"system","text":"Be brief."},{"type":"text","text":"a fox"}]`,
			want:  `{"prompt":"Be brief.\n\na fox"}`,
		},
		{
			name: "json keys override prompt and media keys; later parts override earlier",
			input: `[{"type":"text","text":"derived"},{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"},
				{"type":"json","json":{"prompt":"explicit","steps":4}},{"type":"json","json":{"steps":8,"image":"https://example.com/b.png"}}]`,
			want: `{"prompt":"explicit","steps":8,"image":"https://example.com/b.png"}`,
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
			name:  "json only",
			input: `[{"type":"json","json":{}}]`,
			want:  `{}`,
		},
		{
			name:  "two images",
			input: `[{"type":"image","media_type":"image/png","data":"AAAA"},{"type":"image","media_type":"image/png","data":"AAAA"}]`,
			want:  `{"code":"invalid_request","message":"replicate takes at most one part of each media type","retryable":false}`,
		},
		{
			name:  "json part that is not an object",
			input: `[{"type":"json","json":[1,2]}]`,
			want:  `{"code":"invalid_request","message":"replicate json parts must hold a JSON object of input fields","retryable":false}`,
		},
		{
			name:  "json null",
			input: `[{"type":"json","json":null}]`,
			want:  `{"code":"invalid_request","message":"replicate json parts must hold a JSON object of input fields","retryable":false}`,
		},
		{
			name:  "undeclared modality",
			input: `[{"type":"video","media_type":"video/mp4","data":"AAAA"}]`,
			caps:  routing.CapsOf(protocol.CapInputText, protocol.CapInputImage),
			want:  `{"code":"unsupported_capability","message":"the deployment does not declare an input modality the request uses","retryable":false}`,
		},
		{
			name:  "tool result",
			input: `[{"type":"tool_result","call_id":"c1","content":"42"}]`,
			want:  `{"code":"invalid_request","message":"replicate deployments cannot take tool, tool_call or tool_result parts","retryable":false}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := tt.caps
			if caps == 0 {
				caps = all
			}
			req := request(t, `{"ability":"image","input":`+tt.input+`}`)
			got, perr := buildInput(req.Input, caps)
			if perr != nil {
				assertJSON(t, "error", perr, tt.want)
				return
			}
			assertJSON(t, "input", got, tt.want)
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
