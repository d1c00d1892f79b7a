package openai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The Response object (spec/compat.md, "OpenAI Responses": "Response object"): what POST
// /v1/responses answers, GET /v1/responses/{id} reads, and the lifecycle events of a
// stream carry. It is built from a respView, which the execution's status and result
// snapshot give (responseFromStatus) or a stream's projection keeps (respProjection),
// and encoded by hand, in one function, so that every answer has the same shape.

// Response statuses (OpenAI's).
const (
	respQueued     = "queued"
	respInProgress = "in_progress"
	respCompleted  = "completed"
	respFailed     = "failed"
	respCancelled  = "cancelled"
	respIncomplete = "incomplete"
)

// Incomplete reasons (OpenAI's incomplete_details.reason).
const (
	reasonMaxOutputTokens = "max_output_tokens"
	reasonContentFilter   = "content_filter"
)

// respView is a Response as far as the execution has come.
type respView struct {
	id          string
	createdAt   time.Time
	completedAt time.Time // zero until the execution is terminal
	metadata    map[string]string
	model       string // the served deployment's spec.model; empty before a route
	status      string
	incomplete  string // incomplete_details.reason, for status incomplete
	err         *protocol.Error
	items       []*respItem
	usage       []protocol.Usage
}

// respItem is one output item: a message (the text of one native output part) or a
// function call.
type respItem struct {
	call   bool
	id     string
	callID string // function calls
	name   string // function calls
	index  int    // position in the output (kept by a projection)
	// body is the message's text or the call's arguments.
	body strings.Builder
}

// messageID and callItemID name output items after the execution and what they hold,
// so that every read of a response, and every replay of its stream, gives each item
// the same id, whatever order it is read in. A call's provider id may hold anything; its
// hash names it.
func messageID(execution string, index int) string {
	return "msg_" + strings.TrimPrefix(execution, "exe_") + "_" + strconv.Itoa(index)
}

func callItemID(execution, callID string) string {
	sum := sha256.Sum256([]byte(callID))
	return "fc_" + strings.TrimPrefix(execution, "exe_") + "_" + hex.EncodeToString(sum[:8])
}

// respStatusOf is a response's status and incomplete reason for an execution's state,
// finish reason and error. A cancelled execution is failed natively (code cancelled)
// and cancelled here; one that stopped at its output limit or a content filter is
// incomplete.
func respStatusOf(state protocol.Status, finish string, e *protocol.Error) (status, incomplete string) {
	switch state {
	case protocol.StatusCompleted:
		if reason := incompleteReason(finish); reason != "" {
			return respIncomplete, reason
		}
		return respCompleted, ""
	case protocol.StatusFailed:
		if e != nil && e.Code == protocol.CodeCancelled {
			return respCancelled, ""
		}
		return respFailed, ""
	case protocol.StatusRunning:
		return respInProgress, ""
	}
	return respQueued, ""
}

// incompleteReason maps a provider's finish reason (each adapter reports its
// provider's own) onto an incomplete reason, or "" for an answer that is complete.
func incompleteReason(finish string) string {
	switch strings.ToLower(finish) {
	case "length", "max_tokens", "max_output_tokens":
		return reasonMaxOutputTokens
	case "content_filter", "content_filtered", "refusal", "safety", "recitation", "blocklist",
		"prohibited_content", "spii", "image_safety", "guardrail_intervened":
		return reasonContentFilter
	}
	return ""
}

// itemStatus is the status of the response's output items: done with the response,
// cut short when it ends otherwise, and still coming while it runs.
func (v *respView) itemStatus() string {
	switch v.status {
	case respCompleted:
		return respCompleted
	case respQueued, respInProgress:
		return respInProgress
	}
	return respIncomplete
}

// responseFromStatus is the response of an execution from its status and result
// snapshot. The snapshot gives the state (it is read after the status, so it is at
// least as recent). Its output has the messages first, in the order of their output
// parts, then the function calls in their order: a stream numbers items in the order
// they first appear, which is the same unless text first appears after a call
// (spec/compat.md, "OpenAI Responses": "Differences").
func responseFromStatus(st eventstore.Status, snap *protocol.Snapshot) *respView {
	es := engine.StatusOf(st)
	v := &respView{id: st.ID, createdAt: es.CreatedAt, metadata: es.Metadata, usage: snap.Usage}
	if es.Route != nil {
		v.model = es.Route.Model
	}
	v.status, v.incomplete = respStatusOf(snap.Status, snap.FinishReason, snap.Error)
	v.err = snap.Error
	if snap.Status.Terminal() && st.Terminal {
		v.completedAt = st.UpdatedAt
	}
	for _, p := range snap.Output {
		it := &respItem{id: messageID(st.ID, p.Index)}
		it.body.WriteString(p.Text)
		v.items = append(v.items, it)
	}
	for _, c := range snap.ToolCalls {
		if c.Name == "" {
			continue // arguments whose call never started: nothing to answer
		}
		it := &respItem{call: true, id: callItemID(st.ID, c.CallID), callID: c.CallID, name: c.Name}
		it.body.WriteString(c.Arguments)
		v.items = append(v.items, it)
	}
	return v
}

