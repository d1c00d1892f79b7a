package protocol

import (
	"encoding/json"
	"errors"
	"testing"
)

// CheckData refuses, with ErrInvalidData, data that does not decode as its type's payload,
// for every type that is folded, and looks at no other type's data.
func TestCheckData(t *testing.T) {
	tests := []struct {
		typ  EventType
		data string // "nil": no data
		ok   bool
	}{
		{EventOutputDelta, `{"index":0,"type":"text","text":"Hel"}`, true},
		{EventOutputDelta, `{"index":-3,"type":"image","text":"x","extra":[1]}`, true}, // the engine's rules are not the store's
		{EventOutputDelta, "nil", false},
		{EventOutputDelta, `"text"`, false},
		{EventOutputDelta, `{"index":"0","text":"x"}`, false},
		{EventOutputDelta, `{"index":0,"text":"x"`, false},
		{EventToolCallStarted, `{"index":1,"call_id":"","name":""}`, true},
		{EventToolCallStarted, `{"index":1.5,"call_id":"c","name":"n"}`, false},
		{EventToolCallArgsDelta, `{"call_id":"c","delta":"{\"a\":"}`, true},
		{EventToolCallArgsDelta, `{"call_id":"c","delta":[]}`, false},
		{EventOutputResult, `{"result":{"a":1},"artifacts":[{"uri":"u","media_type":"m"}]}`, true},
		{EventOutputResult, `{"artifacts":{}}`, false},
		{EventOutputResult, `{"artifacts":[{"uri":"u","media_type":"m","size_bytes":"1"}]}`, false},
		{EventUsageReported, `{"usage":[{"unit":"requests","quantity":1,"source":"runtime"}]}`, true},
		{EventUsageReported, `{"usage":[{"quantity":1e400}]}`, false},
		{EventRouteSelected, `{"attempt":1,"deployment":"ai/a","provider":"openai","model":"m"}`, true},
		{EventRouteSelected, "nil", false},
		{EventRouteSelected, `[]`, false},
		{EventCompleted, `{}`, true},
		{EventCompleted, `null`, true},
		{EventCompleted, "nil", false},
		{EventCompleted, `{"finish_reason":1}`, false},
		{EventFailed, `{"error":"failed"}`, false},
		// Types that are not folded take any data, or none.
		{EventAccepted, `{"ability":1}`, true},
		{EventProgress, "nil", true},
		{EventAttemptFailed, `"not an object"`, true},
		{"x.future.event", `not JSON`, true},
	}
	for _, tc := range tests {
		var data []byte
		if tc.data != "nil" {
			data = []byte(tc.data)
		}
		err := CheckData(tc.typ, data)
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckData(%s, %s): %v, want nil", tc.typ, tc.data, err)
		case !tc.ok && !errors.Is(err, ErrInvalidData):
			t.Errorf("CheckData(%s, %s): %v, want ErrInvalidData", tc.typ, tc.data, err)
		}
	}
}

// FuzzCheckData: CheckData admits exactly the data Apply folds, for every type, and for
// route.selected (which only the stores fold, into the execution's status) exactly the
// data encoding/json decodes into its payload.
func FuzzCheckData(f *testing.F) {
	types := []EventType{
		EventAccepted, EventRouteSelected, EventAttemptFailed, EventOutputDelta, EventToolCallStarted,
		EventToolCallArgsDelta, EventProgress, EventOutputResult, EventUsageReported, EventCompleted,
		EventFailed, "x.future.event",
	}
	for i, s := range []string{
		`{"index":0,"type":"text","text":"hello"}`, `{"call_id":"c1","index":0,"name":"f"}`,
		`{"call_id":"c1","delta":"{\"a\":"}`, `{"result":{"k":[1,2]},"artifacts":[]}`,
		`{"usage":[{"unit":"input_tokens","quantity":12,"source":"provider"}]}`,
		`{"attempt":1,"deployment":"team/gpt","provider":"openai","model":"m"}`, `{"finish_reason":"stop"}`,
		`{"error":{"code":"rate_limited","message":"slow down","retryable":true}}`,
		`{"index":"1"}`, `{"usage":{}}`, `[]`, `null`, `{`, ``, "{\"text\":\"\xff\"}",
	} {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, n uint8, data []byte) {
		typ := types[int(n)%len(types)]
		err := CheckData(typ, data)
		if err != nil && !errors.Is(err, ErrInvalidData) {
			t.Fatalf("CheckData(%s, %q): %v, not ErrInvalidData", typ, data, err)
		}
		var want error
		if typ == EventRouteSelected {
			var d RouteSelectedData
			want = json.Unmarshal(data, &d)
		} else {
			s := NewSnapshot("exe_1")
			want = s.Apply(Event{ExecutionID: "exe_1", Sequence: 1, Type: typ, Data: data})
		}
		if (err == nil) != (want == nil) {
			t.Fatalf("CheckData(%s, %q): %v, but the fold says %v", typ, data, err, want)
		}
	})
}
