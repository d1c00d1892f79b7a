package anthropic

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

// messageResponse is a non-streaming answer.
type messageResponse struct {
	Type       string          `json:"type"`
	Content    []responseBlock `json:"content"`
	Model      string          `json:"model"`
	StopReason string          `json:"stop_reason"`
	Usage      *usage          `json:"usage"`
}

// readMessage handles a non-streaming answer: the whole text becomes one output.delta,
// each tool_use block a tool.call.started and one arguments delta, then one
// usage.reported.
func (r *reader) readMessage(ctx context.Context, body io.Reader) (engine.Outcome, error) {
	raw, err := providerhttp.ReadAnswer(ctx, Provider, r.log, body, maxMessageBody)
	switch {
	case errors.Is(err, providerhttp.ErrBodyTooLarge):
		return engine.Outcome{}, r.malformed("message too large")
	case err != nil:
		return engine.Outcome{}, err
	}
	var m messageResponse
	if err := json.Unmarshal(raw, &m); err != nil || m.Type != "message" {
		return engine.Outcome{}, r.malformed("message")
	}

	var text strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}
	if err := r.Text(text.String()); err != nil {
		return engine.Outcome{}, err
	}
	calls := 0
	for _, b := range m.Content {
		if b.Type != "tool_use" {
			continue // thinking and server-tool blocks are not output of this protocol
		}
		id, name, ok := r.toolCall(b.ID, b.Name)
		if !ok {
			return engine.Outcome{}, r.malformed("tool_use block")
		}
		if err := r.ToolStarted(calls, id, name); err != nil {
			return engine.Outcome{}, err
		}
		calls++
		if err := r.ToolArgs(id, providerhttp.ObjectText(b.Input)); err != nil {
			return engine.Outcome{}, err
		}
	}
	if err := r.Usage(m.Usage.tokens()); err != nil {
		return engine.Outcome{}, err
	}
	r.answeredBy(m.Model)
	return r.finish(m.StopReason)
}
