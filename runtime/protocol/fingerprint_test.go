package protocol_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func mustFingerprint(t *testing.T, body string) string {
	t.Helper()
	fp, err := protocol.Fingerprint([]byte(body))
	if err != nil {
		t.Fatalf("Fingerprint(%s): %v", body, err)
	}
	return fp
}

// TestFingerprintCanonicalForm pins the canonical form: a change here changes every
// stored fingerprint, so idempotent replays across an upgrade would stop matching.
func TestFingerprintCanonicalForm(t *testing.T) {
	for _, tc := range []struct{ body, canonical string }{
		{`{"b":1,"a":[true,null,"x"]}`, `{"a":[true,null,"x"],"b":1}`},
		{" {\n\t\"z\" : { \"y\" : 1 , \"x\" : 2 } } ", `{"z":{"x":2,"y":1}}`},
		{`["\u0041\/\u00e9\u2028", "q\"\\"]`, "[\"A/\u00e9\u2028\",\"q\\\"\\\\\"]"},
		{`"\u0000\u0008\t\n\u000b\f\r\u001f"`, `"\u0000\b\t\n\u000b\f\r\u001f"`},
		{`[1.0, 1, 1e2, -0, 0.10]`, `[1.0,1,1e2,-0,0.10]`},
		{`{"é":1,"z":2,"A":3,"":4}`, `{"":4,"A":3,"z":2,"é":1}`},
		{`"\ud800"`, "\"\ufffd\""},
	} {
		if got, want := mustFingerprint(t, tc.body), sha(tc.canonical); got != want {
			t.Errorf("Fingerprint(%s) is not the hash of %s", tc.body, tc.canonical)
		}
	}
}

func TestFingerprintEquivalentBodies(t *testing.T) {
	a := `{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"a":"1","b":"2"}}`
	same := []string{
		`{"metadata":{"b":"2","a":"1"},"input":[{"text":"hi","type":"text"}],"ability":"chat"}`,
		"{\n  \"ability\": \"chat\",\n  \"input\": [ {\"type\": \"text\", \"text\": \"\\u0068i\"} ],\n  \"metadata\": {\"a\": \"1\", \"b\": \"2\"}\n}\n",
	}
	different := []string{
		`{"ability":"chat","input":[{"type":"text","text":"hi "}],"metadata":{"a":"1","b":"2"}}`,
		`{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"a":"1","b":"3"}}`,
		`{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"a":"1"}}`,
		`{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"a":"1","b":"2"},"deadline_ms":1000}`,
	}
	fa := mustFingerprint(t, a)
	for _, b := range same {
		if mustFingerprint(t, b) != fa {
			t.Errorf("%s should share the fingerprint of %s", b, a)
		}
	}
	for _, b := range different {
		if mustFingerprint(t, b) == fa {
			t.Errorf("%s should not share the fingerprint of %s", b, a)
		}
	}
	// Array order is significant: input is a conversation.
	if mustFingerprint(t, `[1,2]`) == mustFingerprint(t, `[2,1]`) {
		t.Errorf("array order ignored")
	}
	// Numbers are kept as written.
	if mustFingerprint(t, `{"n":1}`) == mustFingerprint(t, `{"n":1.0}`) {
		t.Errorf("1 and 1.0 share a fingerprint")
	}
}

// TestFingerprintFixedPoint checks that the canonical form is canonical: fingerprinting
// it hashes it unchanged.
func TestFingerprintFixedPoint(t *testing.T) {
	body := `{"b":[{"y":"\n","x":null}],"a":{"d":1.50,"c":"\u00e9"}}`
	canonical := `{"a":{"c":"é","d":1.50},"b":[{"x":null,"y":"\n"}]}`
	if mustFingerprint(t, body) != sha(canonical) || mustFingerprint(t, canonical) != sha(canonical) {
		t.Errorf("canonical form is not a fixed point")
	}
}

func TestFingerprintErrors(t *testing.T) {
	for _, body := range []string{``, `{`, `{} {}`, `{"a":1,"a":1}`, `[{"x":{"k":1,"k":2}}]`} {
		_, err := protocol.Fingerprint([]byte(body))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest {
			t.Errorf("Fingerprint(%q) = %v, want an invalid_request error", body, err)
		}
	}
}

// referenceCanonical is the canonical form written the obvious way, from a document
// decoded by encoding/json: the specification Fingerprint's streaming code must meet.
func referenceCanonical(v any) string {
	var b strings.Builder
	var write func(v any)
	writeString := func(s string) {
		b.WriteByte('"')
		for _, r := range s {
			switch {
			case r == '"' || r == '\\':
				b.WriteString(`\` + string(r))
			case r == '\b':
				b.WriteString(`\b`)
			case r == '\f':
				b.WriteString(`\f`)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
	}
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			b.WriteByte('{')
			for i, k := range slices.Sorted(maps.Keys(v)) {
				if i > 0 {
					b.WriteByte(',')
				}
				writeString(k)
				b.WriteByte(':')
				write(v[k])
			}
			b.WriteByte('}')
		case []any:
			b.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					b.WriteByte(',')
				}
				write(e)
			}
			b.WriteByte(']')
		case string:
			writeString(v)
		case json.Number:
			b.WriteString(string(v))
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case nil:
			b.WriteString("null")
		}
	}
	write(v)
	return b.String()
}

// FuzzFingerprint compares Fingerprint with the reference canonical form on every
// document without duplicate keys.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,null,"x"]}`, `[{"z":{"y":[{"b":0,"a":-1.5e3}]}},"\u00e9\n"]`,
		`{"a":{"a":{"b":"\ud800","a":{}}},"":[]}`, `"\u0000\u001f\"\\/"`, `{"k":1,"k":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fp, err := protocol.Fingerprint(body)
		if err != nil {
			return // not JSON, or duplicate keys: encoding/json would silently pick one
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("Fingerprint accepted what encoding/json rejects: %v", err)
		}
		if want := sha(referenceCanonical(v)); fp != want {
			t.Fatalf("Fingerprint differs from the reference canonical form %s", referenceCanonical(v))
		}
	})
}

// TestFingerprintDeepNesting is the shape that makes naive canonicalisation quadratic:
// every level re-sorts and would copy the whole subtree.
func TestFingerprintDeepNesting(t *testing.T) {
	const depth = 5000
	body := strings.Repeat(`{"b":0,"a":`, depth) + `"` + strings.Repeat("x", 1<<20) + `"` + strings.Repeat("}", depth)
	canonical := strings.Repeat(`{"a":`, depth) + `"` + strings.Repeat("x", 1<<20) + `"` + strings.Repeat(`,"b":0}`, depth)
	if got := mustFingerprint(t, body); got != sha(canonical) {
		t.Fatalf("deeply nested body: wrong canonical form")
	}
}
