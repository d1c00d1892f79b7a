package bedrock_test

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
)

// Replay tests: each upstream answers with a ConverseStream script from
// testdata/streams, encoded with the SDK's event-stream Encoder, and the test asserts
// the exact event data the adapter emitted and the snapshot those events materialize to.

func TestStreamText(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "text.json"), "x-amzn-RequestId", "6e3c1b1a-9b8f-4a51-8c8f-1f2e3d4c5b6a"))
	res := run(t, deployment(up.URL, streaming), hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	wantUsage := []protocol.Usage{enginetest.ProviderUsage(protocol.UnitInputTokens, 12), enginetest.ProviderUsage(protocol.UnitOutputTokens, 9)}
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Hello"),
		enginetest.TextDelta("! How can I help?"),
		enginetest.UsageReported(wantUsage...),
	})
	snap := materialize(t, res)
	if snap.Status != protocol.StatusCompleted || snap.FinishReason != "end_turn" || len(snap.Output) != 1 ||
		snap.Output[0].Text != "Hello! How can I help?" || !cmp.Equal(snap.Usage, wantUsage) {
		t.Errorf("snapshot = %+v", snap)
	}
	c := up.only(t)
	checkPlacement(t, c)
	if got := c.Header.Get("Accept"); got != bedrock.ContentTypeEventStream {
		t.Errorf("Accept = %q", got)
	}
	jsonEqual(t, c.Body, `{"messages":[{"role":"user","content":[{"text":"Hello"}]}]}`)
}

func TestStreamToolUse(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "tool_use.json")))
	d := deployment(up.URL, streaming, withCaps(protocol.CapTools))
	req := decode(t, `{"ability":"chat","input":[{"type":"text","text":"Weather in Paris?"},
		{"type":"tool","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`)
	res := run(t, d, req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	const id = "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"
	// The empty first fragment carries nothing and is skipped.
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Let me check"),
		enginetest.TextDelta(" the weather."),
		enginetest.ToolStarted(0, id, "get_weather"),
		enginetest.ArgsDelta(id, `{"city":`),
		enginetest.ArgsDelta(id, ` "Par`),
		enginetest.ArgsDelta(id, `is"}`),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 402), enginetest.ProviderUsage(protocol.UnitOutputTokens, 57)),
	})
	snap := materialize(t, res)
	if snap.FinishReason != "tool_use" || len(snap.ToolCalls) != 1 || snap.ToolCalls[0].Arguments != `{"city": "Paris"}` ||
		snap.ToolCalls[0].Name != "get_weather" || snap.Output[0].Text != "Let me check the weather." {
		t.Errorf("snapshot = %+v", snap)
	}
}

func TestStreamToolWithoutInput(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "tool_no_input.json")))
	req := decode(t, `{"ability":"chat","input":[{"type":"text","text":"Time?"},{"type":"tool","name":"get_time","parameters":{}}]}`)
	res := run(t, deployment(up.URL, streaming, withCaps(protocol.CapTools)), req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	const id = "tooluse_GetTime0000000000001"
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.ToolStarted(0, id, "get_time"),
		enginetest.ArgsDelta(id, "{}"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 310), enginetest.ProviderUsage(protocol.UnitOutputTokens, 31)),
	})
}

func TestStreamUsageWithCache(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "cache_usage.json")))
	res := run(t, deployment(up.URL, streaming), hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("The major themes"),
		enginetest.TextDelta(" are pride and prejudice."),
		enginetest.UsageReported(
			enginetest.ProviderUsage(protocol.UnitInputTokens, 21),
			enginetest.ProviderUsage(protocol.UnitOutputTokens, 393),
			enginetest.ProviderUsage(protocol.UnitCacheReadTokens, 2048),
			enginetest.ProviderUsage(protocol.UnitCacheWriteTokens, 188086),
		),
	})
}

