package sse

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// decodeResult is everything observable from decoding one stream.
type decodeResult struct {
	Events      []Event
	Err         error
	LastEventID string
	Retry       time.Duration
	HasRetry    bool
	Comments    []string
}

// decodeAll reads r to its first error.
func decodeAll(r io.Reader, opts ...Option) decodeResult {
	var res decodeResult
	opts = append(opts, WithComments(func(text string) { res.Comments = append(res.Comments, text) }))
	d := NewDecoder(r, opts...)
	for {
		ev, err := d.Next()
		if err != nil {
			res.Err = err
			break
		}
		res.Events = append(res.Events, ev)
	}
	res.LastEventID = d.LastEventID()
	res.Retry, res.HasRetry = d.Retry()
	return res
}

// readers returns the ways a test feeds one input to the decoder: in one piece, one byte
// per read, with the data and io.EOF in the same read, and split into two reads at every
// offset, so that every line ending lands on a read boundary at least once.
func readers(in string) map[string]func() io.Reader {
	m := map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(in) },
		"bytewise": func() io.Reader { return iotest.OneByteReader(strings.NewReader(in)) },
		"dataerr":  func() io.Reader { return iotest.DataErrReader(strings.NewReader(in)) },
	}
	for i := 1; i < len(in); i++ {
		m["split"+strconv.Itoa(i)] = func() io.Reader {
			return io.MultiReader(strings.NewReader(in[:i]), strings.NewReader(in[i:]))
		}
	}
	return m
}

// lineEndings rewrites an input written with LF to each line ending the format allows.
var lineEndings = map[string]func(string) string{
	"LF":   func(s string) string { return s },
	"CR":   func(s string) string { return strings.ReplaceAll(s, "\n", "\r") },
	"CRLF": func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") },
}

// errorIs compares errors by identity in the errors.Is sense, for cmp.Diff.
var errorIs = cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) || errors.Is(b, a) })

