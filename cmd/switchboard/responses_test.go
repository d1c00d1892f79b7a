package main

import (
	"context"
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
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// OpenAI's Responses API through the built binary (spec/compat.md, "OpenAI
// Responses"), with the official Go SDK, github.com/openai/openai-go/v3, as the client
// and the demo provider behind it: OpenAI-compatible and Anthropic deployments alike.

// openaiClient is the official SDK pointed at e, without its retries so that every
// error reaches the test as the first answer gave it.
func openaiClient(e *env, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL("http://" + e.api + "/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
	}, opts...)...)
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// apiError returns err as the SDK's typed error, failing the test otherwise.
func apiErrorStatus(t *testing.T, err error, status int) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != status {
		t.Fatalf("error %v, want the SDK's *openai.Error with status %d", err, status)
	}
	return ae
}

func TestResponsesWithOpenAIGo(t *testing.T) {
	e := setup(t)
	c := openaiClient(e)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("text, usage, and the same execution natively", func(t *testing.T) {
		var raw *http.Response
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "chat", Input: textInput("hello responses"), Metadata: map[string]string{"team": "e2e"},
		}, option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != responses.ResponseStatusCompleted || r.OutputText() != "hello responses" || r.Model != "echo" {
			t.Errorf("response: status %s, text %q, model %s", r.Status, r.OutputText(), r.Model)
		}
		if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Errorf("usage %+v", r.Usage)
		}
		if got := raw.Header.Get("Switchboard-Execution-Id"); got != r.ID || !strings.HasPrefix(r.ID, "exe_") {
			t.Errorf("Switchboard-Execution-Id %q, response id %q", got, r.ID)
		}
		// The call is an execution like any other: fallback from the 503 deployment
		// included.
		st, err := e.client.Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != protocol.StatusCompleted || st.Attempts != 2 || st.Route.Deployment != "e2e/echo" || st.Metadata["team"] != "e2e" {
			t.Errorf("native status %+v", st)
		}
		snap, err := e.client.Result(ctx, r.ID)
		if err != nil || len(snap.Output) != 1 || snap.Output[0].Text != "hello responses" {
			t.Errorf("native result %+v, %v", snap, err)
		}
		got, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
		if err != nil || got.OutputText() != "hello responses" || got.Status != responses.ResponseStatusCompleted {
			t.Errorf("Get: %+v, %v", got, err)
		}
	})

	t.Run("streamed text", func(t *testing.T) {
		stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "chat", Input: textInput("streamed hello")})
		var text strings.Builder
		var seq []int64
		var final responses.Response
		for stream.Next() {
			ev := stream.Current()
			seq = append(seq, ev.SequenceNumber)
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != "streamed hello" || final.OutputText() != "streamed hello" || final.Usage.TotalTokens == 0 {
			t.Errorf("deltas %q, final %q, usage %+v", text.String(), final.OutputText(), final.Usage)
		}
		for i, n := range seq {
			if n != int64(i) {
				t.Fatalf("sequence numbers %v", seq)
			}
		}
	})

	t.Run("function call round trip", func(t *testing.T) {
		tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
			Name: "get_weather", Description: openai.String("The weather in a city"),
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		}}}
		question := responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser)
		first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{question}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Output) != 1 || first.Output[0].Type != "function_call" {
			t.Fatalf("output %+v", first.Output)
		}
		call := first.Output[0].AsFunctionCall()
		if call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` || call.CallID == "" {
			t.Fatalf("call %+v", call)
		}
		answer := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 21 degrees")
		answer.OfFunctionCallOutput.CallID = param.NewOpt(call.CallID)
		second, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				question, responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name), answer}}})
		if err != nil {
			t.Fatal(err)
		}
		if second.OutputText() != "sunny, 21 degrees" {
			t.Errorf("answer after the tool result %q", second.OutputText())
		}
	})

	t.Run("background, poll, resume, cancel", func(t *testing.T) {
		// The staller streams its first piece, then holds the stream until it is
		// cancelled: the response stays in progress as long as the test needs.
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "stall", Input: textInput("hello slow world"),
			Background: openai.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress {
			t.Fatalf("background answered with status %s", r.Status)
		}
		var polled *responses.Response
		eventually(t, 10*time.Second, "the first piece", func() bool {
			polled, err = c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
			return err == nil && polled.OutputText() != ""
		})
		if polled.Status != responses.ResponseStatusInProgress || polled.Model != "echo-stall" {
			t.Errorf("polled %s with model %s", polled.Status, polled.Model)
		}
		// Resume after the first three events (created, in_progress, item added).
		stream := c.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{StartingAfter: openai.Int(2)})
		var types []string
		cancelled := false
		for stream.Next() {
			ev := stream.Current()
			if len(types) == 0 && ev.SequenceNumber != 3 {
				t.Errorf("resumed at sequence %d, want 3", ev.SequenceNumber)
			}
			types = append(types, ev.Type)
			if ev.Type == "response.output_text.delta" && !cancelled {
				cancelled = true
				got, err := c.Responses.Cancel(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != responses.ResponseStatusCancelled {
					t.Errorf("Cancel answered %s", got.Status)
				}
			}
			if ev.Type == "response.failed" && ev.Response.Status != responses.ResponseStatusCancelled {
				t.Errorf("response.failed with status %s", ev.Response.Status)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		want := "response.content_part.added response.output_text.delta response.failed"
		if got := strings.Join(types, " "); got != want {
			t.Errorf("resumed events %s, want %s", got, want)
		}
		again, err := c.Responses.Cancel(ctx, r.ID)
		if err != nil || again.Status != responses.ResponseStatusCancelled {
			t.Errorf("second Cancel: %+v, %v", again, err)
		}
		// Natively the execution failed with code cancelled.
		st, err := e.client.Get(ctx, r.ID)
		if err != nil || st.Status != protocol.StatusFailed || st.Error == nil || st.Error.Code != protocol.CodeCancelled {
			t.Errorf("native status %+v, %v", st, err)
		}
	})

	t.Run("background on an Anthropic deployment", func(t *testing.T) {
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "summarize", Input: textInput("short text"),
			Background: openai.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		var done *responses.Response
		eventually(t, 10*time.Second, "the background response to complete", func() bool {
			done, err = c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
			return err == nil && done.Status == responses.ResponseStatusCompleted
		})
		if done.OutputText() != "short text" || done.Model != "echo" || done.Usage.OutputTokens == 0 {
			t.Errorf("completed %q, model %s, usage %+v", done.OutputText(), done.Model, done.Usage)
		}
		st, err := e.client.Get(ctx, r.ID)
		if err != nil || st.Route.Provider != "anthropic" {
			t.Errorf("native status %+v, %v", st, err)
		}
		all := collect(t, c.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{}))
		if len(all) < 8 || all[0].Type != "response.created" || all[len(all)-1].Type != "response.completed" {
			t.Fatalf("replay %v", eventTypes(all))
		}
		for n := range int64(len(all)) {
			rest := collect(t, c.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{StartingAfter: openai.Int(n)}))
			if len(rest) != len(all)-int(n)-1 || (len(rest) > 0 && rest[0].RawJSON() != all[n+1].RawJSON()) {
				t.Fatalf("starting_after=%d: %v", n, eventTypes(rest))
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Input: textInput("to be deleted")})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Responses.Delete(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		_, err = c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
		apiErrorStatus(t, err, http.StatusNotFound)
		var ce *client.Error
		if _, err := e.client.Get(ctx, r.ID); !errors.As(err, &ce) || ce.Code() != protocol.CodeNotFound {
			t.Errorf("native Get after delete: %v", err)
		}
		apiErrorStatus(t, c.Responses.Delete(ctx, r.ID), http.StatusNotFound)

		// A running response is cancelled, then removed.
		running, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "stall", Input: textInput("hold on"),
			Background: openai.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Responses.Delete(ctx, running.ID); err != nil {
			t.Fatal(err)
		}
		_, err = c.Responses.Get(ctx, running.ID, responses.ResponseGetParams{})
		apiErrorStatus(t, err, http.StatusNotFound)
	})

	t.Run("typed errors", func(t *testing.T) {
		_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Input: textInput("x"),
			PreviousResponseID: openai.String("resp_123")})
		ae := apiErrorStatus(t, err, http.StatusBadRequest)
		if ae.Type != "invalid_request_error" || ae.Code != "invalid_request" || !strings.HasPrefix(ae.Message, "previous_response_id: ") {
			t.Errorf("previous_response_id: %+v", ae)
		}
		_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-nonexistent", Input: textInput("x")})
		ae = apiErrorStatus(t, err, http.StatusNotFound)
		if ae.Type != "not_found_error" || strings.Contains(ae.Message, "gpt-5") {
			t.Errorf("unknown model: %+v", ae)
		}
		_, err = c.Responses.Get(ctx, "exe_unknown", responses.ResponseGetParams{})
		apiErrorStatus(t, err, http.StatusNotFound)
		_, err = c.Responses.Cancel(ctx, "exe_unknown")
		apiErrorStatus(t, err, http.StatusNotFound)
		// A model that cannot take the input: an image to text-only deployments.
		_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat",
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
					{OfInputImage: &responses.ResponseInputImageParam{ImageURL: openai.String("https://example.com/cat.png"), Detail: responses.ResponseInputImageDetailAuto}},
				}, responses.EasyInputMessageRoleUser)}}})
		apiErrorStatus(t, err, http.StatusUnprocessableEntity)
	})
}

// collect reads a stream to its end.
func collect(t *testing.T, s interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
}) []responses.ResponseStreamEventUnion {
	t.Helper()
	var out []responses.ResponseStreamEventUnion
	for s.Next() {
		out = append(out, s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func eventTypes(evs []responses.ResponseStreamEventUnion) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d:%s", ev.SequenceNumber, ev.Type)
	}
	return out
}

// TestResponsesAuth: with --auth=static the door answers a missing or wrong key with
// 401 in OpenAI's shape, which the SDK raises as such, and serves a valid one.
func TestResponsesAuth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	const token = "responses-e2e-token-3f9a"
	if err := os.WriteFile(path, []byte(token+",alice,e2e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := setup(t, "--auth=static", "--auth-tokens-file", path)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrong, good, none := openaiClient(e, option.WithAPIKey("wrong-key")), openaiClient(e, option.WithAPIKey(token)), openaiClient(e)
	_, err := wrong.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Input: textInput("x")})
	ae := apiErrorStatus(t, err, http.StatusUnauthorized)
	if ae.Type != "authentication_error" || ae.Code != "unauthenticated" || ae.Response.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("401: %+v", ae)
	}
	r, err := good.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Input: textInput("authorized")})
	if err != nil || r.OutputText() != "authorized" {
		t.Fatalf("with the token: %+v, %v", r, err)
	}
	_, err = none.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	apiErrorStatus(t, err, http.StatusUnauthorized)
}

// TestResponsesGenerationOptions: the parameters that tune generation reach the
// execution as the provider-neutral generation.* keys, which every adapter maps. It
// needs the protocol's registry of those keys (spec/http-api.md, "Generation options").
func TestResponsesGenerationOptions(t *testing.T) {
	e := setup(t)
	c := openaiClient(e)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "e2e/echo", Input: textInput("tuned"),
		MaxOutputTokens: openai.Int(64), Temperature: openai.Float(0.2), TopP: openai.Float(0.9),
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptionsAuto)}})
	if err != nil || r.OutputText() != "tuned" {
		t.Fatalf("tuned request: %+v, %v", r, err)
	}
	// JSON Schema output needs structured_output, which no demo deployment declares.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Input: textInput("x"),
		Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "answer", Schema: map[string]any{"type": "object"}}}}})
	apiErrorStatus(t, err, http.StatusUnprocessableEntity)
}

// TestResponsesWithNodeSDK runs test/sdk/openai-responses.mjs, the official Node SDK
// (`openai` from npm) as the client of the built binary: streamed text, the stream
// helper, background with resume and cancel, an Anthropic deployment, typed errors.
func TestResponsesWithNodeSDK(t *testing.T) {
	sdk, err := filepath.Abs(filepath.Join("..", "..", "test", "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sdk, "node_modules", "openai", "package.json")); err != nil {
		t.Fatalf("the Node SDKs are not installed in test/sdk/node_modules (run make sdk-deps): %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to run the Node SDK tests: %v", err)
	}
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test-reporter=spec", filepath.Join(sdk, "openai-responses.mjs"))
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "SWITCHBOARD_BASE_URL=http://"+e.api+"/v1", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node test/sdk/openai-responses.mjs: %v\n%s", err, out)
	}
	t.Logf("node test/sdk/openai-responses.mjs:\n%s", out)
}

// dbResponses is TestResponsesAcrossReplicas's Redis database: one per test, as the
// replica tests number theirs upwards from 1 (replicas_test.go); 15 is hack/bench's.
const dbResponses = 14

// TestResponsesAcrossReplicas: a response lives in the shared log, not in the replica
// that took it. Created in the background on replica A, it is polled and resumed on B,
// cancelled on A while B streams it, and deleted on B, after which neither replica
// serves it, natively or through the door.
func TestResponsesAcrossReplicas(t *testing.T) {
	url := redisURL(t, dbResponses)
	provider := startDemoProvider(t)
	dir := manifestsDir(t, provider.addr)
	a, b := startReplica(t, "A", dir, url), startReplica(t, "B", dir, url)
	onA, onB := openaiClient(&env{api: a.api}), openaiClient(&env{api: b.api})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, err := onA.Responses.New(ctx, responses.ResponseNewParams{Model: "stall", Input: textInput("shared log"),
		Background: openai.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the first piece, read on B", func() bool {
		got, err := onB.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
		return err == nil && got.OutputText() != ""
	})
	stream := onB.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{StartingAfter: openai.Int(3)})
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, fmt.Sprintf("%d:%s", ev.SequenceNumber, ev.Type))
		if ev.Type == "response.output_text.delta" {
			if got, err := onA.Responses.Cancel(ctx, r.ID); err != nil || got.Status != responses.ResponseStatusCancelled {
				t.Fatalf("Cancel on A: %+v, %v", got, err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(types, " "); got != "4:response.output_text.delta 5:response.failed" {
		t.Errorf("B's resumed stream: %s", got)
	}
	if err := onB.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []openai.Client{onA, onB} {
		_, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
		apiErrorStatus(t, err, http.StatusNotFound)
	}
	var ce *client.Error
	if _, err := a.client.Get(ctx, r.ID); !errors.As(err, &ce) || ce.Code() != protocol.CodeNotFound {
		t.Errorf("native Get on A after the delete on B: %v", err)
	}
}
