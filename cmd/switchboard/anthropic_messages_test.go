package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The Anthropic front door (spec/compat.md, "Anthropic Messages") with the official Go
// SDK as its client, against the built binary and the demo provider: messages streamed
// (Claude-style: the SDK's accumulated message equals the non-streamed one) and not,
// usage, a tool round trip, an image and a PDF, cache breakpoints, a refusal, fallback
// after a 503, every error class the SDK reports, a cut stream, x-api-key auth,
// disconnects, and the same executions read natively.

// Test media, base64: a 1x1 PNG (70 bytes) and a tiny PDF (82 bytes), as the demo
// provider's describe models report them.
const (
	messagesPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
	messagesPDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwvUm9vdCAxIDAgUj4+CiUlRU9GCg=="
)

// messagesModels are the deployments the Messages tests add to the e2e manifests, each
// with its own ability: look (OpenAI wire, describes images and files), sonnet
// (Anthropic wire with tools and images, describes images), refuse (Anthropic, stop
// reason refusal), limited (429), rejected (the provider refuses the credential: 502),
// cut (streams cut after their content).
func messagesModels(provider string) string {
	model := func(name, wire, model, ability, caps string) string {
		endpoint := map[string]string{"openai-compatible": "/openai/v1", "anthropic": "/anthropic"}[wire]
		return fmt.Sprintf(`apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: %s, namespace: e2e}
spec:
  provider: %s
  model: %s
  endpoint: http://%s%s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [%s]
  capabilities: %s
`, name, wire, model, provider, endpoint, ability, caps)
	}
	return strings.Join([]string{
		model("look", "openai-compatible", "echo-describe", "look", "{input: [text, image, file], streaming: true}"),
		model("sonnet", "anthropic", "claude-describe", "sonnet", "{input: [text, image], streaming: true, tools: true}"),
		model("refuser", "anthropic", "claude-refuse", "refuse", "{streaming: true}"),
		model("limited", "openai-compatible", "echo-error-429", "limited", "{streaming: true}"),
		model("rejected", "openai-compatible", "echo-error-401", "rejected", "{streaming: true}"),
		model("snipped", "openai-compatible", "echo-truncate", "cut", "{streaming: true}"),
	}, "---\n")
}

// messagesEnv is a runtime serving the front doors with static tokens: alice may use
// the e2e models, the outsider none.
type messagesEnv struct {
	*env
	alice, outsider string
	native          *client.Client // alice's, on the native API
}

func newMessagesEnv(t *testing.T) *messagesEnv {
	t.Helper()
	token := func() string {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(b)
	}
	m := &messagesEnv{alice: token(), outsider: token()}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%s,alice,e2e\n%s,outsider,elsewhere\n", m.alice, m.outsider)), 0o600); err != nil {
		t.Fatal(err)
	}
	m.env = setupWith(t, messagesModels, "--auth=static", "--auth-tokens-file", path)
	var err error
	if m.native, err = client.New("http://"+m.api, client.WithBearerToken(m.alice)); err != nil {
		t.Fatal(err)
	}
	return m
}

// sdk is an Anthropic client of the runtime for token, which retries nothing: the
// tests count executions. The SDK sends its API key as Authorization: Bearer.
func (m *messagesEnv) sdk(token string) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL("http://"+m.api+"/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// ended waits for execution id to end and returns its status.
func (m *messagesEnv) ended(t *testing.T, id string) *protocol.ExecutionStatus {
	t.Helper()
	var st *protocol.ExecutionStatus
	eventually(t, 15*time.Second, "execution "+id+" to end", func() bool {
		var err error
		st, err = m.native.Get(context.Background(), id)
		return err == nil && st.Status.Terminal()
	})
	return st
}

// messageSummary is what a client reads of a message, without its id.
type messageSummary struct {
	Model, Role, Type, StopReason string
	Usage                         [4]int64 // input, output, cache read, cache creation
	Content                       []string
}

func summarizeMessage(m *anthropic.Message) messageSummary {
	s := messageSummary{Model: m.Model, Role: string(m.Role), Type: string(m.Type), StopReason: string(m.StopReason),
		Usage: [4]int64{m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CacheReadInputTokens, m.Usage.CacheCreationInputTokens}}
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			s.Content = append(s.Content, "text "+b.Text)
		case "tool_use":
			var input bytes.Buffer
			_ = json.Compact(&input, b.Input)
			s.Content = append(s.Content, "tool_use "+b.Name+" "+input.String())
		default:
			s.Content = append(s.Content, b.Type)
		}
	}
	return s
}

