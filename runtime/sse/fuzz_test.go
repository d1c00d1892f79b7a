package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// FuzzRoundTrip checks that what AppendEvent writes decodes to what it was given. Exact
// equality holds for the values the encoder accepts as they are: valid UTF-8, no line
// breaks in id or type, no NUL in id, data with LF line endings. For other values it
// checks the documented transformations instead: sanitised id and type, CR and CRLF in
// data read back as LF, invalid UTF-8 read back as U+FFFD.
func FuzzRoundTrip(f *testing.F) {
	f.Add("1", "execution.accepted", []byte(`{"execution_id":"exe_1","sequence":1}`))
	f.Add("", "", []byte(""))
	f.Add(" 2", " message", []byte(" leading\nspaces\n"))
	f.Add("1\n2", "a\rb", []byte("x\r\ny\rz\n"))
	f.Add("\x00", "\x00", []byte("\x00"))
	f.Add("\xE2\x82", "\xFF", []byte("\xF0\x9F\x98\r\n\xED\xA0\x80"))
	f.Fuzz(func(t *testing.T, id, typ string, data []byte) {
		var stream []byte
		stream = AppendComment(stream, "keep-alive")
		stream = AppendEvent(stream, id, typ, data)
		// A second frame without an id must inherit the first one's.
		stream = AppendEvent(stream, "", "", []byte("next"))

		wantID := repair(sanitize(id, "\r\n\x00"))
		want := decodeResult{
			Events: []Event{
				{ID: wantID, Type: repair(sanitize(typ, "\r\n")), Data: repair(lfOnly(string(data)))},
				{ID: wantID, Data: "next"},
			},
			Err:         io.EOF,
			LastEventID: wantID,
			Comments:    []string{"keep-alive"},
		}
		accepted := utf8.ValidString(id) && utf8.ValidString(typ) && utf8.Valid(data) &&
			!strings.ContainsAny(id, "\r\n\x00") && !strings.ContainsAny(typ, "\r\n") &&
			!bytes.ContainsRune(data, '\r')
		if accepted {
			want.Events[0] = Event{ID: id, Type: typ, Data: string(data)}
		}
		for how, r := range map[string]io.Reader{
			"whole":    bytes.NewReader(stream),
			"bytewise": iotest.OneByteReader(bytes.NewReader(stream)),
		} {
			got := decodeAll(r)
			if diff := cmp.Diff(want, got, errorIs); diff != "" {
				t.Fatalf("%s: round trip of (%q, %q, %q) mismatch (-want +got):\n%s", how, id, typ, data, diff)
			}
		}
	})
}

// FuzzDecode checks that arbitrary input never panics, never yields more than the frame
// bound, always yields valid UTF-8 and an id without NUL, ends only with io.EOF or
// ErrFrameTooLarge, and decodes the same however the input is split into reads.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("data: hello\n\n"))
	f.Add([]byte("\xEF\xBB\xBFid: 1\r\nevent: t\r\ndata: a\r\ndata: b\r\n\r\n"))
	f.Add([]byte("data: a\r\rid\x00: x\n: c\nretry: 12a\n\n"))
	f.Add([]byte("data: " + strings.Repeat("y", 80) + "\n\n"))
	const limit = 64
	f.Fuzz(func(t *testing.T, in []byte) {
		ref := decodeAll(bytes.NewReader(in), WithMaxFrameSize(limit))
		if ref.Err != io.EOF && !errors.Is(ref.Err, ErrFrameTooLarge) { //nolint:errorlint // io.EOF itself, unwrapped, as readers return it
			t.Fatalf("unexpected error %v", ref.Err)
		}
		for _, ev := range ref.Events {
			// The id may come from an earlier frame, so it is bounded on its own.
			if len(ev.ID) > limit || len(ev.Type)+len(ev.Data) > limit {
				t.Fatalf("event over the frame bound: %+v", ev)
			}
			if !utf8.ValidString(ev.ID) || !utf8.ValidString(ev.Type) || !utf8.ValidString(ev.Data) {
				t.Fatalf("event not valid UTF-8: %+v", ev)
			}
			if strings.ContainsRune(ev.ID, 0) {
				t.Fatalf("id contains NUL: %q", ev.ID)
			}
		}
		for _, c := range ref.Comments {
			if len(c) > limit {
				t.Fatalf("comment over the frame bound: %q", c)
			}
		}
		alts := map[string]io.Reader{
			"bytewise": iotest.OneByteReader(bytes.NewReader(in)),
			"halves":   io.MultiReader(bytes.NewReader(in[:len(in)/2]), bytes.NewReader(in[len(in)/2:])),
		}
		for how, r := range alts {
			if diff := cmp.Diff(ref, decodeAll(r, WithMaxFrameSize(limit)), errorIs); diff != "" {
				t.Fatalf("%s: result differs from reading %q whole (-whole +%s):\n%s", how, in, how, diff)
			}
		}
	})
}

// sanitize writes every byte of bad in s as U+FFFD, as AppendEvent documents.
// It works on bytes: strings.Map would also rewrite invalid UTF-8 (byte by byte).
func sanitize(s, bad string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(bad, s[i]) >= 0 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// lfOnly rewrites CRLF and CR to LF: a decoder joins data lines with LF whatever ended them.
func lfOnly(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// repair is what the decoder's UTF-8 decoding does to s.
func repair(s string) string { return string(appendValidUTF8(nil, []byte(s))) }
