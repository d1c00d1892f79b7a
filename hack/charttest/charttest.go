// Package charttest renders charts/switchboard with the pinned helm (hack/helm.sh, built
// into bin/helm once) for tests: this package's own (lint, schema, security context,
// RBAC) and envtest suites that apply the rendered objects to a real API server.
//
//	manifest, err := charttest.Render(ctx, charttest.Options{
//		ValuesFiles: []string{charttest.ProductionValues}, IncludeCRDs: true})
//	objs, err := charttest.Objects(manifest)
package charttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// Paths relative to the repository root.
const (
	ChartDir         = "charts/switchboard"
	ProductionValues = ChartDir + "/ci/production-values.yaml"
)

// Defaults of Options.
const (
	DefaultRelease   = "switchboard"
	DefaultNamespace = "switchboard-system"
)

// Root is the repository root (found from this file, so it works from any package's
// tests).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	buildOnce sync.Once
	errBuild  error
)

// Helm runs the pinned helm with args in the repository root and returns its standard
// output; an error carries its standard error. Helm's configuration and caches live in
// bin/.helm, so that the user's own helm setup plays no part.
func Helm(ctx context.Context, args ...string) ([]byte, error) {
	root := Root()
	buildOnce.Do(func() {
		// hack/helm.sh without arguments builds bin/helm, or does nothing when it is up
		// to date.
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack/helm.sh")) //nolint:gosec // G204: the repository's own script
		if out, err := cmd.CombinedOutput(); err != nil {
			errBuild = fmt.Errorf("build helm: %w\n%s", err, out)
		}
	})
	if errBuild != nil {
		return nil, errBuild
	}
	home := filepath.Join(root, "bin/.helm")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin/helm"), args...) //nolint:gosec // the pinned helm, with the test's own arguments
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+os.DevNull,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// Options select what Render renders.
type Options struct {
	// Release and Namespace default to DefaultRelease and DefaultNamespace.
	Release, Namespace string
	// ValuesFiles are passed with -f, in order; relative paths start at the repository
	// root.
	ValuesFiles []string
	// Set are passed with --set, e.g. "replicaCount=3", then SetJSON with --set-json,
	// e.g. "auth.audiences=[]".
	Set, SetJSON []string
	// IncludeCRDs renders the CRDs of crds/ too, first.
	IncludeCRDs bool
}

func (o Options) args(verb string) []string {
	release, namespace := o.Release, o.Namespace
	if release == "" {
		release = DefaultRelease
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	args := []string{verb, release, ChartDir, "--namespace", namespace}
	for _, f := range o.ValuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range o.Set {
		args = append(args, "--set", s)
	}
	for _, s := range o.SetJSON {
		args = append(args, "--set-json", s)
	}
	return args
}

// Render returns the manifest helm template renders.
func Render(ctx context.Context, o Options) ([]byte, error) {
	args := o.args("template")
	if o.IncludeCRDs {
		args = append(args, "--include-crds")
	}
	return Helm(ctx, args...)
}

// Notes returns the release notes (NOTES.txt) helm install prints, rendered without a
// cluster.
func Notes(ctx context.Context, o Options) (string, error) {
	out, err := Helm(ctx, append(o.args("install"), "--dry-run=client")...)
	if err != nil {
		return "", err
	}
	_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
	if !ok {
		return "", fmt.Errorf("helm install --dry-run printed no NOTES:\n%s", out)
	}
	return notes, nil
}

// Object is one rendered object.
type Object struct {
	APIVersion, Kind, Name, Namespace string
	// Template is the chart file it came from ("switchboard/templates/deployment.yaml").
	Template string
	// YAML is the object's document.
	YAML []byte
}

var (
	documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)
	sourceComment     = regexp.MustCompile(`(?m)^# Source: (.+)$`)
)

// Objects splits a rendered manifest into its objects, skipping empty documents.
func Objects(manifest []byte) ([]Object, error) {
	var objs []Object
	for _, doc := range documentSeparator.Split(string(manifest), -1) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("rendered document: %w\n%s", err, doc)
		}
		if head.Kind == "" {
			continue
		}
		o := Object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name,
			Namespace: head.Metadata.Namespace, YAML: []byte(doc)}
		if m := sourceComment.FindStringSubmatch(doc); m != nil {
			o.Template = m[1]
		}
		objs = append(objs, o)
	}
	return objs, nil
}