// TestStreamReasoningIgnored: reasoningContent deltas (text and signature) are not
// output of this protocol; the answer's text is.
func TestStreamReasoningIgnored(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "reasoning.json")))
	res := run(t, deployment(up.URL, streaming), hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Hi!"),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 40), enginetest.ProviderUsage(protocol.UnitOutputTokens, 22)),
	})
}

// TestStreamWithoutMetadata: messageStop is the terminal marker; a stream that ends
// after it without metadata succeeds, without usage.
func TestStreamWithoutMetadata(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "no_metadata.json")))
	res := run(t, deployment(up.URL, streaming), hello(t))
	if res.err != nil || res.outcome.FinishReason != "max_tokens" {
		t.Fatalf("Execute = %+v, %v", res.outcome, res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{enginetest.TextDelta("Hi")})
}

// TestStreamStallAfterStop: a stream that stalls after messageStop ends the attempt
// successfully once the grace for the metadata has passed, well before the attempt's
// context would.
func TestStreamStallAfterStop(t *testing.T) {
	defer bedrock.SetMetadataGrace(50 * time.Millisecond)()
	body := script(t, "no_metadata.json")
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
		_, _ = w.Write(body)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	res := run(t, deployment(up.URL, streaming), hello(t))
	if res.err != nil || res.outcome.FinishReason != "max_tokens" {
		t.Fatalf("Execute = %+v, %v", res.outcome, res.err)
	}
	if res.elapsed > 5*time.Second {
		t.Errorf("took %s", res.elapsed)
	}
}

func TestStreamGuardrail(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "guardrail.json"), "x-amzn-RequestId", "req-guardrail-1"))
	res := run(t, deployment(up.URL, streaming), hello(t))
	diffEvents(t, res.events, []enginetest.Emitted{
		enginetest.TextDelta("Sorry, the model cannot answer this question."),
		enginetest.UsageReported(enginetest.ProviderUsage(protocol.UnitInputTokens, 25), enginetest.ProviderUsage(protocol.UnitOutputTokens, 0)),
	})
	got := asError(t, res.err)
	want := &protocol.Error{Code: protocol.CodeContentFiltered, Message: got.Message,
		ProviderError: &protocol.ProviderError{Provider: "bedrock", Code: "guardrail_intervened", RequestID: "req-guardrail-1"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("error mismatch (-want +got):\n%s", d)
	}
}