func TestDecoder(t *testing.T) {
	long := strings.Repeat("x", 40)
	tests := []struct {
		name string
		in   string // written with LF; rewritten to CR and CRLF unless mixed is set
		// mixed marks inputs that already combine line endings on purpose.
		mixed bool
		opts  []Option
		want  decodeResult // Err defaults to io.EOF
	}{
		{name: "empty stream", in: ""},
		{name: "only blank lines", in: "\n\n\n"},
		{
			name: "one event",
			in:   "data: hello\n\n",
			want: decodeResult{Events: []Event{{Data: "hello"}}},
		},
		{
			name: "all fields",
			in:   "id: 7\nevent: output.delta\ndata: {\"a\":1}\n\n",
			want: decodeResult{Events: []Event{{ID: "7", Type: "output.delta", Data: `{"a":1}`}}, LastEventID: "7"},
		},
		{
			name: "byte order mark skipped",
			in:   "\xEF\xBB\xBFdata: a\n\n",
			want: decodeResult{Events: []Event{{Data: "a"}}},
		},
		{
			// Only one BOM is skipped; a second one is part of the first field name, which
			// is then unknown.
			name: "second byte order mark kept",
			in:   "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n",
			want: decodeResult{Events: []Event{{Data: "b"}}},
		},
		{
			name: "byte order mark only at stream start",
			in:   "data: a\n\n\xEF\xBB\xBFdata: b\n\n",
			want: decodeResult{Events: []Event{{Data: "a"}}},
		},
		{
			name: "comments ignored",
			in:   ": keep-alive\n\ndata: x\n:inside\ndata: y\n:\n\n",
			want: decodeResult{Events: []Event{{Data: "x\ny"}}, Comments: []string{"keep-alive", "inside", ""}},
		},
		{
			name: "multi-line data",
			in:   "data: a\ndata:\ndata: b\ndata\n\n",
			want: decodeResult{Events: []Event{{Data: "a\n\nb\n"}}},
		},
		{
			name: "data without colon",
			in:   "data\n\ndata\ndata\n\n",
			want: decodeResult{Events: []Event{{Data: ""}, {Data: "\n"}}},
		},
		{
			name: "no space after colon",
			in:   "id:1\nevent:t\ndata:x\n\n",
			want: decodeResult{Events: []Event{{ID: "1", Type: "t", Data: "x"}}, LastEventID: "1"},
		},
		{
			name: "only one leading space removed",
			in:   "event:  t \ndata:  x \n\n",
			want: decodeResult{Events: []Event{{Type: " t ", Data: " x "}}},
		},
		{
			name: "colon inside value",
			in:   "data: a: b:c\n\n",
			want: decodeResult{Events: []Event{{Data: "a: b:c"}}},
		},
		{
			name: "unknown and malformed fields ignored",
			in:   "foo: bar\nDATA: up\n data: space\ndata : x\ndata: kept\n\n",
			want: decodeResult{Events: []Event{{Data: "kept"}}},
		},
		{
			name: "id persists across events",
			in:   "id: 5\ndata: a\n\ndata: b\n\n",
			want: decodeResult{Events: []Event{{ID: "5", Data: "a"}, {ID: "5", Data: "b"}}, LastEventID: "5"},
		},
		{
			name: "id containing NUL ignored",
			in:   "id: 1\ndata: a\n\nid: 2\x00\ndata: b\n\n",
			want: decodeResult{Events: []Event{{ID: "1", Data: "a"}, {ID: "1", Data: "b"}}, LastEventID: "1"},
		},
		{
			name: "empty id resets",
			in:   "id: 1\ndata: a\n\nid\ndata: b\n\nid: 3\ndata: c\n\nid:\ndata: d\n\n",
			want: decodeResult{Events: []Event{
				{ID: "1", Data: "a"}, {ID: "", Data: "b"}, {ID: "3", Data: "c"}, {ID: "", Data: "d"},
			}},
		},
		{
			name: "id without data kept but not dispatched",
			in:   "id: 9\n\n",
			want: decodeResult{LastEventID: "9"},
		},
		{
			name: "id without data applies to next event",
			in:   "id: 9\n\ndata: x\n\n",
			want: decodeResult{Events: []Event{{ID: "9", Data: "x"}}, LastEventID: "9"},
		},
		{
			name: "event type reset after dispatch",
			in:   "event: a\ndata: 1\n\ndata: 2\n\n",
			want: decodeResult{Events: []Event{{Type: "a", Data: "1"}, {Data: "2"}}},
		},
		{
			name: "event type reset by frame without data",
			in:   "event: a\n\ndata: 2\n\n",
			want: decodeResult{Events: []Event{{Data: "2"}}},
		},
		{
			name: "last event field wins",
			in:   "event: a\nevent: b\ndata: x\n\n",
			want: decodeResult{Events: []Event{{Type: "b", Data: "x"}}},
		},
		{
			name: "retry digits only",
			in:   "retry: 1500\ndata: a\n\nretry: 12a\ndata: b\n\nretry:\ndata: c\n\nretry: -1\ndata: d\n\nretry:  7\ndata: e\n\n",
			want: decodeResult{
				Events: []Event{
					{Data: "a", Retry: 1500 * time.Millisecond, HasRetry: true},
					{Data: "b"}, {Data: "c"}, {Data: "d"}, {Data: "e"},
				},
				Retry: 1500 * time.Millisecond, HasRetry: true,
			},
		},
		{
			name: "retry without data still applies",
			in:   "retry: 2000\n\n",
			want: decodeResult{Retry: 2 * time.Second, HasRetry: true},
		},
		{
			name: "retry of zero",
			in:   "retry: 0\ndata: a\n\n",
			want: decodeResult{Events: []Event{{Data: "a", HasRetry: true}}, HasRetry: true},
		},
		{
			name: "huge retry saturates",
			in:   "retry: 99999999999999999999999\n\n",
			want: decodeResult{Retry: time.Duration(maxRetryMs) * time.Millisecond, HasRetry: true},
		},
		{
			name: "incomplete final frame discarded",
			in:   "data: a\n\ndata: b\n",
			want: decodeResult{Events: []Event{{Data: "a"}}},
		},
		{
			name: "incomplete final line discarded",
			in:   "data: a\n\ndata: b",
			want: decodeResult{Events: []Event{{Data: "a"}}},
		},
		{
			// The id of a frame cut off by EOF must not become the resume cursor: the
			// event it belongs to never arrived.
			name: "id of incomplete final frame not committed",
			in:   "id: 1\ndata: a\n\nid: 2\ndata: b\n",
			want: decodeResult{Events: []Event{{ID: "1", Data: "a"}}, LastEventID: "1"},
		},
		{
			name: "invalid UTF-8 replaced per maximal subpart",
			in:   "data: \xE2\x82 \xF0\x80\x80|\xFF|\xED\xA0\x80|\xF4\x90|\xC3\n\n",
			want: decodeResult{Events: []Event{{Data: "\uFFFD \uFFFD\uFFFD\uFFFD|\uFFFD|\uFFFD\uFFFD\uFFFD|\uFFFD\uFFFD|\uFFFD"}}},
		},
		{
			name: "valid UTF-8 and NUL in data kept",
			in:   "event: é\ndata: a\x00b ☃ 𝄞\n\n",
			want: decodeResult{Events: []Event{{Type: "é", Data: "a\x00b ☃ 𝄞"}}},
		},
		{
			name:  "mixed line endings",
			in:    "data: a\r\ndata: b\rdata: c\n\r\nid: 1\r\rdata: d\n\n",
			mixed: true,
			want:  decodeResult{Events: []Event{{Data: "a\nb\nc"}, {ID: "1", Data: "d"}}, LastEventID: "1"},
		},
		{
			// CR CR LF is a line ending (CR) followed by a blank line (CRLF), not two
			// blank lines; LF CR is two line endings.
			name:  "CR LF pairing",
			in:    "data: a\r\r\ndata: b\n\rdata: c\r\n\r\n",
			mixed: true,
			want:  decodeResult{Events: []Event{{Data: "a"}, {Data: "b"}, {Data: "c"}}},
		},
		{
			name: "frame at the size bound",
			in:   "data: 0123456789\n\ndata: 0123\ndata:5\n\n",
			opts: []Option{WithMaxFrameSize(16)},
			want: decodeResult{Events: []Event{{Data: "0123456789"}, {Data: "0123\n5"}}},
		},
		{
			name: "line over the size bound",
			in:   "data: a\n\ndata: 0123456789a\n\n",
			opts: []Option{WithMaxFrameSize(16)},
			want: decodeResult{Events: []Event{{Data: "a"}}, Err: ErrFrameTooLarge},
		},
		{
			name: "frame over the size bound",
			in:   "data: a\n\ndata: 01234\ndata: 56789\ndata: x\n\n",
			opts: []Option{WithMaxFrameSize(16)},
			want: decodeResult{Events: []Event{{Data: "a"}}, Err: ErrFrameTooLarge},
		},
		{
			name: "endless line over the size bound",
			in:   "data: " + long,
			opts: []Option{WithMaxFrameSize(16)},
			want: decodeResult{Err: ErrFrameTooLarge},
		},
		{
			name: "comments count toward the size bound",
			in:   ":" + long + "\ndata: a\n\n",
			opts: []Option{WithMaxFrameSize(16)},
			want: decodeResult{Err: ErrFrameTooLarge},
		},
		{
			name: "size bound measured after UTF-8 repair",
			in:   "data: \xFF\xFF\xFF\xFF\n\n",
			opts: []Option{WithMaxFrameSize(16)},
			want: decodeResult{Err: ErrFrameTooLarge},
		},
	}
	for _, tt := range tests {
		for ending, rewrite := range lineEndings {
			if tt.mixed && ending != "LF" {
				continue
			}
			in := rewrite(tt.in)
			want := tt.want
			if want.Err == nil {
				want.Err = io.EOF
			}
			for how, r := range readers(in) {
				got := decodeAll(r(), tt.opts...)
				if diff := cmp.Diff(want, got, errorIs); diff != "" {
					t.Errorf("%s, %s, %s: result mismatch (-want +got):\n%s", tt.name, ending, how, diff)
				}
			}
		}
	}
}

