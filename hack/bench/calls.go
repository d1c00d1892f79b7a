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
	// accepted is when the runtime answered 202 (zero for a direct call).
	accepted time.Duration
	// firstOutput is when the first text arrived: the first content chunk (direct) or
	// the first output.delta event (runtime).
	firstOutput time.Duration
	// end is when the stream ended: data: [DONE] (direct) or the terminal event (runtime).
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

// directClient calls the demo provider's Chat Completions endpoint itself, with the
// body and headers the runtime's openai-compatible adapter sends.
type directClient struct {
	hc   *http.Client
	url  string
	body []byte
}

func newDirectClient(hc *http.Client, provider, model, text string) (*directClient, error) {
	body, err := json.Marshal(map[string]any{
		"model":          model,
		"messages":       []map[string]string{{"role": "user", "content": text}},
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	if err != nil {
		return nil, err
	}
	return &directClient{hc: hc, url: "http://" + provider + "/openai/v1/chat/completions", body: body}, nil
}

// call streams one completion until data: [DONE] and checks that its text is want.
func (d *directClient) call(ctx context.Context, want string) (callTimes, error) {
	var t callTimes
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return t, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+benchKey)
	start := time.Now()
	t.start = start
	resp, err := d.hc.Do(req)
	if err != nil {
		return t, fmt.Errorf("direct call: %w", err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, resp.Body) // lets the connection be reused
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return t, fmt.Errorf("direct call: %s: %s", resp.Status, msg)
	}
	dec := sse.NewDecoder(resp.Body)
	var text strings.Builder
	for {
		fr, err := dec.Next()
		if err != nil {
			return t, fmt.Errorf("direct call: stream ended before [DONE]: %w", err)
		}
		if fr.Data == "[DONE]" {
			t.end = time.Since(start)
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(fr.Data), &chunk); err != nil {
			return t, fmt.Errorf("direct call: decode chunk: %w", err)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" && t.firstOutput == 0 {
				t.firstOutput = time.Since(start)
			}
			text.WriteString(c.Delta.Content)
		}
	}
	if text.String() != want {
		return t, fmt.Errorf("direct call answered %s, want %s", clip(text.String()), clip(want))
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