// TestStreamExceptions: an exception frame maps by the HTTP status AWS documents for its
// type; before output it is retryable exactly when that status is, after output never.
func TestStreamExceptions(t *testing.T) {
	for _, tc := range []struct {
		typ       string
		code      protocol.Code
		retryable bool
	}{
		{"throttlingException", protocol.CodeRateLimited, true},
		{"serviceUnavailableException", protocol.CodeProviderUnavailable, true},
		{"internalServerException", protocol.CodeProviderUnavailable, true},
		{"modelStreamErrorException", protocol.CodeProviderUnavailable, true},
		{"modelTimeoutException", protocol.CodeProviderTimeout, true},
		{"validationException", protocol.CodeInvalidRequest, false},
		{"someFutureException", protocol.CodeProviderUnavailable, true},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			exc := bedrock.Exception(tc.typ, `{"message":"something went wrong"}`)
			for _, output := range []bool{false, true} {
				var fs []bedrock.Frame
				if output {
					fs = append(fs, bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"partial"}}`))
				}
				up := newUpstream(t, streamReply(frames(t, append(fs, exc)...), "x-amzn-RequestId", "req-1"))
				res := run(t, deployment(up.URL, streaming), hello(t))
				pe := asError(t, res.err)
				wantRetryable := tc.retryable && !output
				if pe.Code != tc.code || pe.Retryable != wantRetryable || pe.RetryAfterMs != 0 {
					t.Errorf("output %v: error %+v, want %s retryable %v", output, pe, tc.code, wantRetryable)
				}
				if pe.ProviderError == nil || pe.ProviderError.Type != tc.typ || pe.ProviderError.HTTPStatus != 0 || pe.ProviderError.RequestID != "req-1" {
					t.Errorf("provider_error = %+v", pe.ProviderError)
				}
				if strings.Contains(pe.Message, "went wrong") {
					t.Errorf("message %q echoes the provider's", pe.Message)
				}
			}
		})
	}
	t.Run("error message type", func(t *testing.T) {
		up := newUpstream(t, streamReply(frames(t, bedrock.Frame{Error: "InternalFailure"})))
		res := run(t, deployment(up.URL, streaming), hello(t))
		if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable || pe.ProviderError.Type != "InternalFailure" {
			t.Errorf("error %+v", pe)
		}
	})
}

func TestStreamThrottledScripts(t *testing.T) {
	for _, tc := range []struct {
		file      string
		events    []enginetest.Emitted
		retryable bool
	}{
		{file: "throttled.json", retryable: true},
		{file: "throttled_after_output.json", events: []enginetest.Emitted{enginetest.TextDelta("Hello")}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			up := newUpstream(t, streamReply(script(t, tc.file)))
			res := run(t, deployment(up.URL, streaming), hello(t))
			diffEvents(t, res.events, tc.events)
			if pe := asError(t, res.err); pe.Code != protocol.CodeRateLimited || pe.Retryable != tc.retryable {
				t.Errorf("error %+v, want rate_limited retryable %v", pe, tc.retryable)
			}
		})
	}
}

func TestStreamTruncated(t *testing.T) {
	for _, tc := range []struct {
		name      string
		body      []byte
		events    []enginetest.Emitted
		retryable bool
	}{
		{name: "before output", body: script(t, "truncated_before_output.json"), retryable: true},
		{name: "after output", body: script(t, "truncated_after_output.json"), events: []enginetest.Emitted{enginetest.TextDelta("Hello")}},
		{name: "inside a frame", body: script(t, "truncated_after_output.json")[:40], retryable: true},
		{name: "empty body", retryable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, streamReply(tc.body))
			res := run(t, deployment(up.URL, streaming), hello(t))
			diffEvents(t, res.events, tc.events)
			if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || pe.Retryable != tc.retryable {
				t.Errorf("error %+v, want provider_unavailable retryable %v", pe, tc.retryable)
			}
		})
	}
}

// TestStreamBadChecksum: a frame whose CRC does not match (one flipped byte, in the
// payload or the prelude) ends the attempt provider_unavailable, retryable only before
// output.
func TestStreamBadChecksum(t *testing.T) {
	good := frames(t, bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"partial"}}`))
	stop := frames(t, bedrock.Event("messageStop", `{"stopReason":"end_turn"}`))
	flip := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		return c
	}
	for _, tc := range []struct {
		name      string
		body      []byte
		events    []enginetest.Emitted
		retryable bool
	}{
		{name: "payload byte, first frame", body: append(flip(good, len(good)-10), stop...), retryable: true},
		{name: "message CRC byte, after output", body: append(append([]byte(nil), good...), flip(stop, len(stop)-1)...),
			events: []enginetest.Emitted{enginetest.TextDelta("partial")}},
		{name: "prelude byte", body: append(flip(good, 5), stop...), retryable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, streamReply(tc.body))
			res := run(t, deployment(up.URL, streaming), hello(t))
			diffEvents(t, res.events, tc.events)
			pe := asError(t, res.err)
			if pe.Code != protocol.CodeProviderUnavailable || pe.Retryable != tc.retryable || pe.Message != "the provider's response could not be read" {
				t.Errorf("error %+v, want provider_unavailable retryable %v", pe, tc.retryable)
			}
		})
	}
}