// both sends params non-streamed and streamed, checks that the SDK's accumulated stream
// is the non-streamed message, and returns the message and both executions' ids.
func both(t *testing.T, ctx context.Context, c anthropic.Client, params anthropic.MessageNewParams) (*anthropic.Message, string, string) {
	t.Helper()
	var resp *http.Response
	msg, err := c.Messages.New(ctx, params, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	id := resp.Header.Get("Switchboard-Execution-Id")
	if id == "" || msg.ID != id {
		t.Errorf("message id %q, Switchboard-Execution-Id %q", msg.ID, id)
	}
	stream := c.Messages.NewStreaming(ctx, params, option.WithResponseInto(&resp))
	var acc anthropic.Message
	events := 0
	for stream.Next() {
		events++
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	streamID := resp.Header.Get("Switchboard-Execution-Id")
	if acc.ID != streamID || streamID == id {
		t.Errorf("streamed message id %q, header %q (non-streamed %q)", acc.ID, streamID, id)
	}
	if a, b := summarizeMessage(msg), summarizeMessage(&acc); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("the accumulated stream (%d events) differs from the message:\n stream %+v\nmessage %+v", events, b, a)
	}
	return msg, id, streamID
}

func user(blocks ...anthropic.ContentBlockParamUnion) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(blocks...)}
}

// sdkError is err as the SDK's error type, which it must be, with status and type.
func sdkError(t *testing.T, what string, err error, status int, typ string) *anthropic.Error {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("%s: error %v (%T), want an *anthropic.Error", what, err, err)
	}
	if ae.StatusCode != status || string(ae.Type()) != typ {
		t.Errorf("%s: %d %s (%s), want %d %s", what, ae.StatusCode, ae.Type(), ae.RawJSON(), status, typ)
	}
	return ae
}

