package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// bedrockBody is a Converse request with a system prompt and one user message.
func bedrockBody(extra map[string]any) map[string]any {
	b := map[string]any{
		"system":          []any{map[string]any{"text": "Be brief."}},
		"messages":        []any{map[string]any{"role": "user", "content": []any{map[string]any{"text": testText}}}},
		"inferenceConfig": map[string]any{"maxTokens": 64, "temperature": 0},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// bedrockTools offers get_weather (first) and other.
var bedrockTools = map[string]any{"tools": []any{
	map[string]any{"toolSpec": map[string]any{"name": "get_weather", "inputSchema": map[string]any{"json": map[string]any{"type": "object"}}}},
	map[string]any{"toolSpec": map[string]any{"name": "other", "inputSchema": map[string]any{"json": map[string]any{"type": "object"}}}},
}}

// bedrockEvent is one decoded event-stream message.
type bedrockEvent struct {
	messageType, typ string
	payload          []byte
}

// line is e as "messageType type payload".
func (e bedrockEvent) line() string { return e.messageType + " " + e.typ + " " + string(e.payload) }

// readBedrockStream decodes a whole converse-stream response with the AWS SDK's decoder,
// which checks both CRCs of every message. It fails unless the stream ends after a
// whole message and every message carries a JSON payload.
func readBedrockStream(t *testing.T, resp *http.Response) []bedrockEvent {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/vnd.amazon.eventstream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	dec := eventstream.NewDecoder()
	var events []bedrockEvent
	for {
		m, err := dec.Decode(resp.Body, nil)
		if errors.Is(err, io.EOF) {
			return events
		}
		if err != nil {
			t.Fatalf("decode message %d: %v", len(events), err)
		}
		header := func(name string) string {
			if v := m.Headers.Get(name); v != nil {
				return v.String()
			}
			return ""
		}
		if ct := header(":content-type"); ct != "application/json" || !json.Valid(m.Payload) {
			t.Fatalf("message %d: content type %q, payload %s", len(events), ct, m.Payload)
		}
		e := bedrockEvent{messageType: header(":message-type"), typ: header(":event-type"), payload: m.Payload}
		if e.messageType == "exception" {
			e.typ = header(":exception-type")
		}
		events = append(events, e)
	}
}

// eventLines describes events, one line each.
func eventLines(events []bedrockEvent) []string {
	var lines []string
	for _, e := range events {
		lines = append(lines, e.line())
	}
	return lines
}

func TestBedrockConverseStream(t *testing.T) {
	ts := startServer(t, config{})
	resp := ts.do(t, "POST", "/model/demo.echo-v1%3A0/converse-stream", bedrockBody(nil))
	events := readBedrockStream(t, resp)
	equalLines(t, eventLines(events), []string{
		`event messageStart {"role":"assistant"}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":"Hel"}}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":"lo,"}}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":" wo"}}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":"rl"}}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":"d!"}}`,
		`event contentBlockStop {"contentBlockIndex":0}`,
		`event messageStop {"stopReason":"end_turn"}`,
		`event metadata {"metrics":{"latencyMs":1},"usage":{"inputTokens":4,"outputTokens":5,"totalTokens":9}}`,
	})
	var text string
	for _, e := range events {
		var d struct {
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(e.payload, &d); err != nil {
			t.Fatal(err)
		}
		text += d.Delta.Text
	}
	if text != testText {
		t.Errorf("joined text %q, want %q", text, testText)
	}
	if resp.Header.Get("X-Amzn-RequestId") == "" {
		t.Error("no x-amzn-requestid header")
	}
}

func TestBedrockConverseStreamToolUse(t *testing.T) {
	ts := startServer(t, config{})
	events := readBedrockStream(t, ts.do(t, "POST", "/model/demo/converse-stream", bedrockBody(map[string]any{"toolConfig": bedrockTools})))
	if len(events) != 10 {
		t.Fatalf("%d events:\n%s", len(events), strings.Join(eventLines(events), "\n"))
	}
	var start struct {
		ContentBlockIndex int `json:"contentBlockIndex"`
		Start             struct {
			ToolUse struct {
				ToolUseID string `json:"toolUseId"`
				Name      string `json:"name"`
			} `json:"toolUse"`
		} `json:"start"`
	}
	if err := json.Unmarshal(events[1].payload, &start); err != nil || events[1].typ != "contentBlockStart" {
		t.Fatalf("second event %s: %v", events[1].line(), err)
	}
	if tu := start.Start.ToolUse; !strings.HasPrefix(tu.ToolUseID, "tooluse_") || tu.Name != "get_weather" || start.ContentBlockIndex != 0 {
		t.Errorf("contentBlockStart = %s", events[1].payload)
	}
	// The input arrives in fragments; only all of them together are the JSON object.
	var input string
	for _, e := range events[2:7] {
		var d struct {
			ContentBlockIndex *int `json:"contentBlockIndex"`
			Delta             struct {
				ToolUse *struct {
					Input string `json:"input"`
				} `json:"toolUse"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(e.payload, &d); err != nil || e.typ != "contentBlockDelta" || d.Delta.ToolUse == nil ||
			d.ContentBlockIndex == nil || *d.ContentBlockIndex != 0 {
			t.Fatalf("delta %s: %v", e.line(), err)
		}
		input += d.Delta.ToolUse.Input
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(input), &args); err != nil || args["city"] != "Paris" {
		t.Errorf("joined input %q: %v", input, err)
	}
	equalLines(t, eventLines(events[7:]), []string{
		`event contentBlockStop {"contentBlockIndex":0}`,
		`event messageStop {"stopReason":"tool_use"}`,
		`event metadata {"metrics":{"latencyMs":1},"usage":{"inputTokens":4,"outputTokens":5,"totalTokens":9}}`,
	})
}

func TestBedrockThrottlingExceptionFrame(t *testing.T) {
	ts := startServer(t, config{})
	events := readBedrockStream(t, ts.do(t, "POST", "/model/demo-exception-throttling/converse-stream", bedrockBody(nil)))
	equalLines(t, eventLines(events), []string{
		`exception throttlingException {"message":"Too many requests, please wait before trying again."}`,
	})

	// Without a stream the same script is a 429 before any answer.
	resp := ts.do(t, "POST", "/model/demo-exception-throttling/converse", bedrockBody(nil))
	if typ := bedrockErrorOf(t, resp); resp.StatusCode != http.StatusTooManyRequests || typ != "ThrottlingException" {
		t.Errorf("converse: %d %s", resp.StatusCode, typ)
	}
}

func TestBedrockTruncate(t *testing.T) {
	ts := startServer(t, config{Chunks: 2})
	events := readBedrockStream(t, ts.do(t, "POST", "/model/demo-truncate/converse-stream", bedrockBody(nil)))
	equalLines(t, eventLines(events), []string{
		`event messageStart {"role":"assistant"}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":"Hello, "}}`,
		`event contentBlockDelta {"contentBlockIndex":0,"delta":{"text":"world!"}}`,
	})
}

// bedrockConverseView is what the tests read from a Converse answer.
type bedrockConverseView struct {
	Output struct {
		Message struct {
			Role    string `json:"role"`
			Content []struct {
				Text    *string `json:"text"`
				ToolUse *struct {
					ToolUseID string          `json:"toolUseId"`
					Name      string          `json:"name"`
					Input     json.RawMessage `json:"input"`
				} `json:"toolUse"`
			} `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string       `json:"stopReason"`
	Usage      bedrockUsage `json:"usage"`
	Metrics    *struct {
		LatencyMs int `json:"latencyMs"`
	} `json:"metrics"`
}

// describe reduces v to one comparable line.
func (v bedrockConverseView) describe() string {
	line := v.Output.Message.Role + " "
	for _, c := range v.Output.Message.Content {
		switch {
		case c.Text != nil:
			line += fmt.Sprintf("text %q ", *c.Text)
		case c.ToolUse != nil:
			line += fmt.Sprintf("toolUse id=%t %s(%s) ", strings.HasPrefix(c.ToolUse.ToolUseID, "tooluse_"), c.ToolUse.Name, c.ToolUse.Input)
		}
	}
	u := v.Usage
	return line + fmt.Sprintf("%s usage %d+%d=%d latency=%t", v.StopReason, u.InputTokens, u.OutputTokens, u.TotalTokens, v.Metrics != nil && v.Metrics.LatencyMs > 0)
}

func TestBedrockConverse(t *testing.T) {
	ts := startServer(t, config{})
	for _, tt := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"text", nil, `assistant text "Hello, world!" end_turn usage 4+5=9 latency=true`},
		{"tool", map[string]any{"toolConfig": bedrockTools}, `assistant toolUse id=true get_weather({"city":"Paris"}) tool_use usage 4+5=9 latency=true`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got bedrockConverseView
			decodeJSON(t, ts.do(t, "POST", "/model/demo/converse", bedrockBody(tt.extra)), http.StatusOK, &got)
			if line := got.describe(); line != tt.want {
				t.Errorf("got  %s\nwant %s", line, tt.want)
			}
		})
	}
}

func TestBedrockToolResultIsEchoed(t *testing.T) {
	ts := startServer(t, config{Chunks: 1})
	turns := func(content ...any) map[string]any {
		return bedrockBody(map[string]any{"toolConfig": bedrockTools, "messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"text": "Weather?"}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"toolUse": map[string]any{
				"toolUseId": "tooluse_1", "name": "get_weather", "input": map[string]any{"city": "Paris"},
			}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"toolResult": map[string]any{
				"toolUseId": "tooluse_1", "content": content, "status": "success",
			}}}},
		}})
	}
	// Input tokens count text blocks ("Be brief.", "Weather?"), not the tool result.
	for _, tt := range []struct {
		content []any
		want    string
	}{
		{[]any{map[string]any{"text": "Sunny, 21C"}}, `assistant text "Sunny, 21C" end_turn usage 3+1=4 latency=true`},
		{[]any{map[string]any{"json": map[string]any{"temp": 21}}}, `assistant text "{\"temp\":21}" end_turn usage 3+1=4 latency=true`},
	} {
		var got bedrockConverseView
		decodeJSON(t, ts.do(t, "POST", "/model/demo/converse", turns(tt.content...)), http.StatusOK, &got)
		if line := got.describe(); line != tt.want {
			t.Errorf("got  %s\nwant %s", line, tt.want)
		}
	}
}

// bedrockErrorOf returns the x-amzn-ErrorType of an AWS JSON error, failing unless the
// body is {"message":…}.
func bedrockErrorOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e struct {
		Message string `json:"message"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if json.Unmarshal(b, &e) != nil || e.Message == "" {
		t.Fatalf("not an AWS error body (status %d): %s", resp.StatusCode, b)
	}
	return resp.Header.Get("X-Amzn-ErrorType")
}

func TestBedrockScriptedErrors(t *testing.T) {
	ts := startServer(t, config{})
	tests := []struct {
		model  string
		status int
		typ    string
	}{
		{"demo-error-503", 503, "ServiceUnavailableException"},
		{"demo-error-429", 429, "ThrottlingException"},
		{"demo-error-401", 403, "UnrecognizedClientException"}, // Bedrock has no 401
	}
	for _, tt := range tests {
		for _, op := range []string{"converse", "converse-stream"} {
			t.Run(tt.model+"/"+op, func(t *testing.T) {
				resp := ts.do(t, "POST", "/model/"+tt.model+"/"+op, bedrockBody(nil))
				typ := bedrockErrorOf(t, resp)
				if resp.StatusCode != tt.status || typ != tt.typ {
					t.Errorf("got %d %s, want %d %s", resp.StatusCode, typ, tt.status, tt.typ)
				}
				if ra := resp.Header.Get("Retry-After"); (tt.status == 429) != (ra == "1") {
					t.Errorf("retry-after = %q", ra)
				}
			})
		}
	}
}

func TestBedrockEscapedModelID(t *testing.T) {
	ts := startServer(t, config{})
	// An inference profile ARN, escaped as the AWS SDKs send it: ":" and "/" inside one
	// path segment. Its scripted 503 proves the whole id reached the script.
	arn := "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.demo-error-503"
	resp := ts.do(t, "POST", "/model/"+arn+"/converse", bedrockBody(nil))
	if typ := bedrockErrorOf(t, resp); resp.StatusCode != http.StatusServiceUnavailable || typ != "ServiceUnavailableException" {
		t.Errorf("got %d %s", resp.StatusCode, typ)
	}
	arn = strings.Replace(arn, "demo-error-503", "demo-echo", 1)
	readBedrockStream(t, ts.do(t, "POST", "/model/"+arn+"/converse-stream", bedrockBody(nil)))
}

func TestBedrockBadRequests(t *testing.T) {
	ts := startServer(t, config{})
	for name, body := range map[string]any{
		"not an object": []int{1},
		"no messages":   map[string]any{"system": []any{map[string]any{"text": "hi"}}},
	} {
		t.Run(name, func(t *testing.T) {
			resp := ts.do(t, "POST", "/model/demo/converse-stream", body)
			if typ := bedrockErrorOf(t, resp); resp.StatusCode != http.StatusBadRequest || typ != "ValidationException" {
				t.Errorf("got %d %s", resp.StatusCode, typ)
			}
		})
	}
}

// signedRequest is a converse request signed with SigV4 for service, as the AWS SDK signs
// it, with credentials the demo has never seen.
func signedRequest(t *testing.T, ts *testServer, service string) *http.Request {
	t.Helper()
	body, err := json.Marshal(bedrockBody(nil))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/model/demo/converse", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	if err := v4.NewSigner().SignHTTP(t.Context(), creds, req, hex.EncodeToString(sum[:]), service, "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

func TestBedrockAuthentication(t *testing.T) {
	const key = "ABSKdemo-bedrock-api-key"
	ts := startServer(t, config{APIKey: key})
	send := func(req *http.Request) *http.Response {
		t.Helper()
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	t.Run("bedrock api key", func(t *testing.T) {
		var got bedrockConverseView
		decodeJSON(t, ts.do(t, "POST", "/model/demo/converse", bedrockBody(nil), "Authorization", "Bearer "+key), http.StatusOK, &got)
	})
	t.Run("sigv4", func(t *testing.T) {
		var got bedrockConverseView
		decodeJSON(t, send(signedRequest(t, ts, "bedrock")), http.StatusOK, &got)
	})

	rejected := map[string]func() *http.Response{
		"missing": func() *http.Response { return ts.do(t, "POST", "/model/demo/converse", bedrockBody(nil)) },
		"wrong key": func() *http.Response {
			return ts.do(t, "POST", "/model/demo/converse", bedrockBody(nil), "Authorization", "Bearer ABSK-wrong")
		},
		"x-api-key": func() *http.Response {
			return ts.do(t, "POST", "/model/demo/converse", bedrockBody(nil), "x-api-key", key)
		},
		"sigv4 for another service": func() *http.Response { return send(signedRequest(t, ts, "bedrock-runtime")) },
		"sigv4 without signature": func() *http.Response {
			return ts.do(t, "POST", "/model/demo/converse-stream", bedrockBody(nil), "Authorization",
				"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host")
		},
	}
	for name, send := range rejected {
		t.Run(name, func(t *testing.T) {
			resp := send()
			if typ := bedrockErrorOf(t, resp); resp.StatusCode != http.StatusForbidden || typ != "UnrecognizedClientException" {
				t.Errorf("got %d %s, want 403 UnrecognizedClientException", resp.StatusCode, typ)
			}
		})
	}
}

func TestSigV4Shaped(t *testing.T) {
	sig := strings.Repeat("0f", 32)
	for _, tt := range []struct {
		header string
		want   bool
	}{
		{"AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + sig, true},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request,SignedHeaders=host,Signature=" + sig, true},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + sig, false},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260101/bedrock/aws4_request, SignedHeaders=host, Signature=" + sig, false},
		{"AWS4-HMAC-SHA256 Credential=/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=" + sig, false},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=xyz", false},
		{"AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, Signature=" + sig, false},
		{"Bearer AWS4-HMAC-SHA256", false},
		{"", false},
	} {
		if got := sigV4Shaped(tt.header); got != tt.want {
			t.Errorf("sigV4Shaped(%q) = %t, want %t", tt.header, got, tt.want)
		}
	}
}
