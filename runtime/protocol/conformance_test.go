package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	vectorDir  = "../../spec/conformance/requests"
	schemaFile = "../../spec/schema/execution-request.json"
)

// vector is one conformance vector (format: spec/conformance/README.md).
type vector struct {
	Description         string          `json:"description"`
	Body                json.RawMessage `json:"body"`
	BodyRaw             *string         `json:"body_raw"`
	BodySize            int             `json:"body_size"`
	SchemaCannotExpress string          `json:"schema_cannot_express"`
	Expect              struct {
		Status int    `json:"status"`
		Code   Code   `json:"code"`
		Path   string `json:"path"`
	} `json:"expect"`
}

// padMarker in a body_raw is replaced by 'a's until the body is body_size bytes long.
const padMarker = "@PAD@"

// body returns the exact bytes the vector sends.
func (v *vector) body(t *testing.T) []byte {
	t.Helper()
	var b []byte
	switch {
	case v.BodyRaw != nil && v.Body == nil:
		b = []byte(*v.BodyRaw)
	case v.BodyRaw == nil && v.Body != nil:
		b = v.Body // as written in the file, whitespace included
	default:
		t.Fatal("vector needs exactly one of body and body_raw")
	}
	if v.BodySize > 0 {
		n := v.BodySize - (len(b) - len(padMarker))
		if n < 0 || !bytes.Contains(b, []byte(padMarker)) {
			t.Fatalf("body_size %d needs a %s marker in a shorter body", v.BodySize, padMarker)
		}
		b = bytes.Replace(b, []byte(padMarker), bytes.Repeat([]byte("a"), n), 1)
	}
	return b
}

func loadVectors(t *testing.T) map[string]*vector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*vector{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // a misspelt vector field must not be ignored silently
		v := new(vector)
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = v
	}
	if len(out) < 70 {
		t.Fatalf("found %d vectors in %s, want at least 70", len(out), vectorDir)
	}
	return out
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	// Defaults on purpose: Go regexp for "pattern" (RE2, as the decoder), and "format"
	// and "contentEncoding" as annotations only, so no rule hides in an assertion mode.
	c := jsonschema.NewCompiler()
	sch, err := c.Compile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// schemaAccepts reports whether body is one JSON document valid against the schema. A
// body that is not JSON is no instance at all, so the schema cannot accept it.
func schemaAccepts(sch *jsonschema.Schema, body []byte) bool {
	if !json.Valid(body) {
		return false
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return false
	}
	return sch.Validate(doc) == nil
}

// receive is what the runtime does with a body: the HTTP layer's size limit, then
// DecodeRequest.
func receive(body []byte) error {
	if len(body) > DefaultMaxRequestBytes {
		return RequestTooLarge()
	}
	_, err := DecodeRequest(body)
	return err
}

// TestConformance runs every vector through the decoder and through the generated
// schema. The two must agree on valid/invalid unless the vector says why the schema
// cannot express its rule, and then they must disagree (so a stale mark is caught).
func TestConformance(t *testing.T) {
	sch := compileSchema(t)
	triggered := map[rule]bool{}
	for name, v := range loadVectors(t) {
		t.Run(name, func(t *testing.T) {
			body := v.body(t)
			err := receive(body)

			wantPrefix := map[int]string{202: "valid-", 400: "invalid-", 413: "too-large-"}[v.Expect.Status]
			if wantPrefix == "" || !strings.HasPrefix(name, wantPrefix) {
				t.Fatalf("expect.status %d does not match the file name", v.Expect.Status)
			}
			if v.Expect.Status == 202 {
				if err != nil {
					t.Fatalf("decoder rejected a valid request: %v", err)
				}
				checkAccepted(t, sch, body)
			} else {
				var pe *Error
				if !errors.As(err, &pe) {
					t.Fatalf("decoder accepted an invalid request (%s)", v.Description)
				}
				if pe.Code != v.Expect.Code || pe.Code.HTTPStatus() != v.Expect.Status {
					t.Fatalf("got %s (HTTP %d), want %s (HTTP %d)", pe.Code, pe.Code.HTTPStatus(), v.Expect.Code, v.Expect.Status)
				}
				if v.Expect.Path != "" && !strings.HasPrefix(pe.Message, v.Expect.Path+": ") {
					t.Fatalf("error %q does not name %s", pe.Message, v.Expect.Path)
				}
				if _, r, ok := strings.Cut(pe.Message, ": "); ok {
					triggered[rule(r)] = true
				}
			}

			decoderOK, schemaOK := err == nil, schemaAccepts(sch, body)
			switch {
			case v.SchemaCannotExpress == "" && decoderOK != schemaOK:
				t.Fatalf("decoder accepts=%v, schema accepts=%v", decoderOK, schemaOK)
			case v.SchemaCannotExpress != "" && decoderOK == schemaOK:
				t.Fatalf("marked schema_cannot_express, but the schema agrees with the decoder")
			}
		})
	}

	// Every rule the decoder can report must be exercised by some vector, except rules
	// the current registry makes unreachable.
	unreachable := map[rule]string{}
	if len(documentedExtensions) < MaxExtensions {
		unreachable[rExtensionCount] = "fewer keys are documented than an object may hold, so a 33rd key is undocumented first"
	}
	for r := range validationRules {
		if !triggered[r] && unreachable[r] == "" {
			t.Errorf("no vector triggers rule %q", r)
		}
	}
}