// chunks is a reader that returns each of its strings from a separate Read.
type chunks []string

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	(*c)[0] = (*c)[0][n:]
	if (*c)[0] == "" {
		*c = (*c)[1:]
	}
	return n, nil
}

func TestDecoderCRLFAcrossReads(t *testing.T) {
	// Every CR ends one read and its LF starts the next: each pair is one line ending, so
	// this is a single frame with two data lines.
	r := &chunks{"data: a\r", "\ndata: b\r", "\n\r", "\n"}
	got := decodeAll(r)
	want := decodeResult{Events: []Event{{Data: "a\nb"}}, Err: io.EOF}
	if diff := cmp.Diff(want, got, errorIs); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
}

func TestDecoderDoesNotWaitAfterBlankLine(t *testing.T) {
	// A live stream pauses after each frame. The decoder must dispatch at the blank line
	// without reading ahead, also when the blank line ends with a CR that might be the
	// first half of a CRLF.
	for _, frame := range []string{"data: a\n\n", "data: a\r\r", "data: a\r\n\r"} {
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = pw.Write([]byte(frame)) // the decoder's result is what is checked
		}()
		d := NewDecoder(pr)
		ev, err := d.Next()
		if err != nil || ev.Data != "a" {
			t.Errorf("%q: Next() = %+v, %v; want data a", frame, ev, err)
		}
		<-done
		pw.Close()
		if _, err := d.Next(); err != io.EOF { //nolint:errorlint // Next returns io.EOF itself, as readers do
			t.Errorf("%q: second Next() error = %v, want io.EOF", frame, err)
		}
	}
}

