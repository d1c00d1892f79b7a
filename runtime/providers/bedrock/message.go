package bedrock

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// maxMessageBody bounds a non-streaming answer, so a misbehaving endpoint cannot make the
// adapter buffer without limit; a real answer is at most a few hundred KiB.
const maxMessageBody = 16 << 20

// converseResponse is a Converse answer: {output: {message}, stopReason, usage, metrics}.
type converseResponse struct {
	Output *struct {
		Message *struct {
			Content []responseBlock `json:"content"`
		} `json:"message"`
	} `json:"output"`
	StopReason string `json:"stopReason"`
	Usage      *usage `json:"usage"`
}

// responseBlock is a ContentBlock of the answer; only text and toolUse are output here.
type responseBlock struct {
	Text    *string `json:"text"`
	ToolUse *struct {
		ToolUseID string          `json:"toolUseId"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"toolUse"`
}

// readMessage handles a non-streaming answer: the whole text becomes one output.delta,
// each toolUse block a tool.call.started and one arguments delta, then one
// usage.reported.
func (r *reader) readMessage(ctx context.Context, body io.Reader) (engine.Outcome, error) {
	raw, err := providerhttp.ReadAnswer(ctx, Provider, r.log, body, maxMessageBody)
	switch {
	case errors.Is(err, providerhttp.ErrBodyTooLarge):
		return engine.Outcome{}, r.malformed("message too large")
	case err != nil:
		return engine.Outcome{}, err
	}
	var m converseResponse
	if err := json.Unmarshal(raw, &m); err != nil || m.Output == nil || m.Output.Message == nil {
		return engine.Outcome{}, r.malformed("message")
	}

	var text strings.Builder
	for _, b := range m.Output.Message.Content {
		if b.Text != nil {
			text.WriteString(*b.Text)
		}
	}
	if err := r.Text(text.String()); err != nil {
		return engine.Outcome{}, err
	}
	calls := 0
	for _, b := range m.Output.Message.Content {
		if b.ToolUse == nil {
			continue // reasoningContent, citations, …: not output of this protocol
		}
		if err := r.toolStarted(calls, b.ToolUse.ToolUseID, b.ToolUse.Name); err != nil {
			return engine.Outcome{}, err
		}
		calls++
		if err := r.ToolArgs(b.ToolUse.ToolUseID, providerhttp.ObjectText(b.ToolUse.Input)); err != nil {
			return engine.Outcome{}, err
		}
	}
	if err := r.Usage(m.Usage.tokens()); err != nil {
		return engine.Outcome{}, err
	}
	return r.finish(m.StopReason)
}