// TestStreamHugeFrame: a prelude that declares a 10 MB frame is refused after its 12
// bytes — the frame is never read, let alone buffered — and the attempt ends
// provider_unavailable, retryable, with nothing emitted.
func TestStreamHugeFrame(t *testing.T) {
	const size = 10 << 20
	var prelude [12]byte
	binary.BigEndian.PutUint32(prelude[0:4], size)
	binary.BigEndian.PutUint32(prelude[4:8], 0)
	binary.BigEndian.PutUint32(prelude[8:12], crc32.ChecksumIEEE(prelude[:8]))
	written := make(chan int, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
		_, _ = w.Write(prelude[:])
		chunk := make([]byte, 64<<10)
		n := len(prelude)
		for n < size && r.Context().Err() == nil {
			k, err := w.Write(chunk)
			n += k
			if err != nil {
				break
			}
			w.(http.Flusher).Flush()
		}
		written <- n
	})
	res := run(t, deployment(up.URL, streaming), hello(t))
	diffEvents(t, res.events, nil)
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("error %+v, want provider_unavailable retryable", pe)
	}
	up.CloseClientConnections()
	select {
	case n := <-written:
		if n >= size {
			t.Errorf("the upstream wrote all %d bytes: the adapter read the whole frame", n)
		}
	case <-time.After(testTimeout):
		t.Error("the upstream kept writing")
	}
}

// TestStreamStalled: a stream that sends headers and then nothing ends when the attempt's
// context does.
func TestStreamStalled(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res := runCtx(t, ctx, deployment(up.URL, streaming), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderTimeout {
		t.Errorf("error %+v, want provider_timeout", pe)
	}
	if res.elapsed > 5*time.Second {
		t.Errorf("took %s", res.elapsed)
	}
}

// TestStreamInvalidUTF8: invalid UTF-8 inside a text delta's JSON string becomes U+FFFD;
// the output stays valid UTF-8.
func TestStreamInvalidUTF8(t *testing.T) {
	body := frames(t,
		bedrock.Event("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"ok\xff\xfe!\"}}"),
		bedrock.Event("messageStop", `{"stopReason":"end_turn"}`))
	up := newUpstream(t, streamReply(body))
	res := run(t, deployment(up.URL, streaming), hello(t))
	if res.err != nil {
		t.Fatal(res.err)
	}
	diffEvents(t, res.events, []enginetest.Emitted{enginetest.TextDelta("ok\uFFFD\uFFFD!")})
}

// TestStreamIdentifiersChecked: a tool call whose id or name is not an identifier (or
// echoes the credential) is an unreadable answer, not an event; a stop reason that is
// not an identifier is dropped.
func TestStreamIdentifiersChecked(t *testing.T) {
	start := func(id, name string) bedrock.Frame {
		return bedrock.Event("contentBlockStart", `{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"`+id+`","name":"`+name+`"}}}`)
	}
	for name, f := range map[string]bedrock.Frame{
		"id with spaces":       start("tool use 1", "get_weather"),
		"empty id":             start("", "get_weather"),
		"name with a dot":      start("tooluse_1", "get.weather"),
		"id echoing the key":   start(apiKeyCanary, "get_weather"),
		"name echoing the key": start("tooluse_1", apiKeyCanary),
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, streamReply(frames(t, f, bedrock.Event("messageStop", `{"stopReason":"tool_use"}`))))
			res := run(t, deployment(up.URL, streaming, withCaps(protocol.CapTools), withCredential(apiKeyCanary)), hello(t))
			diffEvents(t, res.events, nil)
			if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable {
				t.Errorf("error %+v", pe)
			}
		})
	}
	t.Run("stop reason", func(t *testing.T) {
		up := newUpstream(t, streamReply(frames(t, bedrock.Event("messageStop", `{"stopReason":"end turn; see https://evil.example"}`))))
		res := run(t, deployment(up.URL, streaming), hello(t))
		if res.err != nil || res.outcome.FinishReason != "" {
			t.Errorf("Execute = %+v, %v", res.outcome, res.err)
		}
	})
}
