package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The OpenAI front door (spec/compat.md) with the official Go SDK as its client, against
// the built binary and the demo provider: Chat Completions streamed and not, usage, a
// tool round trip, an image, fallback after a 503, every typed error the SDK raises, a
// cut stream, disconnects, Models, and the same executions read natively.

// doorModels are the deployments the front-door tests add to the e2e manifests: a model
// that takes images (ability see), one whose streams are cut after their content (cut),
// and a slow one (slow: five pieces, 500 ms apart).
func doorModels(provider string) string {
	model := func(name, model, ability, caps string) string {
		return fmt.Sprintf(`apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: %s, namespace: e2e}
spec:
  provider: openai-compatible
  model: %s
  endpoint: http://%s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [%s]
  capabilities: %s
`, name, model, provider, ability, caps)
	}
	return model("vision", "echo", "see", "{input: [text, image], streaming: true}") + "---\n" +
		model("cutter", "echo-truncate", "cut", "{streaming: true}") + "---\n" +
		model("slowpoke", "echo-slow", "slow", "{streaming: true}")
}

// doorEnv is a runtime serving the front doors with static tokens: alice and bob may
// use the e2e models, the outsider none; each caller runs at most one execution at once.
type doorEnv struct {
	*env
	base                   string // the OpenAI base URL, http://ADDR/v1/
	alice, bob, outsider   string
	aliceClient, bobClient *client.Client
}

func newDoorEnv(t *testing.T) *doorEnv {
	t.Helper()
	token := func() string {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(b)
	}
	d := &doorEnv{alice: token(), bob: token(), outsider: token()}
	path := filepath.Join(t.TempDir(), "tokens")
	lines := fmt.Sprintf("%s,alice,e2e\n%s,bob,e2e\n%s,outsider,elsewhere\n", d.alice, d.bob, d.outsider)
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	d.env = setupWith(t, doorModels, "--auth=static", "--auth-tokens-file", path, "--max-concurrent-per-principal", "1")
	d.base = "http://" + d.api + "/v1/"
	var err error
	if d.aliceClient, err = client.New("http://"+d.api, client.WithBearerToken(d.alice)); err != nil {
		t.Fatal(err)
	}
	if d.bobClient, err = client.New("http://"+d.api, client.WithBearerToken(d.bob)); err != nil {
		t.Fatal(err)
	}
	return d
}

// sdk is an OpenAI client of the door for token, which retries nothing: the tests count
// executions.
func (d *doorEnv) sdk(token string) openai.Client {
	return openai.NewClient(option.WithBaseURL(d.base), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// waitEnd waits for execution id to end and returns its status.
func waitEnd(t *testing.T, c *client.Client, id string) *protocol.ExecutionStatus {
	t.Helper()
	var st *protocol.ExecutionStatus
	eventually(t, 15*time.Second, "execution "+id+" to end", func() bool {
		var err error
		st, err = c.Get(context.Background(), id)
		return err == nil && st.Status.Terminal()
	})
	return st
}

// apiError is err as the SDK's typed error, which it must be.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want an *openai.Error", err, err)
	}
	return ae
}

