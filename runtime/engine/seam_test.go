package engine_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/httpapi"
)

// The API decodes, renders and reads; it does not submit by itself (spec/http-api.md,
// "Idempotency"): it reaches the engine and the store through two small interfaces of its
// own, and none of its code names an execution, knows the engine's lease or touches an
// idempotency reservation. The check lives here, beside the names it looks for, so that
// the API's own tree never mentions them.
func TestSeamToTheEngine(t *testing.T) {
	cfg := reflect.TypeFor[httpapi.Config]()
	for field, want := range map[string][]string{
		// Remove is a front door's delete (Kit.Remove): the engine cancels a running
		// execution, waits for its end and removes it; the API only checks access.
		"Engine": {"Cancel", "Remove", "Submit"},
		"Store":  {"Get", "Read", "Snapshot", "Wait"},
	} {
		f, _ := cfg.FieldByName(field)
		if f.Type == nil || f.Type.Kind() != reflect.Interface || f.Type.PkgPath() != cfg.PkgPath() {
			t.Errorf("Config.%s is %v, want an interface declared in httpapi", field, f.Type)
			continue
		}
		var got []string
		for m := range f.Type.Methods() {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Config.%s has methods %v, want %v", field, got, want)
		}
	}

	const api = "../httpapi"
	entries, err := os.ReadDir(api)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(api, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && slices.Contains(engineInternals, id.Name) {
				t.Errorf("%s: httpapi uses %s", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
}

// engineInternals are names the API must not use: the engine names executions, owns
// the lease, and reserves, replays and releases idempotency keys.
var engineInternals = []string{"NewExecutionID", "ExecutionLease", "DefaultLease", "Reserve", "Release", "Reservation", "ReservationLimitError"}
