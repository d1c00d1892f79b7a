// Command genschema writes the JSON Schema (draft 2020-12) of the execution request,
// reflected from the Go types in runtime/protocol, to spec/schema/execution-request.json.
// Run it from the repository root:
//
//	go run ./hack/genschema          # regenerate
//	go run ./hack/genschema -check   # fail if the checked-in file is stale
//
// Output is deterministic: properties keep struct field order, every map is written with
// sorted keys, and descriptions come from the types' doc comments.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

const (
	modulePath = "github.com/switchboard-dev/switchboard"
	sourceDir  = "./runtime/protocol"
	schemaID   = "https://switchboard.dev/schema/execution-request.json"
	outputPath = "spec/schema/execution-request.json"
)

func main() {
	check := flag.Bool("check", false, "compare with the checked-in file instead of writing it")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "genschema:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	want, err := generate()
	if err != nil {
		return err
	}
	if check {
		got, err := os.ReadFile(outputPath)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s is stale: run go run ./hack/genschema", outputPath)
		}
		return nil
	}
	return os.WriteFile(outputPath, want, 0o644) //nolint:gosec // G306: a checked-in spec file, world-readable like the rest of the tree
}

// generate reflects the request schema. It reads doc comments from sourceDir, so it must
// run from the repository root.
func generate() ([]byte, error) {
	r := &jsonschema.Reflector{
		// The root is the request object itself rather than a $ref to it.
		ExpandedStruct: true,
	}
	if err := r.AddGoComments(modulePath, sourceDir); err != nil {
		return nil, fmt.Errorf("read doc comments: %w", err)
	}
	// Doc comments wrap at the source's line width; descriptions read better unwrapped.
	for k, v := range r.CommentMap {
		r.CommentMap[k] = strings.Join(strings.Fields(v), " ")
	}
	s := r.Reflect(&protocol.Request{})
	s.ID = schemaID
	s.Title = "Switchboard execution request"

	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	return append(unescapeHTML(b), '\n'), nil
}

// unescapeHTML undoes the \u0026, \u003c and \u003e escapes encoding/json writes for '&',
// '<' and '>' (Schema's own MarshalJSON applies them whatever the encoder's settings), so
// patterns such as [a-z0-9!#$&^_.+-] stay readable. Escape pairs are consumed whole, so
// an escaped backslash followed by "u0026" is left alone.
func unescapeHTML(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			out = append(out, b[i])
			continue
		}
		if i+6 <= len(b) && b[i+1] == 'u' {
			if c, ok := htmlEscapes[string(b[i+2:i+6])]; ok {
				out = append(out, c)
				i += 5
				continue
			}
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

var htmlEscapes = map[string]byte{"0026": '&', "003c": '<', "003e": '>'}
