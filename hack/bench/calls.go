package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// callTimeout bounds one call, so that a stuck stream fails the run instead of hanging it.
const callTimeout = time.Minute

// callTimes are one call's durations, each from the moment its POST was sent.
type callTimes struct {
	// start is when the POST was sent.
	start time.Time
	// accepted is when the response head arrived: the 202 of POST /v1/executions, or
	// the 200 of a Chat Completions or Messages stream.
	accepted time.Duration
	// firstOutput is when the first text arrived: the first content chunk (Chat
	// Completions), the first text_delta (Messages) or the first output.delta event
	// (execution).
	firstOutput time.Duration
	// end is when the stream ended: data: [DONE] (Chat Completions), message_stop
	// (Messages) or the terminal event (execution).
	end time.Duration
}

// promptText returns n runes of text, so that the demo provider's echo splits into
// exactly n/r pieces of r runes when asked for n/r chunks.
func promptText(n int) string {
	const pangram = "The quick brown fox jumps over the lazy dog. "
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(pangram)
	}
	return b.String()[:n] // ASCII: bytes are runes
}

// textRequest is an execution request whose answer is text echoed back.
func textRequest(text string) *protocol.Request {
	deadline := int64(callTimeout / time.Millisecond)
	return &protocol.Request{
		Ability:    benchAbility,
		Input:      []protocol.Part{{Type: protocol.PartText, Text: text}},
		DeadlineMs: &deadline,
	}
}

// newRuntimeClient returns a runtime client at api (host:port) over hc.
func newRuntimeClient(api string, hc *http.Client) (*client.Client, error) {
	return client.New("http://"+api, client.WithHTTPClient(hc), client.WithUserAgent("switchboard-bench"))
}

// runtimeCall submits req, follows the execution's event stream to its terminal event
// and checks that it completed with the text want.
func runtimeCall(ctx context.Context, cl *client.Client, req *protocol.Request, want string) (callTimes, error) {
	var t callTimes
	start := time.Now()
	t.start = start
	acc, err := cl.Submit(ctx, req)
	if err != nil {
		return t, fmt.Errorf("submit: %w", err)
	}
	t.accepted = time.Since(start)
	st, err := cl.Events(ctx, acc.ID, 0)
	if err != nil {
		return t, fmt.Errorf("events of %s: %w", acc.ID, err)
	}
	defer st.Close()
	var text strings.Builder
	var last protocol.Event
	for st.Next() {
		last = st.Event()
		switch last.Type {
		case protocol.EventOutputDelta:
			if t.firstOutput == 0 {
				t.firstOutput = time.Since(start)
			}
			var d protocol.OutputDeltaData
			if err := json.Unmarshal(last.Data, &d); err != nil {
				return t, fmt.Errorf("execution %s: decode output.delta: %w", acc.ID, err)
			}
			text.WriteString(d.Text)
		case protocol.EventCompleted, protocol.EventFailed:
			t.end = time.Since(start)
		}
	}
	if err := st.Err(); err != nil {
		return t, fmt.Errorf("events of %s: %w", acc.ID, err)
	}
	if last.Type != protocol.EventCompleted {
		return t, fmt.Errorf("execution %s ended with %q: %s", acc.ID, last.Type, last.Data)
	}
	if text.String() != want {
		return t, fmt.Errorf("execution %s answered %s, want %s", acc.ID, clip(text.String()), clip(want))
	}
	return t, nil
}

// chatClient streams OpenAI Chat Completions calls from one endpoint: the demo provider
// itself (the direct call, with the body and headers the runtime's openai-compatible
// adapter sends), the relay's translating mode, the runtime's front door or a peer
// gateway.
type chatClient struct {
	name string // names the side in errors
	hc   *http.Client
	url  string
	body []byte
	auth string // Authorization header, if any
	// idHeader, when set, is a response header every answer must carry (the front
	// door's Switchboard-Execution-Id).
	idHeader string
}

