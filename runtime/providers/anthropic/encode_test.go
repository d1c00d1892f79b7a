package anthropic_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// subject is this adapter in the shared provider suite.
var subject = wire.Subject

// TestJSONPartsNeverBecomeFields: a json part naming image, tools, model, system,
// messages or stream reaches a text-only deployment, and a deployment without tools (a
// policy disabled them), as one text block — the exact body shows no media, no tools,
// no system, the deployment's model.
func TestJSONPartsNeverBecomeFields(t *testing.T) {
	text, _ := json.Marshal(compactHostile(t))
	want := `{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[{"role":"user","content":[
		{"type":"text","text":"Describe this record."},{"type":"text","text":` + string(text) + `}]}]}`
	body := `{"ability":"chat","input":[{"type":"text","text":"Describe this record."},{"type":"json","json":` + providertest.Hostile + `}]}`
	for name, caps := range map[string]routing.CapSet{
		"text-only":              providertest.TextJSON,
		"images, tools disabled": providertest.TextJSON | routing.CapsOf(protocol.CapInputImage),
	} {
		t.Run(name, func(t *testing.T) { jsonEqual(t, subject.Sent(t, body, caps), want) })
	}
}

func compactHostile(t *testing.T) string {
	var v json.RawMessage = []byte(providertest.Hostile)
	b, err := json.Marshal(v) // compacts, keeping member order
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeclarableInputsAreEncodable: every input modality a ModelDeployment may declare
// for this provider (spec/modeldeployments.md: text, json, image) has a form CanEncode
// admits; audio, video and file, which it may not declare, are refused in every form.
func TestDeclarableInputsAreEncodable(t *testing.T) {
	d := deployment("http://127.0.0.1:1", withCaps(protocol.CapInputImage, protocol.CapInputAudio, protocol.CapInputVideo, protocol.CapInputFile))
	for _, body := range []string{
		`{"ability":"chat","input":[{"type":"text","text":"t"}]}`,
		`{"ability":"chat","input":[{"type":"json","json":{}}]}`,
		`{"ability":"chat","input":[{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"}]}`,
	} {
		if pe := anthropic.CanEncode(decode(t, body), d); pe != nil {
			t.Errorf("CanEncode(%s) = %v, want admitted", body, pe)
		}
	}
	for _, part := range []string{
		`{"type":"audio","media_type":"audio/wav","data":"UklGRg=="}`,
		`{"type":"audio","media_type":"audio/wav","uri":"https://example.com/a.wav"}`,
		`{"type":"video","media_type":"video/mp4","data":"AAAA"}`,
		`{"type":"file","media_type":"application/pdf","data":"JVBERg=="}`,
		`{"type":"file","media_type":"application/pdf","uri":"https://example.com/a.pdf"}`,
	} {
		body := `{"ability":"chat","input":[{"type":"text","text":"t"},` + part + `]}`
		if pe := anthropic.CanEncode(decode(t, body), d); pe == nil || pe.Code != protocol.CodeUnsupportedCapability {
			t.Errorf("CanEncode(%s) = %v, want unsupported_capability", body, pe)
		}
	}
}

// TestRegister installs the factory and CanEncode.
func TestRegister(t *testing.T) {
	m := map[string]engine.Provider{}
	anthropic.Register(m)
	p, ok := m[anthropic.Provider]
	if !ok || p.New == nil || p.CanEncode == nil {
		t.Fatalf("Register = %+v", m)
	}
	if a, err := p.New(deployment("http://127.0.0.1:1")); err != nil || a == nil {
		t.Errorf("New = %v, %v", a, err)
	}
}

// TestFinishReasonSanitised: the stop reason becomes the finish reason only when it is
// an identifier of at most 128 bytes without the credential, streamed or not; anything
// else completes without one.
func TestFinishReasonSanitised(t *testing.T) {
	for _, tc := range []struct{ name, stop, want string }{
		{"documented", "end_turn", "end_turn"},
		{"unknown identifier", "model_context_window_exceeded", "model_context_window_exceeded"},
		{"128 bytes", strings.Repeat("a", 128), strings.Repeat("a", 128)},
		{"129 bytes", strings.Repeat("a", 129), ""},
		{"huge", strings.Repeat("end_turn", 100000), ""},
		{"the credential", canary, ""},
		{"the credential inside", "stop_" + canary + "_x", ""},
		{"free text", "end turn; see https://evil.example/?k=" + canary[:6], ""},
		{"markup", "<script>alert(1)</script>", ""},
		{"control characters", "end_turn\r\nX-Injected: 1", ""},
		{"non-ASCII", "fin_de_tour_é", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop, _ := json.Marshal(tc.stop)
			t.Run("message", func(t *testing.T) {
				up := newUpstream(t, http.StatusOK, "")
				up.handler = func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte(`{"type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"stop_reason":` + string(stop) + `}`))
				}
				res := run(t, deployment(up.URL), hello(t))
				if res.err != nil || res.outcome.FinishReason != tc.want {
					t.Errorf("Execute = %+v, %v; want finish reason %q", res.outcome, res.err, tc.want)
				}
			})
			t.Run("stream", func(t *testing.T) {
				up := newUpstream(t, http.StatusOK, "")
				up.handler = func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = w.Write([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
						"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":" + string(stop) + "}}\n\n" +
						"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
				}
				res := run(t, deployment(up.URL, streaming), hello(t))
				if res.err != nil || res.outcome.FinishReason != tc.want {
					t.Errorf("Execute = %+v, %v; want finish reason %q", res.outcome, res.err, tc.want)
				}
			})
		})
	}
}
