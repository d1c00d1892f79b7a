package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// fakeUpstream answers every request with one JSON body and keeps the bodies it received.
type fakeUpstream struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newFakeUpstream(t *testing.T, answer string) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, b)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// take returns the bodies received since the last call.
func (u *fakeUpstream) take() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.bodies
	u.bodies = nil
	return b
}

// Through the binary's adapters, routing and engine: a generation option one provider
// cannot honour makes routing skip its deployments (the adapter's encode check declines
// it), so the request runs on a provider that honours it, which receives the option in
// its own field; and a CapabilityPolicy's allowedExtensions governs the generation keys
// like any other key.
func TestGenerationOptionsFallBack(t *testing.T) {
	gpt := newFakeUpstream(t, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini",`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}]}`)
	claude := newFakeUpstream(t, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",`+
		`"content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`)
	text := routing.CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText)
	deployments := func(claudeExtensions ...string) []routing.Deployment {
		ds := []routing.Deployment{
			{Ref: routing.Ref{Namespace: "ai", Name: "gpt"}, Provider: "openai", Model: "gpt-4o-mini", Endpoint: gpt.srv.URL + "/v1",
				Credential: routing.NewCredential("sk-test"), Abilities: []string{"chat"}, Capabilities: text, Weight: 100, Priority: 10},
			{Ref: routing.Ref{Namespace: "ai", Name: "claude"}, Provider: "anthropic", Model: "claude-sonnet-4-5", Endpoint: claude.srv.URL,
				Credential: routing.NewCredential("sk-ant-test"), Abilities: []string{"chat"}, Capabilities: text, Weight: 100},
		}
		if claudeExtensions != nil {
			ds[1].Limits.Extensions = [][]string{claudeExtensions}
		}
		return ds
	}
	cfg := engine.Config{Providers: providers(true)}

	// run submits body and returns the deployment that served it and the body its
	// upstream received.
	run := func(t *testing.T, h *enginetest.Harness, body string) (string, map[string]json.RawMessage) {
		t.Helper()
		req, err := protocol.DecodeRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		events := h.WaitTerminal(h.Submit(req).ID)
		if last := events[len(events)-1]; last.Type != protocol.EventCompleted {
			t.Fatalf("execution ended with %s %s", last.Type, last.Data)
		}
		var served protocol.RouteSelectedData
		for _, ev := range events {
			if ev.Type == protocol.EventRouteSelected {
				if err := json.Unmarshal(ev.Data, &served); err != nil {
					t.Fatal(err)
				}
			}
		}
		var sent [][]byte
		switch served.Deployment {
		case "ai/gpt":
			sent = gpt.take()
			if n := len(claude.take()); n != 0 {
				t.Errorf("the anthropic upstream received %d requests", n)
			}
		case "ai/claude":
			sent = claude.take()
			if n := len(gpt.take()); n != 0 {
				t.Errorf("the openai upstream received %d requests", n)
			}
		}
		if len(sent) != 1 {
			t.Fatalf("%s received %d requests, want 1", served.Deployment, len(sent))
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(sent[0], &members); err != nil {
			t.Fatal(err)
		}
		return served.Deployment, members
	}
	const hello = `{"ability":"chat","input":[{"type":"text","text":"Hello"}]`

	t.Run("top_k falls back from openai to anthropic", func(t *testing.T) {
		h := enginetest.NewHarness(t, cfg, deployments()...)
		if served, _ := run(t, h, hello+`}`); served != "ai/gpt" {
			t.Fatalf("without options the request ran on %s, want the higher priority ai/gpt", served)
		}
		served, body := run(t, h, hello+`,"extensions":{"generation.top_k":40,"generation.max_output_tokens":64}}`)
		if served != "ai/claude" || string(body["top_k"]) != "40" || string(body["max_tokens"]) != "64" {
			t.Errorf("ran on %s with top_k %s, max_tokens %s; want ai/claude with 40 and 64", served, body["top_k"], body["max_tokens"])
		}
	})
	t.Run("a temperature over 1 falls back from anthropic to openai", func(t *testing.T) {
		h := enginetest.NewHarness(t, cfg, deployments()...)
		served, body := run(t, h, hello+`,"routing":{"prefer":["ai/claude"]},"extensions":{"generation.temperature":1.5}}`)
		if served != "ai/gpt" || string(body["temperature"]) != "1.5" {
			t.Errorf("ran on %s with temperature %s; want ai/gpt with 1.5", served, body["temperature"])
		}
		served, body = run(t, h, hello+`,"routing":{"prefer":["ai/claude"]},"extensions":{"generation.temperature":0.5}}`)
		if served != "ai/claude" || string(body["temperature"]) != "0.5" {
			t.Errorf("ran on %s with temperature %s; want ai/claude with 0.5", served, body["temperature"])
		}
	})
	t.Run("allowedExtensions governs generation keys", func(t *testing.T) {
		h := enginetest.NewHarness(t, cfg, deployments("anthropic.*", "generation.temperature")...)
		// top_k: openai declines it and the policy keeps the request off claude.
		req, err := protocol.DecodeRequest([]byte(hello + `,"extensions":{"generation.top_k":40}}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = h.Engine.Submit(t.Context(), engine.Principal{}, req, engine.Idempotency{})
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeUnsupportedCapability {
			t.Fatalf("Submit = %v, want unsupported_capability", err)
		}
		if n := len(gpt.take()) + len(claude.take()); n != 0 {
			t.Fatalf("a refused request reached an upstream %d times", n)
		}
		// An allowed key still reaches claude.
		served, _ := run(t, h, hello+`,"routing":{"prefer":["ai/claude"]},"extensions":{"generation.temperature":0.5}}`)
		if served != "ai/claude" {
			t.Errorf("an allowed key ran on %s, want ai/claude", served)
		}
		// A prefix allows every generation key.
		h = enginetest.NewHarness(t, cfg, deployments("generation.*")...)
		if served, _ := run(t, h, hello+`,"extensions":{"generation.top_k":40}}`); served != "ai/claude" {
			t.Errorf("generation.* did not allow generation.top_k: ran on %s", served)
		}
	})
}
