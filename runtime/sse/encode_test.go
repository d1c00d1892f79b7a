package sse

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAppendEvent(t *testing.T) {
	tests := []struct {
		name          string
		id, typ, data string
		want          string
	}{
		{"all fields", "7", "output.delta", `{"a":1}`, "id: 7\nevent: output.delta\ndata: {\"a\":1}\n\n"},
		{"data only", "", "", "x", "data: x\n\n"},
		{"empty data", "1", "", "", "id: 1\ndata: \n\n"},
		{"LF", "", "", "a\nb", "data: a\ndata: b\n\n"},
		{"CR", "", "", "a\rb", "data: a\ndata: b\n\n"},
		{"CRLF", "", "", "a\r\nb", "data: a\ndata: b\n\n"},
		{"CR CR LF", "", "", "a\r\r\nb", "data: a\ndata: \ndata: b\n\n"},
		{"LF CR", "", "", "a\n\rb", "data: a\ndata: \ndata: b\n\n"},
		{"trailing newline", "", "", "a\n", "data: a\ndata: \n\n"},
		{"leading space kept", " 1", " t", " x", "id:  1\nevent:  t\ndata:  x\n\n"},
		{"newlines in id and type sanitised", "1\n2\r", "a\r\nb", "x", "id: 1\uFFFD2\uFFFD\nevent: a\uFFFD\uFFFDb\ndata: x\n\n"},
		{"NUL in id sanitised, kept elsewhere", "1\x00", "t\x00", "x\x00", "id: 1\uFFFD\nevent: t\x00\ndata: x\x00\n\n"},
	}
	for _, tt := range tests {
		got := string(AppendEvent([]byte("prefix|"), tt.id, tt.typ, []byte(tt.data)))
		if diff := cmp.Diff("prefix|"+tt.want, got); diff != "" {
			t.Errorf("%s: AppendEvent mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestAppendComment(t *testing.T) {
	tests := []struct{ text, want string }{
		{"keep-alive", ": keep-alive\n\n"},
		{"", ": \n\n"},
		{"a\nb\r\nc\rd", ": a\n: b\n: c\n: d\n\n"},
	}
	for _, tt := range tests {
		if got := string(AppendComment(nil, tt.text)); got != tt.want {
			t.Errorf("AppendComment(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestAppendRetry(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{2 * time.Second, "retry: 2000\n\n"},
		{0, "retry: 0\n\n"},
		{1500 * time.Microsecond, "retry: 1\n\n"},
		{-time.Second, "retry: 0\n\n"},
	}
	for _, tt := range tests {
		if got := string(AppendRetry(nil, tt.d)); got != tt.want {
			t.Errorf("AppendRetry(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestEncodeDecodeStream(t *testing.T) {
	// A stream as the server writes it: a retry hint, events, keep-alives between them.
	var stream []byte
	stream = AppendRetry(stream, 2*time.Second)
	stream = AppendEvent(stream, "1", "execution.accepted", []byte(`{"sequence":1}`))
	stream = AppendComment(stream, "keep-alive")
	stream = AppendEvent(stream, "2", "output.delta", []byte("line one\nline two\r\nline three\rend\n"))
	stream = AppendEvent(stream, "", "", []byte("no id: keeps 2"))

	got := decodeAll(bytes.NewReader(stream))
	want := decodeResult{
		Events: []Event{
			{ID: "1", Type: "execution.accepted", Data: `{"sequence":1}`},
			{ID: "2", Type: "output.delta", Data: "line one\nline two\nline three\nend\n"},
			{ID: "2", Data: "no id: keeps 2"},
		},
		Err:         io.EOF,
		LastEventID: "2",
		Retry:       2 * time.Second,
		HasRetry:    true,
		Comments:    []string{"keep-alive"},
	}
	if diff := cmp.Diff(want, got, errorIs); diff != "" {
		t.Errorf("decoded stream mismatch (-want +got):\n%s", diff)
	}
}

// writeLog records each Write call separately.
type writeLog struct{ writes []string }

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func TestEncoderWritesOneFramePerCall(t *testing.T) {
	var w writeLog
	e := NewEncoder(&w)
	big := []byte(strings.Repeat("x", 2*retainBuffer))
	steps := []func() error{
		func() error { return e.WriteRetry(2 * time.Second) },
		func() error { return e.WriteEvent("1", "t", []byte("a\nb")) },
		func() error { return e.WriteEvent("2", "t", big) },
		func() error { return e.WriteComment("keep-alive") },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"retry: 2000\n\n",
		"id: 1\nevent: t\ndata: a\ndata: b\n\n",
		"id: 2\nevent: t\ndata: " + string(big) + "\n\n",
		": keep-alive\n\n",
	}
	if diff := cmp.Diff(want, w.writes); diff != "" {
		t.Errorf("writes mismatch (-want +got):\n%s", diff)
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	data := []byte(`{"execution_id":"exe_01J","sequence":7,"type":"output.delta","data":{"index":0,"type":"text","text":"Hello, world"}}`)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEvent(buf[:0], "7", "output.delta", data)
	}
}
