package anthropic_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestConformance runs the shared adapter suite against a fake speaking the Messages
// stream as Anthropic documents it (https://docs.anthropic.com/en/api/messages-streaming)
// and its error shapes (https://docs.anthropic.com/en/api/errors).
func TestConformance(t *testing.T) { providertest.RunConformance(t, wire) }

var wire = providertest.Wire{
	Subject: providertest.Subject{
		New: func(d *routing.Deployment, c *http.Client) (engine.Adapter, error) {
			return anthropic.New(d, anthropic.WithHTTPClient(c))
		},
		CanEncode: anthropic.CanEncode,
		Deployment: func(endpoint string) *routing.Deployment {
			return deployment(endpoint, withCaps(protocol.CapStreaming, protocol.CapTools))
		},
	},
	Provider: anthropic.Provider,
	Authenticated: func(r *http.Request) error {
		if r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") != canary || r.Header.Get("anthropic-version") == "" {
			return errors.New("want POST /v1/messages with x-api-key and anthropic-version")
		}
		return nil
	},
	Secrets:          []string{canary},
	CredentialHeader: "x-api-key",
	Respond:          respond,
	EchoFields:       echoFields,
	EchoAnswer:       echoAnswer,
	Usage: map[string]float64{protocol.UnitInputTokens: 12, protocol.UnitOutputTokens: 3,
		protocol.UnitCacheReadTokens: 4, protocol.UnitCacheWriteTokens: 5},
	Errors: []providertest.ErrorCase{
		{Name: "400 invalid_request_error", Status: 400, Body: apiError("invalid_request_error", "prompt is too long"), Code: protocol.CodeInvalidRequest},
		{Name: "401 authentication_error", Status: 401, Body: apiError("authentication_error", "invalid x-api-key"), Code: protocol.CodeProviderRejected},
		{Name: "403 permission_error", Status: 403, Body: apiError("permission_error", "not allowed"), Code: protocol.CodeProviderRejected},
		{Name: "404 not_found_error", Status: 404, Body: apiError("not_found_error", "model: claude-x"), Code: protocol.CodeProviderRejected},
		{Name: "413 request_too_large", Status: 413, Body: apiError("request_too_large", "too large"), Code: protocol.CodeInvalidRequest},
		{Name: "429 rate_limit_error", Status: 429, Header: http.Header{"Retry-After": {"2"}}, Body: apiError("rate_limit_error", "slow down"),
			Code: protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 2000},
		{Name: "500 api_error", Status: 500, Body: apiError("api_error", "internal"), Code: protocol.CodeProviderUnavailable, Retryable: true},
		{Name: "529 overloaded_error", Status: 529, Body: apiError("overloaded_error", "Overloaded"), Code: protocol.CodeProviderUnavailable, Retryable: true},
	},
}

func apiError(typ, msg string) string {
	return `{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
}

func event(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

var (
	messageStart = event("message_start", `{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",`+
		`"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":5,"cache_read_input_tokens":4,"output_tokens":1}}}`)
	textStart   = event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	blockStop   = event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	messageStop = event("message_stop", `{"type":"message_stop"}`)
)

func sseText(s string) string {
	return event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+s+`"}}`)
}

func messageDelta(reason string) string {
	return event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+reason+`","stop_sequence":null},"usage":{"output_tokens":3}}`)
}

func respond(s providertest.Scenario, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("request-id", "req_conformance")
	write := func(frames ...string) {
		for _, f := range frames {
			_, _ = w.Write([]byte(f))
			w.(http.Flusher).Flush()
		}
	}
	switch s {
	case providertest.Text, providertest.Usage:
		text := []string{sseText("Hello"), sseText(", world")}
		if s == providertest.Usage {
			text = []string{sseText("ok")}
		}
		write(messageStart, textStart)
		write(text...)
		write(blockStop, messageDelta("end_turn"), messageStop)
	case providertest.ToolCall:
		write(messageStart,
			event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}`),
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`),
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`),
			blockStop, messageDelta("tool_use"), messageStop)
	case providertest.InStreamError:
		write(messageStart, textStart, sseText("partial"),
			event("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	case providertest.CutBeforeOutput:
		write(messageStart)
	case providertest.CutAfterOutput:
		write(messageStart, textStart, sseText("partial"))
	case providertest.Stall:
		write(messageStart)
		<-r.Context().Done()
	case providertest.HugeLine:
		write(messageStart)
		providertest.WriteHuge(w, `event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`)
	case providertest.InvalidUTF8:
		write(messageStart, textStart, sseText(providertest.InvalidUTF8Text), blockStop, messageDelta("end_turn"), messageStop)
	case providertest.Echo:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("request-id", canary)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(apiError(canary, "invalid x-api-key: "+r.Header.Get("x-api-key"))))
	}
}

// echoFields are the identifiers of a Messages answer: the request-id header, the
// message's id and model, the tool_use block's id and name, the stop reason.
var echoFields = []string{"request-id", "id", "model", "tool_use.id", "tool_use.name", "stop_reason"}

// echoAnswer answers with one tool_use block calling the script's tool, streamed when
// the request has stream:true, with echo in field (see providertest.Wire.EchoAnswer).
func echoAnswer(field, echo string, w http.ResponseWriter, r *http.Request) {
	v := map[string]string{"request-id": "req_conformance", "id": "msg_01echo", "model": "claude-sonnet-4-5-20250929",
		"tool_use.id": "toolu_01echo", "tool_use.name": providertest.ScriptTool, "stop_reason": "tool_use"}
	if field != "" {
		v[field] = echo
	}
	q := func(name string) string { return strconv.Quote(v[name]) }
	w.Header().Set("request-id", v["request-id"])
	var req struct {
		Stream bool `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":`+q("id")+`,"type":"message","role":"assistant","model":`+q("model")+`,`+
			`"content":[{"type":"tool_use","id":`+q("tool_use.id")+`,"name":`+q("tool_use.name")+`,"input":`+providertest.ScriptArguments+`}],`+
			`"stop_reason":`+q("stop_reason")+`,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, event("message_start", `{"type":"message_start","message":{"id":`+q("id")+`,"type":"message","role":"assistant","model":`+q("model")+`,`+
		`"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`)+
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":`+q("tool_use.id")+`,"name":`+q("tool_use.name")+`,"input":{}}}`)+
		event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`)+
		event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`)+
		blockStop+
		event("message_delta", `{"type":"message_delta","delta":{"stop_reason":`+q("stop_reason")+`,"stop_sequence":null},"usage":{"output_tokens":3}}`)+
		messageStop)
}