func TestDecoderErrorsAreSticky(t *testing.T) {
	boom := errors.New("boom")
	d := NewDecoder(io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom)))
	if ev, err := d.Next(); err != nil || ev.Data != "a" {
		t.Fatalf("Next() = %+v, %v; want data a", ev, err)
	}
	for range 2 {
		if _, err := d.Next(); !errors.Is(err, boom) {
			t.Fatalf("Next() error = %v, want %v", err, boom)
		}
	}

	d = NewDecoder(strings.NewReader("data: 0123456789\n\ndata: a\n\n"), WithMaxFrameSize(4))
	for range 2 {
		if _, err := d.Next(); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("Next() error = %v, want ErrFrameTooLarge", err)
		}
	}
}

func TestWithMaxFrameSizeDefault(t *testing.T) {
	if d := NewDecoder(strings.NewReader(""), WithMaxFrameSize(0)); d.max != DefaultMaxFrameSize {
		t.Errorf("WithMaxFrameSize(0) bound = %d, want %d", d.max, DefaultMaxFrameSize)
	}
}

func TestAppendValidUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"é☃𝄞", "é☃𝄞"},
		{"\xC0\xAF", "\uFFFD\uFFFD"},                     // overlong lead byte: one each
		{"\xE0\x80\x80", "\uFFFD\uFFFD\uFFFD"},           // overlong three-byte form
		{"\xE0\xA0", "\uFFFD"},                           // truncated, valid prefix
		{"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"},           // surrogate
		{"\xF4\x8F\xBF", "\uFFFD"},                       // truncated U+10FFFF
		{"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"\xF1\x80\x80a", "\uFFFDa"},
		{"a\x80b", "a\uFFFDb"},
	}
	for _, tt := range tests {
		got := string(appendValidUTF8(nil, []byte(tt.in)))
		if got != tt.want {
			t.Errorf("appendValidUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	var stream []byte
	for i := range 1000 {
		stream = AppendEvent(stream, strconv.Itoa(i+1), "output.delta",
			[]byte(`{"execution_id":"exe_01J","sequence":7,"type":"output.delta","data":{"index":0,"type":"text","text":"Hello, world"}}`))
		if i%100 == 0 {
			stream = AppendComment(stream, "keep-alive")
		}
	}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		d := NewDecoder(bytes.NewReader(stream))
		for {
			if _, err := d.Next(); err != nil {
				break
			}
		}
	}
}

// NextData returns what Next would, the data in the decoder's buffer instead of a copy.
func TestNextDataMatchesNext(t *testing.T) {
	const in = "id: 1\ndata: a\ndata: b\n\n: c\nevent: e\ndata:\n\nretry: 5\n\ndata: " +
		"0123456789012345678901234567890123456789\n\ndata: z\n\n"
	want := decodeAll(strings.NewReader(in)).Events
	d := NewDecoder(iotest.OneByteReader(strings.NewReader(in)))
	defer d.Release()
	var got []Event
	for {
		ev, data, err := d.NextData()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("NextData: %v", err)
			}
			break
		}
		if ev.Data != "" {
			t.Errorf("NextData filled Event.Data: %q", ev.Data)
		}
		ev.Data = string(data)
		got = append(got, ev)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NextData (-Next +NextData):\n%s", diff)
	}
}

// A released decoder's buffer serves the next decoder, which reads only its own
// stream; the released one answers an error.
func TestReleasedDecoder(t *testing.T) {
	d := NewDecoder(strings.NewReader("data: a\n\ndata: b\n\n"))
	if ev, err := d.Next(); err != nil || ev.Data != "a" {
		t.Fatalf("Next() = %+v, %v; want data a", ev, err)
	}
	d.Release()
	d.Release() // twice is harmless
	if _, err := d.Next(); !errors.Is(err, errReleased) {
		t.Errorf("Next after Release: %v, want errReleased", err)
	}
	for range 3 {
		d := NewDecoder(strings.NewReader("data: c\n\n"))
		if ev, err := d.Next(); err != nil || ev.Data != "c" {
			t.Errorf("Next of a new decoder = %+v, %v; want data c", ev, err)
		}
		if _, err := d.Next(); !errors.Is(err, io.EOF) {
			t.Errorf("second Next of a new decoder: %v, want io.EOF", err)
		}
		d.Release()
	}
}

// A regression guard, not a timing: a provider stream decoded with NextData by a decoder
// that is released after allocates per stream, never per event, and the read buffer
// comes from the released decoders.
func TestNextDataAllocations(t *testing.T) {
	in := strings.Repeat(`data: {"choices":[{"delta":{"content":"token"}}]}`+"\n\n", 100)
	r := strings.NewReader(in)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(in)
		d := NewDecoder(r)
		for {
			if _, _, err := d.NextData(); err != nil {
				break
			}
		}
		d.Release()
	})
	t.Logf("%.1f allocations per stream of 100 events", allocs)
	if allocs > 4 {
		t.Errorf("%.1f allocations per stream of 100 events, want at most 4", allocs)
	}
}
