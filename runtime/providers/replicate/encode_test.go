package replicate

import (
	"encoding/json"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// subject is this adapter in the shared provider suite.
var subject = wire.Subject

// TestJSONPartsNeverBecomeInputs: a json part naming image, audio, tools, prompt, model,
// version or input reaches a text-only deployment, and one that declares images but no
// tools, as prompt text — the exact create body holds the prompt and nothing else.
func TestJSONPartsNeverBecomeInputs(t *testing.T) {
	var hostile json.RawMessage = []byte(providertest.Hostile)
	compact, err := json.Marshal(hostile)
	if err != nil {
		t.Fatal(err)
	}
	prompt, _ := json.Marshal("Describe this record.\n\n" + string(compact))
	want := `{"input":{"prompt":` + string(prompt) + `}}`
	body := `{"ability":"image","input":[{"type":"text","text":"Describe this record."},{"type":"json","json":` + providertest.Hostile + `}]}`
	for name, caps := range map[string]routing.CapSet{
		"text-only":              providertest.TextJSON,
		"images, tools disabled": providertest.TextJSON | routing.CapsOf(protocol.CapInputImage),
	} {
		t.Run(name, func(t *testing.T) {
			assertJSON(t, "create body", jsonText(subject.Sent(t, body, caps, "seed")), want)
		})
	}
}

// TestParametersAllowList: replicate.input names outside the deployment's
// allowedParameters are refused by CanEncode with invalid_request (a 400 when no other
// deployment is eligible); names inside it are sent, beside the prompt.
func TestParametersAllowList(t *testing.T) {
	body := `{"ability":"image","input":[{"type":"text","text":"a fox"}],"extensions":{"replicate.input":{"seed":42,"go_fast":false}}}`
	d := deployment("http://127.0.0.1:1", func(d *routing.Deployment) { d.Parameters = []string{"seed"} })
	if pe := CanEncode(request(t, body), d); pe == nil || pe.Code != protocol.CodeInvalidRequest {
		t.Errorf("CanEncode with go_fast not allowed = %v, want invalid_request", pe)
	}
	d.Parameters = []string{"seed", "go_fast"}
	if pe := CanEncode(request(t, body), d); pe != nil {
		t.Errorf("CanEncode with both allowed = %v", pe)
	}
	got := subject.Sent(t, body, providertest.TextJSON, "seed", "go_fast")
	assertJSON(t, "create body", jsonText(got), `{"input":{"prompt":"a fox","seed":42,"go_fast":false}}`)
}

// TestDeclarableInputsAreEncodable: every input modality a replicate ModelDeployment may
// declare has a form CanEncode admits, one part of each at once included.
func TestDeclarableInputsAreEncodable(t *testing.T) {
	d := deployment("http://127.0.0.1:1", withCaps(protocol.CapInputText, protocol.CapInputJSON, protocol.CapInputImage,
		protocol.CapInputAudio, protocol.CapInputVideo, protocol.CapInputFile, protocol.CapOutputImage))
	body := `{"ability":"image","input":[{"type":"text","text":"t"},{"type":"json","json":{}},
		{"type":"image","media_type":"image/png","uri":"https://example.com/a.png"},
		{"type":"audio","media_type":"audio/ogg","data":"T2dnUw=="},
		{"type":"video","media_type":"video/mp4","uri":"https://example.com/v.mp4"},
		{"type":"file","media_type":"application/pdf","data":"JVBERg=="}]}`
	if pe := CanEncode(request(t, body), d); pe != nil {
		t.Errorf("CanEncode = %v, want admitted", pe)
	}
}

// TestRegister installs the factory and CanEncode.
func TestRegister(t *testing.T) {
	m := map[string]engine.Provider{}
	Register(m)
	p, ok := m[Provider]
	if !ok || p.New == nil || p.CanEncode == nil {
		t.Fatalf("Register = %+v", m)
	}
	if a, err := p.New(deployment("")); err != nil || a == nil {
		t.Errorf("New = %v, %v", a, err)
	}
}
