package providerhttp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// streamChunk has the shapes a provider's stream unit has: nested objects, an array of
// them, optional (pointer) fields and a raw member.
type streamChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Model string           `json:"model"`
	Usage *struct{ N int } `json:"usage"`
	Error json.RawMessage  `json:"error"`
}

// DecodeChunk agrees with encoding/json on what providers send, including the lenient
// rules a stream relies on: invalid UTF-8 repaired to U+FFFD, the last duplicate
// member winning, names matched without regard to case, unknown members and nulls
// ignored.
func TestDecodeChunkAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"w0 "},"finish_reason":null}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`{"model":"m","choices":[],"usage":{"N":3},"error":{"message":"x"}}`,
		"{\"model\":\"a\\u00e9\xff\xfeb\",\"choices\":[{\"delta\":{\"content\":\"\xc3(\"}}]}",
		`{"model":"first","model":"last","choices":null}`,
		`{"MODEL":"upper","Choices":[{"Delta":{"Content":"x"},"FINISH_REASON":"stop"}]}`,
		`{"model":"m","extra":{"nested":[1,2,{"a":null}]},"choices":[{"index":1,"delta":{"content":null}}]}`,
	} {
		var want, got streamChunk
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("encoding/json refused %q: %v", in, err)
		}
		if err := DecodeChunk([]byte(in), &got); err != nil {
			t.Fatalf("DecodeChunk(%q): %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeChunk(%q) = %+v, want %+v", in, got, want)
		}
	}
	var c streamChunk
	if err := DecodeChunk([]byte("{\"model\":\"\xff\"}"), &c); err != nil || c.Model != "\uFFFD" {
		t.Errorf("invalid UTF-8: model %q, err %v; want U+FFFD", c.Model, err)
	}
}

// What is not JSON, or not of the field's type, is refused as encoding/json refuses it.
func TestDecodeChunkRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, in := range []string{
		``, `{`, `{"model":"m"`, `{"model":"m"} x`, `[1]`, `{"choices":[{"index":"0"}]}`,
		`{"model":1}`, `{"choices":{}}`, `{"model":"m",}`, `{'model':'m'}`,
	} {
		var a, b streamChunk
		if json.Unmarshal([]byte(in), &a) == nil {
			t.Fatalf("encoding/json accepted %q", in)
		}
		if err := DecodeChunk([]byte(in), &b); err == nil {
			t.Errorf("DecodeChunk(%q) accepted it", in)
		}
	}
}

// BenchmarkDecodeChunk compares encoding/json and DecodeChunk on a typical OpenAI chat
// chunk, decoded into one reused value as the adapters do.
func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_4d1a1e5e2b","choices":[{"index":0,"delta":{"content":" Hello there"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	for _, bc := range []struct {
		name   string
		decode func([]byte, any) error
	}{
		{"encoding-json", json.Unmarshal},
		{"DecodeChunk", DecodeChunk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var c streamChunk
			for b.Loop() {
				c = streamChunk{Choices: c.Choices[:0]}
				if err := bc.decode(data, &c); err != nil {
					b.Fatal(err)
				}
			}
			if !strings.HasPrefix(*c.Choices[0].Delta.Content, " Hello") {
				b.Fatal("decoded the wrong text")
			}
		})
	}
}

// The shared JSON text helpers of the adapters' requests and answers.
func TestJSONText(t *testing.T) {
	if got := PartText(&protocol.Part{Type: protocol.PartJSON, JSON: json.RawMessage("{ \"a\" : [1, 2] }")}); got != `{"a":[1,2]}` {
		t.Errorf("PartText(json) = %q", got)
	}
	if got := PartText(&protocol.Part{Type: protocol.PartText, Text: " as is "}); got != " as is " {
		t.Errorf("PartText(text) = %q", got)
	}
	if got := CompactJSON(json.RawMessage(" \n")); got != nil {
		t.Errorf("CompactJSON(blank) = %q, want nil", got)
	}
	if got := CompactJSON(json.RawMessage("{not json")); string(got) != "{not json" {
		t.Errorf("CompactJSON(not JSON) = %q, want it as given", got)
	}
	for in, want := range map[string]string{"": "{}", "{ }": "{}", `{"k": 1}`: `{"k":1}`, "{broken": "{}"} {
		if got := ObjectText(json.RawMessage(in)); got != want {
			t.Errorf("ObjectText(%q) = %q, want %q", in, got, want)
		}
	}
}

// AppendTurn merges consecutive items of one role into one turn.
func TestAppendTurn(t *testing.T) {
	type turn struct {
		Role  string
		Items []int
	}
	fields := func(t *turn) (*string, *[]int) { return &t.Role, &t.Items }
	var turns []turn
	for i, role := range []string{"user", "user", "assistant", "user"} {
		turns = AppendTurn(turns, role, i, fields)
	}
	want := []turn{{"user", []int{0, 1}}, {"assistant", []int{2}}, {"user", []int{3}}}
	if !reflect.DeepEqual(turns, want) {
		t.Errorf("turns %v, want %v", turns, want)
	}
}
