package protocol

import (
	"encoding/json"
	"testing"
)

// jsonStrings are strings that every escaping rule of encoding/json applies to.
var jsonStrings = []string{
	"", "plain text", `"quoted" \ back`, "<b>&amp;</b>", "line\nbreak\r\ttab\b\f",
	"\x00\x01\x1f\x7f", "caf\u00e9 \u2028 \u2029 \U0001F600", "bad \xff\xfe utf-8 \xe2\x82",
}

// The hand-written encoders write what encoding/json writes, byte for byte.
func TestAppendJSONString(t *testing.T) {
	for _, s := range jsonStrings {
		want, _ := json.Marshal(s)
		if got := AppendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendJSONString(%q) = %s, want %s", s, got[1:], want)
		}
	}
	for _, d := range []OutputDeltaData{{}, {Index: 7, Type: "text", Text: "hello"}, {Index: -3, Type: "<t>", Text: jsonStrings[6]}} {
		want, _ := json.Marshal(d)
		if got := AppendDelta(nil, d); string(got) != string(want) {
			t.Errorf("AppendDelta(%+v) = %s, want %s", d, got, want)
		}
	}
}

// FuzzAppendDelta: the output.delta encoder writes encoding/json's bytes for any value.
func FuzzAppendDelta(f *testing.F) {
	for i, s := range jsonStrings {
		f.Add(i, "text", s)
	}
	f.Fuzz(func(t *testing.T, index int, typ, text string) {
		d := OutputDeltaData{Index: index, Type: typ, Text: text}
		want, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendDelta(nil, d); string(got) != string(want) {
			t.Fatalf("AppendDelta(%+v) = %s, want %s", d, got, want)
		}
	})
}
