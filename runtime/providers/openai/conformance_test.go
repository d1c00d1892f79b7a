package openai_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestConformance runs the shared adapter suite for the three providers this package
// serves, each against a fake speaking the Chat Completions stream as OpenAI documents
// it (https://platform.openai.com/docs/api-reference/chat-streaming). The providers
// differ only in endpoint and credential header: Bearer for openai and
// openai-compatible, api-key for azure-openai
// (https://learn.microsoft.com/azure/ai-foundry/openai/reference).
func TestConformance(t *testing.T) {
	for _, p := range []string{openai.ProviderOpenAI, openai.ProviderCompatible, openai.ProviderAzure} {
		t.Run(p, func(t *testing.T) { providertest.RunConformance(t, wire(p)) })
	}
}

func wire(provider string) providertest.Wire {
	header, value := "Authorization", "Bearer "+canary
	path := "/v1/chat/completions"
	if provider == openai.ProviderAzure {
		header, value = "api-key", canary
		path = "/openai/v1/chat/completions"
	}
	return providertest.Wire{
		Subject: providertest.Subject{
			New: func(d *routing.Deployment, c *http.Client) (engine.Adapter, error) {
				return openai.New(d, openai.WithHTTPClient(c))
			},
			CanEncode: openai.CanEncode,
			Deployment: func(endpoint string) *routing.Deployment {
				if provider != openai.ProviderAzure {
					endpoint += "/v1"
				}
				return deployment(endpoint, func(d *routing.Deployment) { d.Provider = provider },
					with(protocol.CapStreaming, protocol.CapTools))
			},
		},
		Provider: provider,
		Authenticated: func(r *http.Request) error {
			if r.URL.Path != path {
				return fmt.Errorf("path %s, want %s", r.URL.Path, path)
			}
			if got := r.Header.Get(header); got != value {
				return errors.New(header + " does not carry the credential")
			}
			return nil
		},
		Secrets:          []string{canary},
		CredentialHeader: header,
		Respond:          respond,
		EchoFields:       echoFields,
		EchoAnswer:       echoAnswer,
		Usage: map[string]float64{protocol.UnitInputTokens: 12, protocol.UnitOutputTokens: 3,
			protocol.UnitCacheReadTokens: 4, protocol.UnitReasoningTokens: 2},
		Errors: []providertest.ErrorCase{
			{Name: "400 invalid_request_error", Status: 400,
				Body: `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
				Code: protocol.CodeInvalidRequest},
			{Name: "400 content_filter (Azure)", Status: 400,
				Body: `{"error":{"message":"The response was filtered","type":null,"param":"prompt","code":"content_filter","status":400}}`,
				Code: protocol.CodeContentFiltered},
			{Name: "401 invalid_api_key", Status: 401,
				Body: `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
				Code: protocol.CodeProviderRejected},
			{Name: "403 unsupported_country_region_territory", Status: 403,
				Body: `{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","param":null,"code":"unsupported_country_region_territory"}}`,
				Code: protocol.CodeProviderRejected},
			{Name: "404 model_not_found", Status: 404,
				Body: `{"error":{"message":"The model does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
				Code: protocol.CodeProviderRejected},
			{Name: "429 rate_limit_exceeded", Status: 429, Header: http.Header{"Retry-After-Ms": {"1500"}},
				Body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
				Code: protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 1500},
			{Name: "429 insufficient_quota", Status: 429,
				Body: `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
				Code: protocol.CodeQuotaExhausted},
			{Name: "500 server_error", Status: 500,
				Body: `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`,
				Code: protocol.CodeProviderUnavailable, Retryable: true},
			{Name: "503 overloaded", Status: 503,
				Body: `{"error":{"message":"The engine is currently overloaded","type":"server_error","param":null,"code":null}}`,
				Code: protocol.CodeProviderUnavailable, Retryable: true},
		},
	}
}

// chunk is one streamed chat.completion.chunk with the given choice delta and finish
// reason ("null" for none).
func chunk(delta, finish string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o-mini-2024-07-18",` +
		`"choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}],"usage":null}` + "\n\n"
}

const done = "data: [DONE]\n\n"

