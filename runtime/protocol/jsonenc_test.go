package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestAppendEnvelope checks the hand-written envelope encoder against encoding/json: the
// same JSON value, on one line.
func TestAppendEnvelope(t *testing.T) {
	ts := time.Date(2026, 12, 2, 13, 0, 0, 123456000, time.UTC)
	for _, ev := range []Event{
		{ExecutionID: "exe_1", Sequence: 1, Timestamp: ts, Type: EventAccepted, Data: json.RawMessage(`{"ability":"chat","deadline_at":"2026-12-02T13:05:00Z"}`)},
		{ExecutionID: "exe_1", Sequence: 18446744073709551615, Timestamp: ts.Add(time.Nanosecond), Type: EventOutputDelta, Data: json.RawMessage(`{"index":0,"type":"text","text":"a\nb \"q\" <&> \u2028 ü"}`)},
		{ExecutionID: "exe_\"odd\\\x01\xff", Sequence: 2, Timestamp: ts, Type: "x.\ny", Data: json.RawMessage("{\n  \"spread\": [1,\r\n 2]\n}")},
		{ExecutionID: "exe_1", Sequence: 3, Timestamp: ts, Type: EventCompleted},
	} {
		got := AppendEnvelope(nil, &ev)
		if strings.ContainsAny(string(got), "\r\n") {
			t.Errorf("envelope spans lines: %s", got)
		}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		_ = json.Unmarshal(want, &b)
		if diff := cmp.Diff(b, a); diff != "" {
			t.Errorf("envelope differs from encoding/json (-want +got):\n%s", diff)
		}
	}
}
