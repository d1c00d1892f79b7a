package eventstore_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxRoleMethods bounds the methods of an interface of the store: a role has a few,
// and one that needs more is several roles.
const maxRoleMethods = 8

// TestRolesAreSmall: no interface type in package eventstore or below it (named or
// not, in tests too) has more than maxRoleMethods methods, those it embeds included. A
// user that needs several roles composes them itself.
func TestRolesAreSmall(t *testing.T) {
	const module = "github.com/switchboard-dev/switchboard/runtime/eventstore"
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", exportData(t))
	for _, dir := range append([]string{"."}, subpackages(t)...) {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		path := module
		if dir != "." {
			path += "/" + filepath.ToSlash(dir)
		}
		// The package with its internal tests, then its external tests, which import it.
		for _, files := range [][]string{append(pkg.GoFiles, pkg.TestGoFiles...), pkg.XTestGoFiles} {
			if len(files) == 0 {
				continue
			}
			var parsed []*ast.File
			for _, name := range files {
				f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				parsed = append(parsed, f)
			}
			info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
			conf := types.Config{Importer: imp}
			if _, err := conf.Check(path, fset, parsed, info); err != nil {
				t.Fatalf("type-check %s: %v", path, err)
			}
			for _, f := range parsed {
				ast.Inspect(f, func(n ast.Node) bool {
					it, ok := n.(*ast.InterfaceType)
					if !ok {
						return true
					}
					if m := info.Types[it].Type.(*types.Interface).NumMethods(); m > maxRoleMethods {
						t.Errorf("%s: an interface of %d methods, want at most %d: split it into roles",
							fset.Position(it.Pos()), m, maxRoleMethods)
					}
					return true
				})
			}
		}
	}
}

// subpackages returns the directories of the packages under runtime/eventstore (this
// package's directory, the working directory of its tests), relative to it.
func subpackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == "." {
			return err
		}
		if _, err := build.ImportDir(path, 0); err == nil {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// exportData returns a lookup of the export data of the packages under runtime/eventstore
// and their dependencies, as the go command builds them (and caches them), for a gc
// importer: type-checking them from source takes a minute under the race detector.
func exportData(t *testing.T) func(path string) (io.ReadCloser, error) {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-test", "-f", "{{.ImportPath}}\t{{.Export}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok && file != "" {
			files[path] = file
		}
	}
	return func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data of %s", path)
		}
		return os.Open(file)
	}
}

// invalidAllowed counts the references to eventstore.ErrInvalid that the functions of
// the implementations may make, by package.function: what they refuse is the data of an
// event, which only the store's fold decodes, or the store's configuration. Every other
// ErrInvalid comes from the argument checks of package eventstore (args.go).
var invalidAllowed = map[string]int{
	"memory.invalidData":    1, // an event's data that does not decode
	"redis.(*Store).Append": 1, // the same, as the append script answers it
	"redis.newStore":        1, // a key prefix with braces
	// the same for the PostgreSQL store: an event's data, a schema name that would need
	// quoting, and ids, keys or names with NUL or invalid UTF-8, which a text column
	// cannot hold (a limit of this backend, not a malformed call elsewhere)
	"postgres.(*Store).appendOnce": 1,
	"postgres.New":                 1,
	"postgres.unstorable":          1,
}

// TestArgumentChecksLiveOnce: no implementation checks the arguments of a call itself;
// each calls the check of package eventstore, so that all refuse alike.
func TestArgumentChecksLiveOnce(t *testing.T) {
	found := map[string]int{}
	for _, dir := range subpackages(t) {
		if dir == "storetest" {
			continue // the suite, which expects ErrInvalid
		}
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, name := range pkg.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if ok && sel.Sel.Name == "ErrInvalid" && isIdent(sel.X, "eventstore") {
						found[pkg.Name+"."+funcName(fn)]++
					}
					return true
				})
			}
		}
	}
	for _, f := range slices.Sorted(maps.Keys(found)) {
		if found[f] > invalidAllowed[f] {
			t.Errorf("%s refers to eventstore.ErrInvalid %d times, want at most %d: check arguments with the checks of package eventstore",
				f, found[f], invalidAllowed[f])
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// funcName names fn as function, (*Type).method or Type.method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	var recv strings.Builder
	switch t := fn.Recv.List[0].Type.(type) {
	case *ast.StarExpr:
		recv.WriteString("(*")
		if id, ok := t.X.(*ast.Ident); ok {
			recv.WriteString(id.Name)
		}
		recv.WriteString(")")
	case *ast.Ident:
		recv.WriteString(t.Name)
	}
	return recv.String() + "." + fn.Name.Name
}
