package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// frame is one event of a streamed answer: an optional event name and its data.
type frame struct {
	// event is the SSE "event:" field, empty to omit the line (OpenAI and Gemini style),
	// or Bedrock's :event-type header.
	event string
	// exception marks a Bedrock exception frame; event then names the exception type.
	exception bool
	// data is marshalled to JSON, except a rawData, which is written as is.
	data any
}

// rawData is frame data that is not JSON, such as OpenAI's "[DONE]".
type rawData string

// script is a whole scripted answer, split where the scenario may cut it.
type script struct {
	// prelude frames go out at once, before any generated content.
	prelude []frame
	// pieces are the generated content, one frame per piece, each after the pacing delay.
	pieces []frame
	// epilogue closes the answer; its last frame is the provider's terminal marker.
	epilogue []frame
}

// streamFormat is how play writes a stream: its content type and the bytes of one frame.
type streamFormat struct {
	contentType string
	// encode appends one frame to buf.
	encode func(buf *bytes.Buffer, f frame) error
}

// sseLF is text/event-stream as OpenAI and Anthropic write it, lines ending in "\n".
var sseLF = streamFormat{contentType: "text/event-stream", encode: func(buf *bytes.Buffer, f frame) error {
	return encodeSSE(buf, f, "\n")
}}

// sseCRLF is text/event-stream as Google writes it for alt=sse, lines ending in "\r\n",
// so a client that splits frames on "\n\n" alone fails here as it would against Google.
var sseCRLF = streamFormat{contentType: "text/event-stream", encode: func(buf *bytes.Buffer, f frame) error {
	return encodeSSE(buf, f, "\r\n")
}}

// play writes sc in format under scenario sn: with stall it stops after the first piece
// and holds the connection until the client leaves; with truncate it ends the response
// after the last piece, without the epilogue. It returns early when the client goes
// away or a write fails, so no goroutine outlives its request.
func play(w http.ResponseWriter, r *http.Request, format streamFormat, sc script, sn scenario, pace time.Duration) {
	h := w.Header()
	h.Set("Content-Type", format.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	ctx := r.Context()
	var buf bytes.Buffer
	send := func(f frame) bool {
		buf.Reset()
		if err := format.encode(&buf, f); err != nil {
			return false
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for _, f := range sc.prelude {
		if !send(f) {
			return
		}
	}
	for i, f := range sc.pieces {
		if sleep(ctx, pace) != nil || !send(f) {
			return
		}
		if sn.stall && i == 0 {
			<-ctx.Done()
			return
		}
	}
	if sn.truncate {
		return
	}
	for _, f := range sc.epilogue {
		if !send(f) {
			return
		}
	}
}

// encodeSSE appends f in the event-stream format to buf, ending each line with eol.
// Every payload is a single line (json.Marshal never emits a raw newline), so one data
// field suffices.
func encodeSSE(buf *bytes.Buffer, f frame, eol string) error {
	if f.event != "" {
		buf.WriteString("event: ")
		buf.WriteString(f.event)
		buf.WriteString(eol)
	}
	buf.WriteString("data: ")
	if raw, ok := f.data.(rawData); ok {
		buf.WriteString(string(raw))
	} else {
		b, err := json.Marshal(f.data)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	buf.WriteString(eol)
	buf.WriteString(eol)
	return nil
}

// respondJSON answers a non-streaming request with body after the pacing the streamed
// answer would have taken (pieces × pace). With stall it sends the headers and the first
// half of the body, then holds the connection until the client leaves; with truncate it
// sends that first half and ends the response.
func respondJSON(w http.ResponseWriter, r *http.Request, body any, sn scenario, pace time.Duration, pieces int) {
	ctx := r.Context()
	if sleep(ctx, pace*time.Duration(pieces)) != nil {
		return
	}
	b, err := json.Marshal(body)
	if err != nil {
		http.Error(w, "demoprovider: encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !sn.stall && !sn.truncate {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b) // a client that went away needs no answer
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b[:len(b)/2])
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	if sn.stall {
		<-ctx.Done()
	}
}