// appendResponse appends v as a Response object. Request parameters the execution does
// not keep (instructions, tools, temperature, …) are not echoed; metadata is.
func appendResponse(dst []byte, v *respView) []byte {
	dst = append(dst, `{"id":`...)
	dst = protocol.AppendJSONString(dst, v.id)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, v.createdAt.Unix(), 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, v.status...)
	dst = append(dst, `","completed_at":`...)
	if v.completedAt.IsZero() || v.status != respCompleted {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, v.completedAt.Unix(), 10)
	}
	dst = append(dst, `,"error":`...)
	if v.err != nil && v.status != respCompleted && v.status != respIncomplete {
		dst = appendResponseError(dst, v.err)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if v.incomplete != "" {
		dst = append(dst, `{"reason":"`...)
		dst = append(dst, v.incomplete...)
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"metadata":{`...)
	for i, k := range slices.Sorted(maps.Keys(v.metadata)) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = protocol.AppendJSONString(dst, k)
		dst = append(dst, ':')
		dst = protocol.AppendJSONString(dst, v.metadata[k])
	}
	dst = append(dst, `},"model":`...)
	dst = protocol.AppendJSONString(dst, v.model)
	dst = append(dst, `,"output":[`...)
	status := v.itemStatus()
	for i, it := range v.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendItem(dst, it, status)
	}
	dst = append(dst, `],"usage":`...)
	dst = appendUsage(dst, v.usage)
	return append(dst, '}')
}

// appendItem appends an output item with status and its content so far.
func appendItem(dst []byte, it *respItem, status string) []byte {
	dst = append(dst, `{"id":`...)
	dst = protocol.AppendJSONString(dst, it.id)
	if it.call {
		dst = append(dst, `,"type":"function_call","status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","call_id":`...)
		dst = protocol.AppendJSONString(dst, it.callID)
		dst = append(dst, `,"name":`...)
		dst = protocol.AppendJSONString(dst, it.name)
		dst = append(dst, `,"arguments":`...)
		dst = protocol.AppendJSONString(dst, it.body.String())
		return append(dst, '}')
	}
	dst = append(dst, `,"type":"message","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if it.body.Len() > 0 || status != respInProgress {
		dst = appendOutputText(dst, it.body.String())
	}
	return append(dst, "]}"...)
}

// appendOutputText appends an output_text content part.
func appendOutputText(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = protocol.AppendJSONString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

// appendResponseError appends a response's error: OpenAI's {code, message}, the
// portable code and its fixed message, with the retry facts in the switchboard member
// as in the door's error bodies.
func appendResponseError(dst []byte, e *protocol.Error) []byte {
	dst = append(dst, `{"code":`...)
	dst = protocol.AppendJSONString(dst, string(e.Code))
	dst = append(dst, `,"message":`...)
	dst = protocol.AppendJSONString(dst, e.Message)
	dst = append(dst, `,"switchboard":{"retryable":`...)
	dst = strconv.AppendBool(dst, e.Retryable)
	if e.RetryAfterMs > 0 {
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, e.RetryAfterMs, 10)
	}
	return append(dst, "}}"...)
}

// appendUsage appends OpenAI's usage for the usage entries of every attempt, summed per
// unit (what was spent, whichever attempt spent it), or null when no token count was
// reported.
func appendUsage(dst []byte, usage []protocol.Usage) []byte {
	var in, out, cacheRead, cacheWrite, reasoning float64
	tokens := false
	for _, u := range usage {
		switch u.Unit {
		case protocol.UnitInputTokens:
			in += u.Quantity
			tokens = true
		case protocol.UnitOutputTokens:
			out += u.Quantity
			tokens = true
		case protocol.UnitCacheReadTokens:
			cacheRead += u.Quantity
		case protocol.UnitCacheWriteTokens:
			cacheWrite += u.Quantity
		case protocol.UnitReasoningTokens:
			reasoning += u.Quantity
		}
	}
	if !tokens {
		return append(dst, "null"...)
	}
	count := func(f float64) int64 { return int64(math.Round(f)) }
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, count(in), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, count(cacheRead), 10)
	dst = append(dst, `,"cache_write_tokens":`...)
	dst = strconv.AppendInt(dst, count(cacheWrite), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, count(out), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	dst = strconv.AppendInt(dst, count(reasoning), 10)
	dst = append(dst, `},"total_tokens":`...)
	dst = strconv.AppendInt(dst, count(in)+count(out), 10)
	return append(dst, '}')
}

// respDeleted is the answer to DELETE /v1/responses/{id}.
type respDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

func deletedBody(id string) []byte {
	b, _ := json.Marshal(respDeleted{ID: id, Object: "response", Deleted: true})
	return b
}