// newChatClient returns a client of the Chat Completions endpoint url asking model for
// a streamed echo of text with usage; key, when set, is sent as a bearer token.
func newChatClient(name string, hc *http.Client, url, model, key, text string) (*chatClient, error) {
	body, err := json.Marshal(map[string]any{
		"model":          model,
		"messages":       []map[string]string{{"role": "user", "content": text}},
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	if err != nil {
		return nil, err
	}
	c := &chatClient{name: name, hc: hc, url: url, body: body}
	if key != "" {
		c.auth = "Bearer " + key
	}
	return c, nil
}

// statusError is an answer other than 200, with the start of its body.
type statusError struct {
	name   string
	status int
	body   []byte
}

// Error names the side, the status and the start of the body.
func (e *statusError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.name, e.status, http.StatusText(e.status), e.body)
}

// chatChunk is what call reads of a chat.completion.chunk, or of an error frame.
type chatChunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// call streams one completion until data: [DONE] and checks it: every frame a
// chat.completion.chunk, the text want, a usage chunk (include_usage was asked for).
// accepted is the time to the response head.
func (c *chatClient) call(ctx context.Context, want string) (callTimes, error) {
	var t callTimes
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return t, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	start := time.Now()
	t.start = start
	resp, err := c.hc.Do(req)
	if err != nil {
		return t, fmt.Errorf("%s: %w", c.name, err)
	}
	t.accepted = time.Since(start)
	defer func() {
		_, _ = io.Copy(io.Discard, resp.Body) // lets the connection be reused
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return t, &statusError{name: c.name, status: resp.StatusCode, body: msg}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return t, fmt.Errorf("%s: Content-Type %q, want text/event-stream", c.name, ct)
	}
	if c.idHeader != "" && resp.Header.Get(c.idHeader) == "" {
		return t, fmt.Errorf("%s: no %s header", c.name, c.idHeader)
	}
	dec := sse.NewDecoder(resp.Body)
	var text strings.Builder
	usage := false
	for {
		fr, err := dec.Next()
		if err != nil {
			return t, fmt.Errorf("%s: stream ended before [DONE]: %w", c.name, err)
		}
		if fr.Data == "[DONE]" {
			t.end = time.Since(start)
			break
		}
		var chunk chatChunk
		if err := json.Unmarshal([]byte(fr.Data), &chunk); err != nil {
			return t, fmt.Errorf("%s: decode chunk: %w", c.name, err)
		}
		if chunk.Error != nil {
			return t, fmt.Errorf("%s: the stream failed: %s", c.name, clip(string(chunk.Error)))
		}
		if chunk.Object != "chat.completion.chunk" {
			return t, fmt.Errorf("%s: a chunk of object %q, want chat.completion.chunk", c.name, chunk.Object)
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" && t.firstOutput == 0 {
				t.firstOutput = time.Since(start)
			}
			text.WriteString(ch.Delta.Content)
		}
		if chunk.Usage != nil && chunk.Usage.TotalTokens > 0 {
			usage = true
		}
	}
	if text.String() != want {
		return t, fmt.Errorf("%s answered %s, want %s", c.name, clip(text.String()), clip(want))
	}
	if !usage {
		return t, fmt.Errorf("%s: no usage chunk, though include_usage was asked for", c.name)
	}
	return t, nil
}

// messagesClient streams Anthropic Messages calls (POST /v1/messages) from the
// runtime's Anthropic front door.
type messagesClient struct {
	name string // names the side in errors
	hc   *http.Client
	url  string
	body []byte
}

// anthropicVersion is the anthropic-version header every call sends; the door
// requires one (spec/compat.md, "Anthropic Messages").
const anthropicVersion = "2023-06-01"

