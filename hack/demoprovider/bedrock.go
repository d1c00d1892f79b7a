package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
)

// Amazon Bedrock Converse (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html)
// and ConverseStream (…/API_runtime_ConverseStream.html):
//
//	POST /model/{modelId}/converse          one JSON answer
//	POST /model/{modelId}/converse-stream   application/vnd.amazon.eventstream
//
// modelId arrives URL-escaped (an ARN carries ":" and "/"); the mux decodes it. Only
// the request fields the script needs are read.

// bedrockRequest is the part of a Converse request the demo reads.
type bedrockRequest struct {
	Messages   []bedrockMessage `json:"messages"`
	System     []bedrockBlock   `json:"system"`
	ToolConfig *struct {
		Tools []struct {
			ToolSpec *struct {
				Name string `json:"name"`
			} `json:"toolSpec"`
		} `json:"tools"`
	} `json:"toolConfig"`
}

// bedrockMessage is one turn of the conversation.
type bedrockMessage struct {
	Role    string         `json:"role"`
	Content []bedrockBlock `json:"content"`
}

// bedrockBlock is the part of a content (or system) block the demo reads.
type bedrockBlock struct {
	Text       string `json:"text"`
	ToolResult *struct {
		Content []struct {
			Text string          `json:"text"`
			JSON json.RawMessage `json:"json"`
		} `json:"content"`
	} `json:"toolResult"`
}

// bedrockText concatenates the text blocks of blocks.
func bedrockText(blocks []bedrockBlock) string {
	var s string
	for _, b := range blocks {
		s += b.Text
	}
	return s
}

// bedrockUsage is the token usage of an answer.
type bedrockUsage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	TotalTokens  int `json:"totalTokens"`
}

// bedrockMetrics is the answer's latency. The demo reports the latency its script
// paces (pieces × delay, at least 1 ms) rather than a measured one, so it is
// deterministic.
type bedrockMetrics struct {
	LatencyMs int64 `json:"latencyMs"`
}

// bedrockConverse serves POST /model/{modelId}/converse.
func (s *server) bedrockConverse(w http.ResponseWriter, r *http.Request) {
	s.bedrock(w, r, false)
}

// bedrockConverseStream serves POST /model/{modelId}/converse-stream.
func (s *server) bedrockConverseStream(w http.ResponseWriter, r *http.Request) {
	s.bedrock(w, r, true)
}

// bedrock answers both Converse operations; stream selects the event stream.
func (s *server) bedrock(w http.ResponseWriter, r *http.Request, stream bool) {
	s.stats.bedrockRequests.Add(1)
	w.Header().Set("X-Amzn-RequestId", s.nextID("demo-request-"))
	if !s.bedrockAuthorized(r) {
		bedrockError(w, http.StatusForbidden, "")
		return
	}
	var req bedrockRequest
	if err := decodeBody(w, r, &req); err != nil {
		bedrockError(w, http.StatusBadRequest, "Malformed input request, please reformat your input and try again.")
		return
	}
	if len(req.Messages) == 0 {
		bedrockError(w, http.StatusBadRequest, "A conversation must start with a user message. Try again with a conversation that starts with a user message.")
		return
	}
	modelID := r.PathValue("modelId")
	sn := scenarioFor(modelID)
	switch {
	case sn.status == http.StatusUnauthorized:
		bedrockError(w, http.StatusForbidden, "") // Bedrock rejects a credential with 403
		return
	case sn.status != 0:
		bedrockError(w, sn.status, "")
		return
	case sn.throttleInStream && !stream:
		bedrockError(w, http.StatusTooManyRequests, "")
		return
	}

	a := s.bedrockAnswer(req)
	toolUseID := s.nextID("tooluse_demo")
	stop := "end_turn"
	if a.tool != "" {
		stop = "tool_use"
	}
	usage := bedrockUsage{
		InputTokens:  a.promptTokens,
		OutputTokens: a.completionTokens(),
		TotalTokens:  a.promptTokens + a.completionTokens(),
	}
	metrics := bedrockMetrics{LatencyMs: max(1, (s.pacing(sn) * time.Duration(len(a.pieces))).Milliseconds())}

	if !stream {
		block := obj{"text": a.text()}
		if a.tool != "" {
			block = obj{"toolUse": obj{"toolUseId": toolUseID, "name": a.tool, "input": json.RawMessage(toolArguments)}}
		}
		respondJSON(w, r, obj{
			"output":     obj{"message": obj{"role": "assistant", "content": []obj{block}}},
			"stopReason": stop,
			"usage":      usage,
			"metrics":    metrics,
		}, sn, s.pacing(sn), len(a.pieces))
		return
	}

	event := func(typ string, payload any) frame { return frame{event: typ, data: payload} }
	var sc script
	if sn.throttleInStream {
		// Bedrock reports throttling that happens after the 200 as an exception frame,
		// after which the stream ends.
		sc.prelude = []frame{{event: "throttlingException", exception: true, data: obj{
			"message": bedrockMessages[http.StatusTooManyRequests],
		}}}
		play(w, r, bedrockEventStream(), sc, sn, s.pacing(sn))
		return
	}
	sc.prelude = []frame{event("messageStart", obj{"role": "assistant"})}
	if a.tool == "" {
		// A text block has no contentBlockStart: its first delta opens it.
		for _, p := range a.pieces {
			sc.pieces = append(sc.pieces, event("contentBlockDelta", obj{"contentBlockIndex": 0, "delta": obj{"text": p}}))
		}
	} else {
		sc.prelude = append(sc.prelude, event("contentBlockStart", obj{
			"contentBlockIndex": 0, "start": obj{"toolUse": obj{"toolUseId": toolUseID, "name": a.tool}},
		}))
		for _, p := range a.pieces {
			sc.pieces = append(sc.pieces, event("contentBlockDelta", obj{"contentBlockIndex": 0, "delta": obj{"toolUse": obj{"input": p}}}))
		}
	}
	sc.epilogue = []frame{
		event("contentBlockStop", obj{"contentBlockIndex": 0}),
		event("messageStop", obj{"stopReason": stop}),
		event("metadata", obj{"usage": usage, "metrics": metrics}),
	}
	play(w, r, bedrockEventStream(), sc, sn, s.pacing(sn))
}