func TestOpenAIChatGoSDK(t *testing.T) {
	d := newDoorEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice := d.sdk(d.alice)
	user := func(s string) []openai.ChatCompletionMessageParamUnion {
		return []openai.ChatCompletionMessageParamUnion{openai.UserMessage(s)}
	}

	t.Run("text with fallback after a 503, read natively", func(t *testing.T) {
		var resp *http.Response
		c, err := alice.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "chat", Messages: user("hello front door"),
		}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content != "hello front door" || c.Choices[0].FinishReason != "stop" {
			t.Errorf("completion %+v", c)
		}
		if c.Model != "echo" || c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "exe_") {
			t.Errorf("id %q model %q object %q", c.ID, c.Model, c.Object)
		}
		if c.Usage.PromptTokens != 3 || c.Usage.CompletionTokens != 5 || c.Usage.TotalTokens != 8 {
			t.Errorf("usage %+v", c.Usage)
		}
		if id := resp.Header.Get("Switchboard-Execution-Id"); id != c.ID {
			t.Errorf("Switchboard-Execution-Id %q, id %q", id, c.ID)
		}
		st := waitEnd(t, d.aliceClient, c.ID)
		if st.Status != protocol.StatusCompleted || st.Attempts != 2 || st.Route == nil || st.Route.Deployment != "e2e/echo" {
			t.Errorf("status %+v", st)
		}
		snap, err := d.aliceClient.Result(ctx, c.ID)
		if err != nil || len(snap.Output) != 1 || snap.Output[0].Text != "hello front door" {
			t.Errorf("result %+v, %v", snap, err)
		}
	})

	t.Run("streamed text with usage", func(t *testing.T) {
		stream := alice.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "e2e/echo", Messages: user("streamed through the door"),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 4 || acc.Choices[0].Message.Content != "streamed through the door" || acc.Choices[0].FinishReason != "stop" {
			t.Errorf("%d chunks, accumulated %+v", chunks, acc.ChatCompletion)
		}
		if acc.Usage.PromptTokens != 4 || acc.Usage.CompletionTokens != 5 {
			t.Errorf("usage %+v", acc.Usage)
		}
		if acc.Model != "echo" {
			t.Errorf("model %q", acc.Model)
		}
	})

	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("The weather in a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	})

	t.Run("tool call round trip", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model: "chat", Messages: user("What is the weather in Paris?"),
			Tools: []openai.ChatCompletionToolUnionParam{weather},
		}
		c, err := alice.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		msg := c.Choices[0].Message
		if c.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 {
			t.Fatalf("completion %+v", c)
		}
		call := msg.ToolCalls[0]
		if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"Paris"}` || call.ID == "" {
			t.Errorf("call %+v", call)
		}
		params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("18 degrees and sunny", call.ID))
		c, err = alice.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].Message.Content != "18 degrees and sunny" || c.Choices[0].FinishReason != "stop" {
			t.Errorf("answer %+v", c.Choices[0])
		}

		// The same call streamed, as the SDK's accumulator assembles it.
		stream := alice.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "chat", Messages: user("Weather?"), Tools: []openai.ChatCompletionToolUnionParam{weather},
		})
		acc := openai.ChatCompletionAccumulator{}
		var finished []openai.FinishedChatCompletionToolCall
		for stream.Next() {
			acc.AddChunk(stream.Current())
			if tc, ok := acc.JustFinishedToolCall(); ok {
				finished = append(finished, tc)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(finished) != 1 || finished[0].Name != "get_weather" || finished[0].Arguments != `{"city":"Paris"}` ||
			acc.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("streamed call %+v, accumulated %+v", finished, acc.Choices)
		}
	})

	t.Run("an image part", func(t *testing.T) {
		c, err := alice.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "see",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("what is this"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64,iVBORw0KGgo="}),
			})},
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].Message.Content != "what is this" || c.Model != "echo" {
			t.Errorf("completion %+v", c)
		}
	})

	t.Run("models", func(t *testing.T) {
		page, err := alice.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		for _, want := range []string{"chat", "e2e/echo", "e2e/flaky", "see", "summarize"} {
			if !strings.Contains(" "+strings.Join(ids, " ")+" ", " "+want+" ") {
				t.Errorf("models %v lack %s", ids, want)
			}
		}
		m, err := alice.Models.Get(ctx, "e2e/echo")
		if err != nil || m.ID != "e2e/echo" || m.OwnedBy != "e2e" {
			t.Errorf("model %+v, %v", m, err)
		}
		_, err = alice.Models.Get(ctx, "gpt-4o")
		if ae := apiError(t, err); ae.StatusCode != http.StatusNotFound || ae.Code != "not_found" {
			t.Errorf("unknown model: %v", ae)
		}
	})

	t.Run("typed errors", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			token  string
			params openai.ChatCompletionNewParams
			opts   []option.RequestOption
			status int
			typ    string
			code   string
			param  string
		}{
			{"400 a field the door does not take", d.alice, openai.ChatCompletionNewParams{Model: "chat", Messages: user("x")},
				[]option.RequestOption{option.WithJSONSet("logprobs", true)}, 400, "invalid_request_error", "invalid_request", "logprobs"},
			{"401 no valid token", "not-a-token", openai.ChatCompletionNewParams{Model: "chat", Messages: user("x")},
				nil, 401, "authentication_error", "unauthenticated", ""},
			{"403 a caller allowed no namespace", d.outsider, openai.ChatCompletionNewParams{Model: "chat", Messages: user("x")},
				nil, 403, "permission_error", "permission_denied", ""},
			{"404 an unknown model", d.alice, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: user("x")},
				nil, 404, "not_found_error", "not_found", ""},
			{"422 an image to a text-only model", d.alice, openai.ChatCompletionNewParams{Model: "chat",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
					openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/a.png"}),
				})}}, nil, 422, "invalid_request_error", "unsupported_capability", ""},
			{"503 every attempt failed", d.alice, openai.ChatCompletionNewParams{Model: "e2e/flaky", Messages: user("x")},
				nil, 503, "server_error", "provider_unavailable", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := d.sdk(tc.token)
				check := func(how string, err error) {
					t.Helper()
					ae := apiError(t, err)
					if ae.StatusCode != tc.status || ae.Type != tc.typ || ae.Code != tc.code || ae.Param != tc.param {
						t.Errorf("%s: status %d type %q code %q param %q: %s", how, ae.StatusCode, ae.Type, ae.Code, ae.Param, ae.RawJSON())
					}
				}
				_, err := c.Chat.Completions.New(ctx, tc.params, tc.opts...)
				check("whole", err)
				stream := c.Chat.Completions.NewStreaming(ctx, tc.params, tc.opts...)
				for stream.Next() {
					t.Errorf("streamed: a chunk before the error: %s", stream.Current().RawJSON())
				}
				check("streamed", stream.Err())
			})
		}
	})

	t.Run("429 beyond the caller's concurrency", func(t *testing.T) {
		bob := d.sdk(d.bob)
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		stream := bob.Chat.Completions.NewStreaming(sctx, openai.ChatCompletionNewParams{Model: "stall", Messages: user("hold on")})
		if !stream.Next() {
			t.Fatalf("the stalling stream sent nothing: %v", stream.Err())
		}
		_, err := bob.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "chat", Messages: user("x")})
		ae := apiError(t, err)
		if ae.StatusCode != http.StatusTooManyRequests || ae.Type != "rate_limit_error" || ae.Code != "rate_limited" {
			t.Errorf("429: %s", ae.RawJSON())
		}
		if ae.Response.Header.Get("Retry-After") == "" || ae.Response.Header.Get("X-Should-Retry") != "true" {
			t.Errorf("429 headers %v", ae.Response.Header)
		}
		stop() // the stalled execution is cancelled: its caller left without a key
		_ = stream.Close()
	})

	t.Run("a cut stream raises in the iterator", func(t *testing.T) {
		stream := alice.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "cut", Messages: user("cut me off")})
		var text string
		for stream.Next() {
			if ch := stream.Current(); len(ch.Choices) > 0 {
				text += ch.Choices[0].Delta.Content
			}
		}
		err := stream.Err()
		if err == nil || !strings.Contains(err.Error(), "provider_unavailable") {
			t.Errorf("the cut stream ended with %v", err)
		}
		if text != "cut me off" {
			t.Errorf("content before the cut %q", text)
		}
	})

	t.Run("a dropped call cancels its execution", func(t *testing.T) {
		sctx, stop := context.WithCancel(ctx)
		var resp *http.Response
		stream := alice.Chat.Completions.NewStreaming(sctx, openai.ChatCompletionNewParams{Model: "stall", Messages: user("hold on")},
			option.WithResponseInto(&resp))
		if !stream.Next() {
			t.Fatalf("the stalling stream sent nothing: %v", stream.Err())
		}
		id := resp.Header.Get("Switchboard-Execution-Id")
		stop()
		_ = stream.Close()
		st := waitEnd(t, d.aliceClient, id)
		if st.Error == nil || st.Error.Code != protocol.CodeCancelled {
			t.Errorf("status %+v", st)
		}
	})

	t.Run("a dropped keyed call keeps running and re-attaches", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{Model: "slow", Messages: user("take your time")}
		key := option.WithHeader("Idempotency-Key", "door-e2e-1")
		sctx, stop := context.WithCancel(ctx)
		var resp *http.Response
		stream := alice.Chat.Completions.NewStreaming(sctx, params, key, option.WithResponseInto(&resp))
		if !stream.Next() {
			t.Fatalf("the slow stream sent nothing: %v", stream.Err())
		}
		id := resp.Header.Get("Switchboard-Execution-Id")
		stop()
		_ = stream.Close()
		if st, err := d.aliceClient.Get(ctx, id); err != nil || st.Status.Terminal() {
			t.Fatalf("the keyed execution ended with its call: %+v, %v", st, err)
		}
		var again *http.Response
		stream = alice.Chat.Completions.NewStreaming(ctx, params, key, option.WithResponseInto(&again))
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := again.Header.Get("Switchboard-Execution-Id"); got != id || acc.ID != id {
			t.Errorf("re-attached to %q (chunks of %q), want %q", got, acc.ID, id)
		}
		if acc.Choices[0].Message.Content != "take your time" {
			t.Errorf("replayed %q", acc.Choices[0].Message.Content)
		}
		if st := waitEnd(t, d.aliceClient, id); st.Status != protocol.StatusCompleted {
			t.Errorf("status %+v", st)
		}
	})
}

// TestOpenAIChatGenerationOptions sends the parameters that tune generation, which the
// door translates into the provider-neutral generation.* extension keys that the
// OpenAI-compatible adapter maps back to Chat Completions fields.
func TestOpenAIChatGenerationOptions(t *testing.T) {
	d := newDoorEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alice := d.sdk(d.alice)
	c, err := alice.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:       "e2e/echo",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tuned")},
		MaxTokens:   openai.Int(64),
		Temperature: openai.Float(0.2),
		TopP:        openai.Float(0.9),
		Seed:        openai.Int(7),
		Stop:        openai.ChatCompletionNewParamsStopUnion{OfString: openai.String("END")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].Message.Content != "tuned" {
		t.Errorf("completion %+v", c)
	}
}

// TestOpenAIChatNodeSDK runs test/sdk/openai-chat.mjs, the same checks with the official
// Node SDK (npm openai, pinned in test/sdk), against a runtime like TestOpenAIChatGoSDK's.
// The SDK comes from `make sdk-deps`; without it the test fails, saying so.
func TestOpenAIChatNodeSDK(t *testing.T) {
	runNodeDriver(t, "openai-chat.mjs")
}

// runNodeDriver runs a Node driver of test/sdk against a new doorEnv, failing with the
// driver's report.
func runNodeDriver(t *testing.T, driver string) {
	t.Helper()
	dir, err := filepath.Abs("../../test/sdk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		t.Fatalf("the Node SDKs are not installed in %s: run make sdk-deps (%v)", dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required to run the SDK driver %s: %v", driver, err)
	}
	d := newDoorEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, driver))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"SWITCHBOARD_URL=http://"+d.api,
		"SWITCHBOARD_TOKEN_ALICE="+d.alice,
		"SWITCHBOARD_TOKEN_BOB="+d.bob,
		"SWITCHBOARD_TOKEN_OUTSIDER="+d.outsider,
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", driver, err, out)
	}
	t.Logf("%s:\n%s", driver, out)
}