// checkAccepted checks what the runtime does next with an accepted body: it has a
// fingerprint, and the decoded request encodes (as the Go client would send it) to a body
// that the decoder and the schema accept and that decodes to the same request.
func checkAccepted(t *testing.T, sch *jsonschema.Schema, body []byte) {
	t.Helper()
	if _, err := Fingerprint(body); err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	r, err := DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if !schemaAccepts(sch, enc) {
		t.Fatalf("the schema rejects the re-encoded request %.200s", enc)
	}
	r2, err := DecodeRequest(enc)
	if err != nil {
		t.Fatalf("the decoder rejects the re-encoded request: %v", err)
	}
	enc2, err := json.Marshal(r2)
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("round trip changed the request: %v", err)
	}
}

// TestConformanceMarksAreFew keeps schema_cannot_express an exception.
func TestConformanceMarksAreFew(t *testing.T) {
	var marked []string
	for name, v := range loadVectors(t) {
		if v.SchemaCannotExpress != "" {
			marked = append(marked, name)
		}
	}
	slices.Sort(marked)
	if len(marked) > 8 {
		t.Fatalf("%d vectors are marked schema_cannot_express: %v", len(marked), marked)
	}
}

var (
	fuzzSchema     *jsonschema.Schema
	fuzzSchemaOnce sync.Once
	// hugeExponent finds number literals whose exact value the schema validator would
	// expand with big.Rat (10^1000000000 does not fit in memory); such inputs are skipped.
	hugeExponent = regexp.MustCompile(`[eE][+-]?0*[0-9]{4,}`)
)

// FuzzDecoderMatchesSchema is the conformance test with generated bodies: the decoder and
// the schema must agree on every body, except where a vector documents that the schema
// cannot express the rule (duplicate keys, the extensions size).
func FuzzDecoderMatchesSchema(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		var v struct {
			Body    json.RawMessage `json:"body"`
			BodyRaw *string         `json:"body_raw"`
		}
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		if err := json.Unmarshal(b, &v); err != nil {
			f.Fatal(err)
		}
		switch {
		case v.BodyRaw != nil && len(*v.BodyRaw) < 4096:
			f.Add([]byte(*v.BodyRaw))
		case v.Body != nil && len(v.Body) < 4096:
			f.Add([]byte(v.Body))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzSchemaOnce.Do(func() { fuzzSchema = compileSchema(t) })
		if hugeExponent.Match(body) {
			return // outside what the schema validator can compare; the decoder is fuzzed alone in FuzzDecodeRequest
		}
		_, err := DecodeRequest(body)
		var pe *Error
		if errors.As(err, &pe) && (strings.HasSuffix(pe.Message, string(rDuplicateKey)) ||
			strings.HasSuffix(pe.Message, string(rExtensionSize))) {
			return
		}
		if decoderOK, schemaOK := err == nil, schemaAccepts(fuzzSchema, body); decoderOK != schemaOK {
			t.Fatalf("decoder accepts=%v (%v), schema accepts=%v", decoderOK, err, schemaOK)
		}
	})
}
