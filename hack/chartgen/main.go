// Command chartgen keeps the generated parts of charts/switchboard in step with their
// sources, as part of `make manifests`:
//
//   - crds/ is a copy of config/crd/bases;
//   - templates/rbac/generated/ holds the Roles and ClusterRoles of config/rbac (the
//     manager's, generated from the +kubebuilder:rbac markers, and the roles for callers),
//     with names and labels templated for the release;
//   - the values table of README.md is generated from the comments of values.yaml, and
//     every value must have a comment and a property in values.schema.json.
//
// With -check it writes nothing and fails, naming each file, when any of them differs.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chartgen", flag.ContinueOnError)
	root := fs.String("root", ".", "Repository root.")
	check := fs.Bool("check", false, "Write nothing; fail if a generated file of the chart is out of date.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	files, err := generate(*root)
	if err != nil {
		return err
	}
	if *check {
		drift, err := diff(*root, files)
		if err != nil {
			return err
		}
		if len(drift) > 0 {
			for _, d := range drift {
				fmt.Fprintln(stdout, d)
			}
			return fmt.Errorf("%d generated chart files are out of date; run 'make manifests'", len(drift))
		}
		return nil
	}
	return write(*root, files)
}

// chartDir is the chart, relative to the repository root.
const chartDir = "charts/switchboard"

// owned are the folders whose every file chartgen writes: a file there that it no longer
// generates is removed.
var owned = []string{
	chartDir + "/crds",
	chartDir + "/templates/rbac/generated",
}

// generatedFiles maps paths relative to the repository root to their content.
type generatedFiles map[string][]byte

func generate(root string) (generatedFiles, error) {
	files := generatedFiles{}
	if err := copyCRDs(root, files); err != nil {
		return nil, err
	}
	if err := rbacTemplates(root, files); err != nil {
		return nil, err
	}
	readme, err := valuesReadme(root)
	if err != nil {
		return nil, err
	}
	files[chartDir+"/README.md"] = readme
	return files, nil
}

// diff lists, as "path: reason", the files that differ from files on disk, and the files
// in owned folders that are not generated any more.
func diff(root string, files generatedFiles) ([]string, error) {
	var drift []string
	for _, rel := range sortedKeys(files) {
		got, err := os.ReadFile(filepath.Join(root, rel))
		switch {
		case os.IsNotExist(err):
			drift = append(drift, rel+": missing")
		case err != nil:
			return nil, err
		case !bytes.Equal(got, files[rel]):
			drift = append(drift, rel+": differs from its source")
		}
	}
	stale, err := staleFiles(root, files)
	if err != nil {
		return nil, err
	}
	for _, rel := range stale {
		drift = append(drift, rel+": no longer generated")
	}
	return drift, nil
}

func write(root string, files generatedFiles) error {
	stale, err := staleFiles(root, files)
	if err != nil {
		return err
	}
	for _, rel := range stale {
		if err := os.Remove(filepath.Join(root, rel)); err != nil {
			return err
		}
	}
	for _, rel := range sortedKeys(files) {
		path := filepath.Join(root, rel)
		if got, err := os.ReadFile(path); err == nil && bytes.Equal(got, files[rel]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // G301: a folder of the checked-in tree, world-readable like the rest
			return err
		}
		if err := os.WriteFile(path, files[rel], 0o644); err != nil { //nolint:gosec // G306: a checked-in chart file, world-readable like the rest of the tree
			return err
		}
	}
	return nil
}

// staleFiles lists the files in owned folders that files does not hold.
func staleFiles(root string, files generatedFiles) ([]string, error) {
	var stale []string
	for _, dir := range owned {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			rel := dir + "/" + e.Name()
			if _, ok := files[rel]; !ok && !e.IsDir() {
				stale = append(stale, rel)
			}
		}
	}
	return stale, nil
}

func sortedKeys(files generatedFiles) []string {
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
