package main

import (
	"bytes"
	"os"
	"testing"
)

// TestSchemaUpToDate fails when the checked-in schema differs from what the Go types
// generate, so a change to runtime/protocol cannot forget `go run ./hack/genschema`.
func TestSchemaUpToDate(t *testing.T) {
	t.Chdir("../..") // generate reads doc comments relative to the repository root
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(outputPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go run ./hack/genschema", outputPath)
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`"a\u0026b"`:      `"a&b"`,
		`"\u003cp\u003e"`: `"<p>"`,
		`"\\u0026"`:       `"\\u0026"`, // an escaped backslash, then plain text
		`"\u00e9"`:        `"\u00e9"`,
	} {
		if got := string(unescapeHTML([]byte(in))); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}
