package anthropic

import (
	"encoding/json"
	"testing"
	"time"
)

// messagesBenchBody is a Messages request of the usual shape: a system prompt, a few turns
// with blocks and a tool use, one tool with a schema, sampling fields and metadata.
const messagesBenchBody = `{"model":"chat","max_tokens":512,"stream":true,"temperature":0.7,"top_p":0.9,` +
	`"system":"You are terse.","metadata":{"user_id":"u-1"},` +
	`"messages":[{"role":"user","content":[{"type":"text","text":"What is the weather in Paris?"}]},` +
	`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Paris"}}]},` +
	`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18C, cloudy"}]},` +
	`{"role":"assistant","content":"It is 18C."},{"role":"user","content":"And tomorrow?"}],` +
	`"tools":[{"name":"weather","description":"Weather by city",` +
	`"input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}`

// BenchmarkDecodeMessages measures decodeRequest on messagesBenchBody against
// encoding/json unmarshalling the same body into an untyped value, in alternating rounds
// of the same run, and reports the door's time as a ratio of that baseline's.
func BenchmarkDecodeMessages(b *testing.B) {
	body := []byte(messagesBenchBody)
	if _, err := decodeRequest(body); err != nil {
		b.Fatal(err)
	}
	var door, base time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if _, err := decodeRequest(body); err != nil {
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
