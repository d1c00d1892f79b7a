package openai

import (
	"cmp"
	"slices"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// What the door learns of an execution from its events, shared by its endpoints: the
// attempt that serves it (its deployment's spec.model, the provider whose usage it
// reports), that attempt's usage, and how the execution ended.

// served folds the events of one execution.
type served struct {
	// model and provider are those of the latest route.selected: the attempt that
	// produced any output, since no attempt follows one that did.
	model, provider string
	// usage is the latest attempt's.
	usage tokens
	// output is true once an output or tool event was seen.
	output bool
	// terminal is true once the terminal event was seen; then finish (the provider's
	// finish reason) or err (the failure) says how it ended.
	terminal bool
	finish   string
	err      *protocol.Error
}

// apply folds ev. Events come from the store, which admitted their data; one that does
// not decode is an internal error.
func (s *served) apply(ev *protocol.Event) error {
	switch ev.Type {
	case protocol.EventRouteSelected:
		var d protocol.RouteSelectedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		s.model, s.provider, s.usage = d.Model, d.Provider, tokens{}
	case protocol.EventUsageReported:
		var d protocol.UsageReportedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		s.usage.add(d.Usage)
	case protocol.EventCompleted:
		var d protocol.CompletedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		s.terminal, s.finish = true, d.FinishReason
	case protocol.EventFailed:
		var d protocol.FailedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		s.terminal, s.err = true, d.Error
		if s.err == nil {
			s.err = protocol.NewError(protocol.CodeInternal, "internal error")
		}
	default:
		s.output = s.output || ev.Type.IsOutput()
	}
	return nil
}

// filtered reports whether the execution ended because the provider's safety system
// stopped it: OpenAI answers that as a completion whose finish reason is
// content_filter, and so does the door.
func (s *served) filtered() bool {
	return s.err != nil && s.err.Code == protocol.CodeContentFiltered
}

// failed reports whether the execution ended in a failure the door answers as an error.
func (s *served) failed() bool { return s.err != nil && !s.filtered() }

// finishReason is OpenAI's finish reason for the execution's end: the provider's
// reason mapped onto stop, length, tool_calls or content_filter. A reason that says the
// model stopped on its own is tool_calls when the answer holds tool calls, which is
// what OpenAI clients test to run them.
func (s *served) finishReason(toolCalls bool) string {
	if s.filtered() {
		return finishContentFilter
	}
	reason := finishReasons[strings.ToLower(s.finish)]
	if (reason == "" || reason == finishStop) && toolCalls {
		return finishToolCalls
	}
	if reason == "" {
		return finishStop
	}
	return reason
}

// OpenAI's finish reasons.
const (
	finishStop          = "stop"
	finishLength        = "length"
	finishToolCalls     = "tool_calls"
	finishContentFilter = "content_filter"
)

// finishReasons maps the bundled providers' finish reasons, lower-cased, to OpenAI's:
// OpenAI's own, Anthropic's stop_reason, Gemini's finishReason, Bedrock's stopReason.
// Any other reason is stop (or tool_calls, see finishReason).
var finishReasons = map[string]string{
	"stop": finishStop, "end_turn": finishStop, "stop_sequence": finishStop,
	"pause_turn": finishStop,
	"length":     finishLength, "max_tokens": finishLength,
	"model_context_window_exceeded": finishLength,
	"tool_calls":                    finishToolCalls, "tool_use": finishToolCalls, "function_call": finishToolCalls,
	"content_filter": finishContentFilter, "content_filtered": finishContentFilter,
	"refusal": finishContentFilter, "safety": finishContentFilter, "recitation": finishContentFilter,
	"blocklist": finishContentFilter, "prohibited_content": finishContentFilter,
	"spii": finishContentFilter, "image_safety": finishContentFilter,
	"guardrail_intervened": finishContentFilter,
}

// tokens is an attempt's token usage by unit; a unit not reported stays unknown.
type tokens struct {
	input, output, cacheRead, cacheWrite, reasoning float64
	known                                           uint8
}

// Bits of tokens.known.
const (
	knowInput uint8 = 1 << iota
	knowOutput
	knowCacheRead
	knowCacheWrite
	knowReasoning
)

func (t *tokens) add(entries []protocol.Usage) {
	for _, u := range entries {
		var dst *float64
		var bit uint8
		switch u.Unit {
		case protocol.UnitInputTokens:
			dst, bit = &t.input, knowInput
		case protocol.UnitOutputTokens:
			dst, bit = &t.output, knowOutput
		case protocol.UnitCacheReadTokens:
			dst, bit = &t.cacheRead, knowCacheRead
		case protocol.UnitCacheWriteTokens:
			dst, bit = &t.cacheWrite, knowCacheWrite
		case protocol.UnitReasoningTokens:
			dst, bit = &t.reasoning, knowReasoning
		default:
			continue
		}
		*dst += u.Quantity
		t.known |= bit
	}
}

// cachedApart are the providers whose input_tokens leave out the cached input they
// report as cache_read_tokens and cache_write_tokens (spec/events.md, "usage.reported"):
// OpenAI's prompt_tokens count it, so the door adds them back.
var cachedApart = map[string]bool{"anthropic": true, "bedrock": true}

// usageBody is OpenAI's usage object.
type usageBody struct {
	PromptTokens            int64          `json:"prompt_tokens"`
	CompletionTokens        int64          `json:"completion_tokens"`
	TotalTokens             int64          `json:"total_tokens"`
	PromptTokensDetails     *promptDetails `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *outputDetails `json:"completion_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

type outputDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// usage is the served attempt's usage in OpenAI's terms, or nil when it reported no
// token counts: prompt_tokens include cached input, completion_tokens include
// reasoning, and the details are given when the provider reported them.
func (s *served) usageBody() *usageBody {
	t := s.usage
	if t.known&(knowInput|knowOutput) == 0 {
		return nil
	}
	prompt := t.input
	if cachedApart[s.provider] {
		prompt += t.cacheRead + t.cacheWrite
	}
	u := &usageBody{PromptTokens: round(prompt), CompletionTokens: round(t.output)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if t.known&knowCacheRead != 0 {
		u.PromptTokensDetails = &promptDetails{CachedTokens: round(t.cacheRead)}
	}
	if t.known&knowReasoning != 0 {
		u.CompletionTokensDetails = &outputDetails{ReasoningTokens: round(t.reasoning)}
	}
	return u
}

// round is a token count as an integer; counts are whole, but usage quantities are
// numbers.
func round(f float64) int64 { return int64(f + 0.5) }

// answer collects an execution's output for an answer given whole: text by output
// index, tool calls in the order they started.
type answer struct {
	texts []indexedText
	calls []toolCall
}

type indexedText struct {
	index int
	text  []byte
}

// toolCall is one tool call of an answer or a stream: its id, name and (for an answer)
// arguments so far.
type toolCall struct {
	id, name string
	args     []byte
}

// apply folds an output event into the answer.
func (a *answer) apply(ev *protocol.Event) error {
	switch ev.Type {
	case protocol.EventOutputDelta:
		d, err := protocol.DecodeDelta(ev.Data)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(a.texts, func(t indexedText) bool { return t.index == d.Index })
		if i < 0 {
			a.texts = append(a.texts, indexedText{index: d.Index})
			i = len(a.texts) - 1
		}
		a.texts[i].text = append(a.texts[i].text, d.Text...)
	case protocol.EventToolCallStarted:
		var d protocol.ToolCallStartedData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		c := callOf(&a.calls, d.CallID)
		c.name = d.Name
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
			return err
		}
		c := callOf(&a.calls, d.CallID)
		c.args = append(c.args, d.Delta...)
	}
	return nil
}

// text is the answer's text: its output parts in index order.
func (a *answer) text() (string, bool) {
	if len(a.texts) == 0 {
		return "", false
	}
	slices.SortStableFunc(a.texts, func(x, y indexedText) int { return cmp.Compare(x.index, y.index) })
	var b strings.Builder
	for _, t := range a.texts {
		b.Write(t.text)
	}
	return b.String(), true
}

// callOf returns the call id of calls, appending it if it is new (argument fragments
// may come before the call's start is known).
func callOf(calls *[]toolCall, id string) *toolCall {
	for i := range *calls {
		if (*calls)[i].id == id {
			return &(*calls)[i]
		}
	}
	*calls = append(*calls, toolCall{id: id})
	return &(*calls)[len(*calls)-1]
}