// bedrockEventStream is the AWS event-stream format: binary frames with CRC-checked
// prelude and message, each carrying its event type and JSON payload
// (https://docs.aws.amazon.com/transcribe/latest/dg/event-stream.html).
// Each stream gets its own Encoder, which reuses buffers and is not safe for sharing.
func bedrockEventStream() streamFormat {
	enc := eventstream.NewEncoder()
	return streamFormat{contentType: "application/vnd.amazon.eventstream", encode: func(buf *bytes.Buffer, f frame) error {
		payload, err := json.Marshal(f.data)
		if err != nil {
			return err
		}
		var h eventstream.Headers
		if f.exception {
			h.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.ExceptionMessageType))
			h.Set(eventstreamapi.ExceptionTypeHeader, eventstream.StringValue(f.event))
		} else {
			h.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.EventMessageType))
			h.Set(eventstreamapi.EventTypeHeader, eventstream.StringValue(f.event))
		}
		h.Set(eventstreamapi.ContentTypeHeader, eventstream.StringValue("application/json"))
		return enc.Encode(buf, eventstream.Message{Headers: h, Payload: payload})
	}}
}

// bedrockAuthorized reports whether r may call Bedrock under --api-key: a Bedrock API
// key as "Authorization: Bearer KEY", or any SigV4-shaped Authorization header. The
// demo cannot know an AWS secret key, so it checks a signature's shape, not its value.
func (s *server) bedrockAuthorized(r *http.Request) bool {
	return s.authorized(r, "Authorization", "Bearer ") || sigV4Shaped(r.Header.Get("Authorization"))
}

// sigV4Shaped reports whether v looks like a SigV4 Authorization header for Bedrock:
//
//	AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=<hex>
//
// The credential scope must name the service "bedrock", as AWS rejects a request signed
// for another one (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-signing-elements.html).
func sigV4Shaped(v string) bool {
	rest, ok := strings.CutPrefix(v, "AWS4-HMAC-SHA256 ")
	if !ok {
		return false
	}
	params := map[string]string{}
	for _, p := range strings.Split(rest, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		params[k] = val
	}
	scope := strings.Split(params["Credential"], "/")
	if len(scope) != 5 || scope[3] != "bedrock" || scope[4] != "aws4_request" {
		return false
	}
	for _, part := range scope[:3] {
		if part == "" {
			return false
		}
	}
	sig := params["Signature"]
	return params["SignedHeaders"] != "" && len(sig) == 64 && strings.Trim(sig, "0123456789abcdef") == ""
}

// bedrockAnswer scripts the answer to req: a conversation whose last message carries
// toolResult blocks has their content echoed (JSON content as compact JSON); otherwise
// the last user text is echoed, or the first tool is called when tools are offered.
func (s *server) bedrockAnswer(req bedrockRequest) answer {
	prompt := []string{bedrockText(req.System)}
	var last string
	for _, m := range req.Messages {
		t := bedrockText(m.Content)
		prompt = append(prompt, t)
		if m.Role == "user" {
			last = t
		}
	}
	var results strings.Builder
	endsWithToolResult := false
	for _, b := range req.Messages[len(req.Messages)-1].Content {
		if b.ToolResult == nil {
			continue
		}
		endsWithToolResult = true
		for _, c := range b.ToolResult.Content {
			results.WriteString(c.Text)
			if len(c.JSON) > 0 {
				var compact bytes.Buffer
				if json.Compact(&compact, c.JSON) == nil {
					results.Write(compact.Bytes())
				}
			}
		}
	}
	if endsWithToolResult {
		last = results.String()
	}
	var firstTool string
	if req.ToolConfig != nil {
		for _, t := range req.ToolConfig.Tools {
			if t.ToolSpec != nil {
				firstTool = t.ToolSpec.Name
				break
			}
		}
	}
	return s.newAnswer(prompt, last, endsWithToolResult, firstTool)
}