func TestAnthropicMessagesGoSDK(t *testing.T) {
	m := newMessagesEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := m.sdk(m.alice)

	t.Run("text, streamed and not, after a fallback from a 503", func(t *testing.T) {
		msg, id, streamID := both(t, ctx, c, anthropic.MessageNewParams{
			Model: "chat", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("hello from the Go SDK")),
		})
		s := summarizeMessage(msg)
		if s.Model != "echo" || s.StopReason != "end_turn" || len(s.Content) != 1 || s.Content[0] != "text hello from the Go SDK" {
			t.Errorf("message %+v", s)
		}
		if s.Usage[0] < 1 || s.Usage[1] != 5 {
			t.Errorf("usage %v, want the demo's word count in and five pieces out", s.Usage)
		}
		for _, x := range []string{id, streamID} {
			st := m.ended(t, x)
			if st.Status != protocol.StatusCompleted || st.Attempts != 2 || st.Route == nil || st.Route.Deployment != "e2e/echo" {
				t.Errorf("execution %s: %+v", x, st)
			}
			snap, err := m.native.Result(ctx, x)
			if err != nil || len(snap.Output) != 1 || snap.Output[0].Text != "hello from the Go SDK" {
				t.Errorf("result of %s: %+v, %v", x, snap, err)
			}
		}
	})

	t.Run("a tool round trip", func(t *testing.T) {
		params := anthropic.MessageNewParams{
			Model: "chat", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("Weather in Paris?")),
			Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
		}
		call, _, _ := both(t, ctx, c, params)
		if s := summarizeMessage(call); s.StopReason != "tool_use" || len(s.Content) != 1 || s.Content[0] != `tool_use get_weather {"city":"Paris"}` {
			t.Fatalf("call %+v", s)
		}
		params.Messages = append(params.Messages, call.ToParam(),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.Content[0].ID, "Sunny, 21C", false)))
		answer, _, _ := both(t, ctx, c, params)
		if s := summarizeMessage(answer); s.StopReason != "end_turn" || len(s.Content) != 1 || s.Content[0] != "text Sunny, 21C" {
			t.Errorf("answer %+v", s)
		}
	})

	t.Run("an image and a PDF reach the provider", func(t *testing.T) {
		doc := anthropic.NewDocumentBlock(anthropic.Base64PDFSourceParam{Data: messagesPDF})
		doc.OfDocument.Title = anthropic.String("report.pdf")
		msg, _, _ := both(t, ctx, c, anthropic.MessageNewParams{Model: "look", MaxTokens: 64, Messages: user(
			anthropic.NewTextBlock("What are these?"), anthropic.NewImageBlockBase64("image/png", messagesPNG), doc)})
		if s := summarizeMessage(msg); len(s.Content) != 1 || s.Content[0] != "text image image/png 70 bytes; file application/pdf 82 bytes report.pdf" {
			t.Errorf("OpenAI wire: %+v", s)
		}
		msg, _, _ = both(t, ctx, c, anthropic.MessageNewParams{Model: "e2e/sonnet", MaxTokens: 64, Messages: user(
			anthropic.NewTextBlock("What is this?"), anthropic.NewImageBlock(anthropic.URLImageSourceParam{URL: "https://example.com/cat.jpg"}))})
		if s := summarizeMessage(msg); s.Model != "claude-describe" || len(s.Content) != 1 || s.Content[0] != "text image url" {
			t.Errorf("Anthropic wire: %+v", s)
		}
	})

	t.Run("cache breakpoints reach anthropic deployments only", func(t *testing.T) {
		block := anthropic.TextBlockParam{Text: "a long, reusable context", CacheControl: anthropic.NewCacheControlEphemeralParam()}
		params := anthropic.MessageNewParams{Model: "sonnet", MaxTokens: 64,
			System:   []anthropic.TextBlockParam{{Text: "Be brief.", CacheControl: anthropic.NewCacheControlEphemeralParam()}},
			Messages: user(anthropic.ContentBlockParamUnion{OfText: &block}, anthropic.NewTextBlock("Summarize."))}
		msg, _, _ := both(t, ctx, c, params)
		if s := summarizeMessage(msg); s.Usage[3] != 2 {
			t.Errorf("anthropic deployment: usage %v, want 2 breakpoints created", s.Usage)
		}
		params.Model = "chat"
		msg, _, _ = both(t, ctx, c, params)
		if s := summarizeMessage(msg); s.Usage[3] != 0 || s.Model != "echo" {
			t.Errorf("openai-compatible deployment: %+v", s)
		}
	})

	t.Run("a refusal is a message", func(t *testing.T) {
		msg, id, _ := both(t, ctx, c, anthropic.MessageNewParams{Model: "refuse", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("something"))})
		if msg.StopReason != anthropic.StopReasonRefusal {
			t.Errorf("stop_reason %s", msg.StopReason)
		}
		if st := m.ended(t, id); st.Error == nil || st.Error.Code != protocol.CodeContentFiltered {
			t.Errorf("native status %+v", st)
		}
	})

	t.Run("errors", func(t *testing.T) {
		hi := user(anthropic.NewTextBlock("hi"))
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 64, Messages: hi}, option.WithJSONSet("frobnicate", true))
		if ae := sdkError(t, "an unknown field", err, 400, "invalid_request_error"); !strings.Contains(ae.RawJSON(), `"message":"body: unknown field"`) {
			t.Errorf("400 body %s", ae.RawJSON())
		}
		_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-opus-4-1", MaxTokens: 64, Messages: hi})
		if ae := sdkError(t, "an unknown model", err, 404, "not_found_error"); strings.Contains(ae.RawJSON(), "opus") {
			t.Errorf("the 404 echoes the model: %s", ae.RawJSON())
		}
		_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 64,
			Messages: user(anthropic.NewImageBlockBase64("image/png", messagesPNG))})
		sdkError(t, "an image no chat model takes", err, 422, "invalid_request_error")
		var resp *http.Response
		_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "limited", MaxTokens: 64, Messages: hi}, option.WithResponseInto(&resp))
		sdkError(t, "a rate-limited provider", err, 429, "rate_limit_error")
		if resp == nil || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Should-Retry") != "true" {
			t.Errorf("429 headers %v", resp)
		}
		_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "e2e/flaky", MaxTokens: 64, Messages: hi})
		sdkError(t, "an unavailable provider", err, 503, "overloaded_error")
		_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "rejected", MaxTokens: 64, Messages: hi})
		sdkError(t, "a provider that rejects the deployment's credential", err, 502, "api_error")
		stream := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "limited", MaxTokens: 64, Messages: hi})
		for stream.Next() {
			t.Error("a stream that failed before output has events")
		}
		sdkError(t, "a streamed call failing before output", stream.Err(), 429, "rate_limit_error")
		stranger, outsider := m.sdk("not-a-token"), m.sdk(m.outsider)
		_, err = stranger.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 64, Messages: hi})
		sdkError(t, "an unknown token", err, 401, "authentication_error")
		_, err = outsider.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 64, Messages: hi})
		sdkError(t, "a caller allowed no namespace with models", err, 403, "permission_error")
	})

	t.Run("a cut stream raises an error", func(t *testing.T) {
		var resp *http.Response
		stream := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "cut", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("cut me short"))},
			option.WithResponseInto(&resp))
		var acc anthropic.Message
		for stream.Next() {
			_ = acc.Accumulate(stream.Current())
		}
		var ae *anthropic.Error
		if err := stream.Err(); !errors.As(err, &ae) || ae.Type() != "overloaded_error" {
			t.Fatalf("stream error %v, want the error event", err)
		}
		if acc.StopReason != "" || len(acc.Content) != 1 || acc.Content[0].Text != "cut me short" {
			t.Errorf("accumulated before the error: %+v", summarizeMessage(&acc))
		}
		if st := m.ended(t, resp.Header.Get("Switchboard-Execution-Id")); st.Status != protocol.StatusFailed || st.Error.Retryable {
			t.Errorf("native status %+v", st)
		}
	})

	t.Run("x-api-key works as Authorization does", func(t *testing.T) {
		// Anthropic SDKs before their 2026 majors sent the key as x-api-key, under
		// anthropic-version 2023-06-01.
		legacy := anthropic.NewClient(option.WithBaseURL("http://"+m.api+"/"), option.WithHeader("x-api-key", m.alice),
			option.WithHeader("anthropic-version", "2023-06-01"), option.WithMaxRetries(0))
		var resp *http.Response
		msg, err := legacy.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("hi"))},
			option.WithJSONSet("temperature", 0.2), option.WithJSONSet("top_p", 0.9), option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Request.Header.Get("Authorization") != "" || resp.Request.Header.Get("X-Api-Key") == "" {
			t.Errorf("request headers %v", resp.Request.Header)
		}
		if st := m.ended(t, msg.ID); st.Status != protocol.StatusCompleted {
			t.Errorf("execution %+v", st)
		}
		stranger := anthropic.NewClient(option.WithBaseURL("http://"+m.api+"/"), option.WithHeader("x-api-key", "not-a-token"), option.WithMaxRetries(0))
		_, err = stranger.Messages.New(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("hi"))})
		sdkError(t, "an unknown x-api-key", err, 401, "authentication_error")
	})

	t.Run("a call that leaves cancels its execution, unless keyed", func(t *testing.T) {
		for _, key := range []string{"", "msgs-key-" + rand.Text()} {
			callCtx, leave := context.WithCancel(ctx)
			var resp *http.Response
			opts := []option.RequestOption{option.WithResponseInto(&resp)}
			if key != "" {
				opts = append(opts, option.WithHeader("Idempotency-Key", key))
			}
			params := anthropic.MessageNewParams{Model: "stall", MaxTokens: 64, Messages: user(anthropic.NewTextBlock("wait for me"))}
			stream := c.Messages.NewStreaming(callCtx, params, opts...)
			if !stream.Next() || stream.Current().Type != "message_start" {
				t.Fatalf("first event %+v, %v", stream.Current(), stream.Err())
			}
			id := resp.Header.Get("Switchboard-Execution-Id")
			leave()
			_ = stream.Close()
			if key == "" {
				if st := m.ended(t, id); st.Error == nil || st.Error.Code != protocol.CodeCancelled {
					t.Errorf("the execution of a call that left: %+v", st)
				}
				continue
			}
			time.Sleep(300 * time.Millisecond)
			if st, err := m.native.Get(ctx, id); err != nil || st.Status.Terminal() {
				t.Fatalf("a keyed call's execution after its client left: %+v, %v", st, err)
			}
			again := c.Messages.NewStreaming(ctx, params, append(opts[1:], option.WithResponseInto(&resp))...)
			if !again.Next() || again.Current().Type != "message_start" || again.Current().Message.ID != id {
				t.Fatalf("the retry did not re-attach to %s: %+v, %v", id, again.Current(), again.Err())
			}
			_ = again.Close()
			if _, err := m.native.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestAnthropicMessagesNodeSDK runs test/sdk/anthropic-messages.mjs, the same checks
// with the official Node SDK (npm @anthropic-ai/sdk, pinned in test/sdk), against a
// runtime like TestAnthropicMessagesGoSDK's. The SDK comes from `make sdk-deps`;
// without it the test fails, saying so.
func TestAnthropicMessagesNodeSDK(t *testing.T) {
	const driver = "anthropic-messages.mjs"
	dir, err := filepath.Abs("../../test/sdk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@anthropic-ai", "sdk", "package.json")); err != nil {
		t.Fatalf("the Node SDKs are not installed in %s: run make sdk-deps (%v)", dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required to run the SDK driver %s: %v", driver, err)
	}
	m := newMessagesEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", filepath.Join(dir, driver))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SWITCHBOARD_URL=http://"+m.api,
		"SWITCHBOARD_TOKEN_ALICE="+m.alice,
		"SWITCHBOARD_TOKEN_OUTSIDER="+m.outsider,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", driver, err, out)
	}
	t.Logf("%s:\n%s", driver, out)
}