// newMessagesClient returns a client of the Messages endpoint url asking model for a
// streamed echo of text.
func newMessagesClient(name string, hc *http.Client, url, model, text string) (*messagesClient, error) {
	body, err := json.Marshal(map[string]any{
		"model":      model,
		"max_tokens": 256,
		"stream":     true,
		"messages":   []map[string]string{{"role": "user", "content": text}},
	})
	if err != nil {
		return nil, err
	}
	return &messagesClient{name: name, hc: hc, url: url, body: body}, nil
}

// messagesEvent is what call reads of one event of a Messages stream.
type messagesEvent struct {
	Type  string `json:"type"`
	Delta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"delta"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

// call streams one message until message_stop and checks it: the execution id header,
// every event one of the Messages stream's (an error event fails the call), each
// event's data of its own type, the text want assembled from the text deltas, and
// usage in message_delta. accepted is the time to the response head; the first output
// is the first text_delta.
func (c *messagesClient) call(ctx context.Context, want string) (callTimes, error) {
	var t callTimes
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return t, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("anthropic-version", anthropicVersion)
	start := time.Now()
	t.start = start
	resp, err := c.hc.Do(req)
	if err != nil {
		return t, fmt.Errorf("%s: %w", c.name, err)
	}
	t.accepted = time.Since(start)
	defer func() {
		_, _ = io.Copy(io.Discard, resp.Body) // lets the connection be reused
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return t, &statusError{name: c.name, status: resp.StatusCode, body: msg}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return t, fmt.Errorf("%s: Content-Type %q, want text/event-stream", c.name, ct)
	}
	if resp.Header.Get(executionIDHeader) == "" {
		return t, fmt.Errorf("%s: no %s header", c.name, executionIDHeader)
	}
	dec := sse.NewDecoder(resp.Body)
	var text strings.Builder
	usage := false
	for t.end == 0 {
		fr, err := dec.Next()
		if err != nil {
			return t, fmt.Errorf("%s: stream ended before message_stop: %w", c.name, err)
		}
		switch fr.Type {
		case "error":
			return t, fmt.Errorf("%s: the stream failed: %s", c.name, clip(fr.Data))
		case "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop", "ping":
		default:
			return t, fmt.Errorf("%s: an event of type %s, not one of a Messages stream", c.name, clip(fr.Type))
		}
		var ev messagesEvent
		if err := json.Unmarshal([]byte(fr.Data), &ev); err != nil {
			return t, fmt.Errorf("%s: decode %s: %w", c.name, fr.Type, err)
		}
		if ev.Type != fr.Type {
			return t, fmt.Errorf("%s: event %s carries data of type %s", c.name, fr.Type, clip(ev.Type))
		}
		switch fr.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" {
				if ev.Delta.Text != "" && t.firstOutput == 0 {
					t.firstOutput = time.Since(start)
				}
				text.WriteString(ev.Delta.Text)
			}
		case "message_delta":
			if ev.Usage != nil && ev.Usage.OutputTokens > 0 {
				usage = true
			}
		case "message_stop":
			t.end = time.Since(start)
		}
	}
	if text.String() != want {
		return t, fmt.Errorf("%s answered %s, want %s", c.name, clip(text.String()), clip(want))
	}
	if !usage {
		return t, fmt.Errorf("%s: no usage in message_delta", c.name)
	}
	return t, nil
}

// clip quotes s, shortened to its start and length when it is long.
func clip(s string) string {
	if len(s) <= 60 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:60], len(s))
}

// runConcurrent makes count calls from conc workers and returns their times in the
// order they were started. The first failure cancels the others and is returned.
func runConcurrent(ctx context.Context, conc, count int, call func(context.Context) (callTimes, error)) ([]callTimes, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([]callTimes, count)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, count) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count || ctx.Err() != nil {
					return
				}
				cctx, done := context.WithTimeout(ctx, callTimeout)
				t, err := call(cctx)
				done()
				if err != nil {
					cancel(err)
					return
				}
				out[i] = t
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a list of positive integers", s)
		}
		out = append(out, n)
	}
	return out, nil
}
