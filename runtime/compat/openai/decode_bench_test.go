package openai

import (
	"encoding/json"
	"testing"
	"time"
)

// chatBenchBody is a Chat Completions request of the usual shape: a system prompt, a few
// turns with parts and a tool call, one tool with a schema, sampling fields and metadata.
const chatBenchBody = `{"model":"chat","stream":true,"stream_options":{"include_usage":true},` +
	`"temperature":0.7,"top_p":0.9,"max_completion_tokens":512,"metadata":{"team":"a","run":"b"},` +
	`"messages":[{"role":"system","content":"You are terse."},` +
	`{"role":"user","content":[{"type":"text","text":"What is the weather in Paris?"}]},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_1","content":"18C, cloudy"},` +
	`{"role":"user","content":"And tomorrow?"}],` +
	`"tools":[{"type":"function","function":{"name":"weather","description":"Weather by city",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}`

// BenchmarkDecodeChatVersusUnmarshal measures decodeChat on chatBenchBody against encoding/json
// unmarshalling the same body into an untyped value, in alternating rounds of the same
// run, and reports the door's time as a ratio of that baseline's.
func BenchmarkDecodeChatVersusUnmarshal(b *testing.B) {
	body := []byte(chatBenchBody)
	if _, err := decodeChat(body); err != nil {
		b.Fatal(err)
	}
	var door, base time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := decodeChat(body); err != nil {
			b.Fatal(err)
		}
		door += time.Since(start)
		start = time.Now()
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
		base += time.Since(start)
	}
	b.ReportMetric(float64(door.Nanoseconds())/float64(b.N), "door-ns/op")
	b.ReportMetric(float64(door)/float64(base), "door/unmarshal")
}

// responsesBenchBody is a Responses request of the usual shape: instructions, a few input
// items with parts and a function call and its output, one tool with a schema, sampling
// fields and metadata.
const responsesBenchBody = `{"model":"chat","stream":true,"instructions":"You are terse.",` +
	`"temperature":0.7,"top_p":0.9,"max_output_tokens":512,"metadata":{"team":"a","run":"b"},` +
	`"input":[{"role":"user","content":[{"type":"input_text","text":"What is the weather in Paris?"}]},` +
	`{"type":"function_call","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}"},` +
	`{"type":"function_call_output","call_id":"call_1","output":"18C, cloudy"},` +
	`{"role":"user","content":"And tomorrow?"}],` +
	`"tools":[{"type":"function","name":"weather","description":"Weather by city",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}`

// BenchmarkDecodeResponsesVersusUnmarshal measures decodeResponsesRequest on
// responsesBenchBody against encoding/json unmarshalling the same body into an untyped
// value, in alternating rounds of the same run, and reports the door's time as a ratio
// of that baseline's.
func BenchmarkDecodeResponsesVersusUnmarshal(b *testing.B) {
	body := []byte(responsesBenchBody)
	if _, err := decodeResponsesRequest(body); err != nil {
		b.Fatal(err)
	}
	var door, base time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := decodeResponsesRequest(body); err != nil {
			b.Fatal(err)
		}
		door += time.Since(start)
		start = time.Now()
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
		base += time.Since(start)
	}
	b.ReportMetric(float64(door.Nanoseconds())/float64(b.N), "door-ns/op")
	b.ReportMetric(float64(door)/float64(base), "door/unmarshal")
}
