package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestIdempotencyKeyParsing(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   string
		ok     bool
		bad    bool
	}{
		{name: "absent"},
		{name: "raw", values: []string{"abc"}, want: "abc", ok: true},
		{name: "quoted", values: []string{`"abc"`}, want: "abc", ok: true},
		{name: "surrounding spaces", values: []string{`  "abc"  `}, want: "abc", ok: true},
		{name: "escaped quote", values: []string{`"a\"b"`}, want: `a"b`, ok: true},
		{name: "escaped backslash", values: []string{`"a\\b"`}, want: `a\b`, ok: true},
		{name: "raw with quote inside", values: []string{`a"b`}, want: `a"b`, ok: true},
		{name: "raw punctuation", values: []string{"!#$%&'()*+,-./:;<=>?@[]^_`{|}~"}, want: "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", ok: true},
		{name: "255", values: []string{strings.Repeat("a", 255)}, want: strings.Repeat("a", 255), ok: true},
		{name: "255 quoted with escapes", values: []string{`"` + strings.Repeat(`\\`, 255) + `"`}, want: strings.Repeat(`\`, 255), ok: true},
		{name: "256", values: []string{strings.Repeat("a", 256)}, bad: true},
		{name: "empty", values: []string{""}, bad: true},
		{name: "empty quoted", values: []string{`""`}, bad: true},
		{name: "two", values: []string{"a", "b"}, bad: true},
		{name: "space", values: []string{"a b"}, bad: true},
		{name: "quoted space", values: []string{`"a b"`}, bad: true},
		{name: "control", values: []string{"a\x00b"}, bad: true},
		{name: "DEL", values: []string{"a\x7fb"}, bad: true},
		{name: "non-ASCII", values: []string{"ключ"}, bad: true},
		{name: "quoted non-ASCII", values: []string{`"ключ"`}, bad: true},
		{name: "unterminated", values: []string{`"abc`}, bad: true},
		{name: "unterminated after escape", values: []string{`"abc\`}, bad: true},
		{name: "bad escape", values: []string{`"a\x"`}, bad: true},
		{name: "trailing space", values: []string{`"abc" `}, want: "abc", ok: true},
		{name: "parameters", values: []string{`"abc";a=1`}, bad: true},
		{name: "list", values: []string{`"a","b"`}, bad: true},
		{name: "escaped then garbage", values: []string{`"a\"b"c`}, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Idempotency-Key", v)
			}
			got, ok, err := idempotencyKey(h)
			if (err != nil) != tt.bad || got != tt.want || ok != tt.ok {
				t.Fatalf("got %q, %v, %v; want %q, %v, bad=%v", got, ok, err, tt.want, tt.ok, tt.bad)
			}
		})
	}
}

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "7": 7, "007": 7, "18446744073709551615": 1<<64 - 1} {
		if got, err := parseCursor([]string{in}); err != nil || got != want {
			t.Errorf("%q: %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1", "+1", "1.0", "1e3", " 1", "1 ", "0x1", "1_000", "18446744073709551616", "١"} {
		if _, err := parseCursor([]string{in}); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestEventCursorLargerWins(t *testing.T) {
	for _, tt := range []struct {
		query, header string
		want          uint64
	}{
		{"", "", 0},
		{"after=5", "", 5},
		{"", "5", 5},
		{"after=5", "9", 9},
		{"after=9", "5", 9},
	} {
		r := &http.Request{URL: &url.URL{RawQuery: tt.query}, Header: http.Header{}}
		if tt.header != "" {
			r.Header.Set("Last-Event-ID", tt.header)
		}
		if got, err := eventCursor(r); err != nil || got != tt.want {
			t.Errorf("%q %q: %d, %v", tt.query, tt.header, got, err)
		}
	}
}

func TestWantsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                    false,
		"*/*":                                 false,
		"text/event-stream":                   false,
		"application/json":                    true,
		"application/json; charset=utf-8":     true,
		"application/json, text/event-stream": false,
		"text/event-stream;q=0.5, application/json": true,
		"application/json;q=0.1, text/event-stream": false,
		"application/json;q=0":                      false,
		"text/html":                                 false,
		"garbage;;;":                                false,
	} {
		var h []string
		if accept != "" {
			h = []string{accept}
		}
		if got := wantsJSON(h); got != want {
			t.Errorf("%q: %v, want %v", accept, got, want)
		}
	}
}

func TestAppendAccepted(t *testing.T) {
	created := time.Date(2026, 12, 2, 13, 0, 0, 123456000, time.UTC)
	got := appendAccepted(nil, "exe_abc", created, "")
	var body struct {
		ID        string            `json:"id"`
		Status    string            `json:"status"`
		CreatedAt time.Time         `json:"created_at"`
		Links     map[string]string `json:"links"`
	}
	if err := json.Unmarshal(got, &body); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	want := map[string]string{
		"self": "/v1/executions/exe_abc", "events": "/v1/executions/exe_abc/events",
		"result": "/v1/executions/exe_abc/result", "cancel": "/v1/executions/exe_abc/cancel",
	}
	if body.ID != "exe_abc" || body.Status != "accepted" || !body.CreatedAt.Equal(created) || !cmp.Equal(want, body.Links) {
		t.Errorf("unexpected body %s", got)
	}
	const id = "exe_06h3ekg08wpm1s4tbeqm05m9h26vye1cwtqg" // as long as the engine's ids
	if n := len(appendAccepted(nil, id, created, "")); n > acceptedSize {
		t.Errorf("a body is %d bytes, more than acceptedSize", n)
	}
}

// FuzzIdempotencyKey checks that every accepted header value is a valid key, and that the
// key's quoted form (and its raw form, where one exists) denote the same key.
func FuzzIdempotencyKey(f *testing.F) {
	for _, seed := range []string{
		"abc", `"abc"`, `"a\"b"`, `"a\\b"`, `""`, `"abc`, `"a"b"`, "a b", `"x";p=1`,
		`a"b`, "\x7f", strings.Repeat("k", 255), `"` + strings.Repeat("k", 256) + `"`,
	} {
		f.Add(seed)
	}
	quote := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	f.Fuzz(func(t *testing.T, v string) {
		key, ok, err := idempotencyKey(http.Header{"Idempotency-Key": {v}})
		if err != nil {
			return
		}
		if !ok || len(key) < 1 || len(key) > maxKeyLength {
			t.Fatalf("%q gave key %q", v, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("%q gave key %q with byte %#x", v, key, key[i])
			}
		}
		forms := []string{`"` + quote.Replace(key) + `"`}
		if key[0] != '"' {
			forms = append(forms, key)
		}
		for _, form := range forms {
			if k, _, err := idempotencyKey(http.Header{"Idempotency-Key": {form}}); err != nil || k != key {
				t.Fatalf("form %q of key %q gave %q, %v", form, key, k, err)
			}
		}
	})
}
