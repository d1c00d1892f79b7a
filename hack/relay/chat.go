package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// chatRequest is the part of an OpenAI Chat Completions request the translating mode
// reads: text messages, streamed. The caller's model name is only checked to be there,
// never sent upstream, as a front door does; the upstream model is --model.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// upstreamMessage is one message of the upstream request.
type upstreamMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatCompletions is POST /v1/chat/completions, one exchange: the upstream's stream is
// translated chunk by chunk onto the response, then data: [DONE]. A failure before the
// stream started is an OpenAI error with its status; after, one error frame and no
// [DONE], as spec/compat.md asks of the front door, so that a client never takes a cut
// answer for a whole one.
func (r *relay) chatCompletions(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			chatError(w, http.StatusRequestEntityTooLarge, "The request body is too large.")
			return
		}
		chatError(w, http.StatusBadRequest, "The request body could not be read.")
		return
	}
	var in chatRequest
	if err := providerhttp.DecodeChunk(body, &in); err != nil {
		chatError(w, http.StatusBadRequest, "The request is not a Chat Completions request with text messages.")
		return
	}
	if in.Model == "" || len(in.Messages) == 0 {
		chatError(w, http.StatusBadRequest, "model and messages are required.")
		return
	}
	if !in.Stream {
		chatError(w, http.StatusBadRequest, "Only streamed calls are relayed.")
		return
	}
	msgs := make([]upstreamMessage, len(in.Messages))
	for i, m := range in.Messages {
		msgs[i] = upstreamMessage(m)
	}
	// The body the runtime's openai-compatible adapter sends: usage always asked for,
	// passed on only when the caller asked for it.
	upBody, err := json.Marshal(map[string]any{
		"model":          r.model,
		"messages":       msgs,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	if err != nil {
		chatError(w, http.StatusInternalServerError, "The upstream request could not be built.")
		return
	}
	up, err := http.NewRequestWithContext(req.Context(), http.MethodPost, r.url, bytes.NewReader(upBody))
	if err != nil {
		chatError(w, http.StatusInternalServerError, "The upstream request could not be built.")
		return
	}
	up.Header.Set("Content-Type", "application/json")
	up.Header.Set("Accept", "text/event-stream")
	up.Header.Set("Authorization", r.auth)
	resp, err := r.hc.Do(up)
	if err != nil {
		fmt.Fprintf(r.log, "relay: chat completion: %v\n", err)
		chatError(w, http.StatusBadGateway, "The provider call failed.")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(r.log, "relay: chat completion: upstream answered %s\n", resp.Status)
		chatError(w, http.StatusBadGateway, "The provider call failed.")
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	out := &chunkWriter{w: w, rc: http.NewResponseController(w)}
	dec := sse.NewDecoder(&flushingReader{r: resp.Body, out: out})
	defer dec.Release()

	// Every chunk starts the same: id, object, created and model are the call's.
	prefix := []byte(`{"id":"chatcmpl-relay`)
	prefix = strconv.AppendUint(prefix, r.next.Add(1), 10)
	prefix = append(prefix, `","object":"chat.completion.chunk","created":`...)
	prefix = strconv.AppendInt(prefix, time.Now().Unix(), 10)
	prefix = append(prefix, `,"model":`...)
	prefix = protocol.AppendJSONString(prefix, r.model)
	prefix = append(prefix, `,"choices":`...)
	wantUsage := in.StreamOptions != nil && in.StreamOptions.IncludeUsage
	roleSent := false
	var c chunk
	for {
		_, data, err := dec.NextData()
		if err != nil {
			fmt.Fprintf(r.log, "relay: chat completion: upstream stream ended before [DONE]: %v\n", err)
			out.frame([]byte(`{"error":{"message":"The provider stream ended early.","type":"server_error","param":null,"code":"provider_unavailable"}}`))
			_ = out.flush()
			return
		}
		if string(data) == "[DONE]" {
			out.frame([]byte("[DONE]"))
			_ = out.flush()
			return
		}
		c = chunk{}
		if err := providerhttp.DecodeChunk(data, &c); err != nil {
			fmt.Fprintf(r.log, "relay: chat completion: %v\n", err)
			out.frame([]byte(`{"error":{"message":"The provider sent a chunk that could not be read.","type":"server_error","param":null,"code":"provider_error"}}`))
			_ = out.flush()
			return
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content == "" && ch.FinishReason == "" && roleSent {
				continue
			}
			b := append(out.buf, "data: "...)
			b = append(b, prefix...)
			b = append(b, `[{"index":0,"delta":{`...)
			if !roleSent {
				b = append(b, `"role":"assistant","content":`...)
				roleSent = true
				b = protocol.AppendJSONString(b, ch.Delta.Content)
			} else if ch.Delta.Content != "" {
				b = append(b, `"content":`...)
				b = protocol.AppendJSONString(b, ch.Delta.Content)
			}
			b = append(b, `},"finish_reason":`...)
			if ch.FinishReason != "" {
				b = protocol.AppendJSONString(b, ch.FinishReason)
			} else {
				b = append(b, "null"...)
			}
			out.buf = append(b, "}]}\n\n"...)
		}
		if u := c.Usage; u != nil && wantUsage {
			b := append(out.buf, "data: "...)
			b = append(b, prefix...)
			b = append(b, `[],"usage":{"prompt_tokens":`...)
			b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
			b = append(b, `,"completion_tokens":`...)
			b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
			b = append(b, `,"total_tokens":`...)
			b = strconv.AppendInt(b, int64(u.PromptTokens+u.CompletionTokens), 10)
			out.buf = append(b, "}}\n\n"...)
		}
	}
}

// chunkWriter holds the frames translated since the last flush.
type chunkWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	buf []byte
}

// frame adds one data frame.
func (c *chunkWriter) frame(data []byte) {
	c.buf = append(c.buf, "data: "...)
	c.buf = append(c.buf, data...)
	c.buf = append(c.buf, "\n\n"...)
}

// flush writes the pending frames in one write and flush.
func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		return err
	}
	return c.rc.Flush()
}

// flushingReader flushes the translated frames before each read of the upstream's
// body: the chunks of one read go out in one write and flush, as the execution relay
// writes each batch of ready events, and none waits for upstream bytes not sent yet.
type flushingReader struct {
	r   io.Reader
	out *chunkWriter
}

// Read flushes the pending frames, then reads the upstream's body.
func (f *flushingReader) Read(p []byte) (int, error) {
	if err := f.out.flush(); err != nil {
		return 0, err // the caller left: stop reading upstream
	}
	return f.r.Read(p)
}

// chatError answers an OpenAI-shaped error with a fixed message.
func chatError(w http.ResponseWriter, status int, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	b := []byte(`{"error":{"message":`)
	b = protocol.AppendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = protocol.AppendJSONString(b, typ)
	b = append(b, `,"param":null,"code":null}}`...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