func text(s string) string { return chunk(`{"content":"`+s+`"}`, "null") }

func respond(s providertest.Scenario, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("x-request-id", "req_conformance")
	write := func(frames ...string) {
		for _, f := range frames {
			_, _ = w.Write([]byte(f))
			w.(http.Flusher).Flush()
		}
	}
	role := chunk(`{"role":"assistant","content":""}`, "null")
	switch s {
	case providertest.Text:
		write(role, text("Hello"), text(", world"), chunk(`{}`, `"stop"`), done)
	case providertest.ToolCall:
		write(role,
			chunk(`{"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "null"),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, "null"),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, "null"),
			chunk(`{}`, `"tool_calls"`), done)
	case providertest.Usage:
		write(role, text("ok"), chunk(`{}`, `"stop"`),
			`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o-mini","choices":[],`+
				`"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},`+
				`"completion_tokens_details":{"reasoning_tokens":2,"audio_tokens":0}}}`+"\n\n", done)
	case providertest.InStreamError:
		write(role, text("partial"), `data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`+"\n\n")
	case providertest.CutBeforeOutput:
		write(role)
	case providertest.CutAfterOutput:
		write(role, text("partial"))
	case providertest.Stall:
		write(role)
		<-r.Context().Done()
	case providertest.HugeLine:
		write(role)
		providertest.WriteHuge(w, `data: {"choices":[{"index":0,"delta":{"content":"`)
	case providertest.InvalidUTF8:
		write(role, text(providertest.InvalidUTF8Text), chunk(`{}`, `"stop"`), done)
	case providertest.Echo:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-request-id", canary)
		w.WriteHeader(http.StatusUnauthorized)
		echo := strings.ReplaceAll(r.Header.Get("Authorization")+r.Header.Get("api-key"), `"`, ``)
		_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided: ` + echo + `","type":"` + canary + `","param":null,"code":"` + canary + `"}}`))
	}
}

// echoFields are the identifiers of a Chat Completions answer, in its headers, its
// chunks or completion, and its tool calls.
var echoFields = []string{"x-request-id", "apim-request-id", "id", "model", "system_fingerprint",
	"tool_calls.id", "function.name", "finish_reason"}

// echoAnswer answers with one call of the script's tool, streamed when the request has
// stream:true, with echo in field (see providertest.Wire.EchoAnswer).
func echoAnswer(field, echo string, w http.ResponseWriter, r *http.Request) {
	v := map[string]string{"x-request-id": "req_conformance", "apim-request-id": "", "id": "chatcmpl-echo",
		"model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_44709d6fcb", "tool_calls.id": "call_echo",
		"function.name": providertest.ScriptTool, "finish_reason": "tool_calls"}
	if field == "apim-request-id" {
		v["x-request-id"] = "" // Azure's header is read when OpenAI's is absent
	}
	if field != "" {
		v[field] = echo
	}
	q := func(name string) string { return strconv.Quote(v[name]) }
	for _, h := range []string{"x-request-id", "apim-request-id"} {
		if v[h] != "" {
			w.Header().Set(h, v[h])
		}
	}
	head := `"id":` + q("id") + `,"created":1733000000,"model":` + q("model") + `,"system_fingerprint":` + q("system_fingerprint")
	var req struct {
		Stream bool `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{`+head+`,"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,`+
			`"tool_calls":[{"id":`+q("tool_calls.id")+`,"type":"function","function":{"name":`+q("function.name")+`,"arguments":`+
			strconv.Quote(providertest.ScriptArguments)+`}}]},"logprobs":null,"finish_reason":`+q("finish_reason")+`}],`+
			`"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	c := func(delta, finish string) string {
		return `data: {` + head + `,"object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]}` + "\n\n"
	}
	for _, f := range []string{
		c(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":`+q("tool_calls.id")+`,"type":"function","function":{"name":`+q("function.name")+`,"arguments":""}}]}`, "null"),
		c(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, "null"),
		c(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, "null"),
		c(`{}`, q("finish_reason")),
		`data: {` + head + `,"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}` + "\n\n",
		done,
	} {
		_, _ = io.WriteString(w, f)
	}
}
