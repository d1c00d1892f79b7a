package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const repoRoot = "../.."

// TestChartUpToDate fails when the chart's generated files differ from their sources: a
// CRD or an RBAC marker changed without `make manifests`, or values.yaml without its
// README table. (make verify catches the same through git; this needs no clean tree.)
func TestChartUpToDate(t *testing.T) {
	files, err := generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	drift, err := diff(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(drift) > 0 {
		t.Errorf("run 'make manifests':\n%s", strings.Join(drift, "\n"))
	}
}

// TestCheckFindsDrift changes each source in a copy of the tree and checks that
// `chartgen -check` names the chart file that went stale, and that a run without -check
// brings it back.
func TestCheckFindsDrift(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, root string)
		want   []string
	}{
		{
			name: "a CRD regenerated",
			change: func(t *testing.T, root string) {
				edit(t, root, "config/crd/bases/ai.switchboard.dev_modeldeployments.yaml", "  names:\n", "  names:\n    shortNames: [md]\n")
			},
			want: []string{"charts/switchboard/crds/ai.switchboard.dev_modeldeployments.yaml: differs from its source"},
		},
		{
			name: "a CRD removed",
			change: func(t *testing.T, root string) {
				remove(t, root, "config/crd/bases/ai.switchboard.dev_capabilitypolicies.yaml")
			},
			want: []string{"charts/switchboard/crds/ai.switchboard.dev_capabilitypolicies.yaml: no longer generated"},
		},
		{
			name: "an RBAC marker changed",
			change: func(t *testing.T, root string) {
				edit(t, root, "config/rbac/role.yaml", "  - tokenreviews\n  verbs:\n  - create\n", "  - tokenreviews\n  verbs:\n  - create\n  - get\n")
			},
			want: []string{"charts/switchboard/templates/rbac/generated/clusterrole-manager.yaml: differs from its source"},
		},
		{
			name: "a namespaced rule of the manager changed",
			change: func(t *testing.T, root string) {
				edit(t, root, "config/rbac/role.yaml", "  - secrets\n  verbs:\n  - get\n", "  - secrets\n  verbs:\n  - get\n  - patch\n")
			},
			want: []string{
				"charts/switchboard/templates/rbac/generated/clusterrole-manager.yaml: differs from its source",
				"charts/switchboard/templates/rbac/generated/role-manager-scoped.yaml: differs from its source",
			},
		},
		{
			name: "a caller role changed",
			change: func(t *testing.T, root string) {
				edit(t, root, "config/rbac/executor_role.yaml", "  - create\n", "  - create\n  - get\n")
			},
			want: []string{"charts/switchboard/templates/rbac/generated/clusterrole-executor.yaml: differs from its source"},
		},
		{
			name: "a value's comment changed",
			change: func(t *testing.T, root string) {
				edit(t, root, "charts/switchboard/values.yaml", "# Image pull policy.\n", "# Image pull policy of the runtime.\n")
			},
			want: []string{"charts/switchboard/README.md: differs from its source"},
		},
		{
			name: "the values table edited by hand",
			change: func(t *testing.T, root string) {
				edit(t, root, "charts/switchboard/README.md", "| Image pull policy. |", "| Pull policy. |")
			},
			want: []string{"charts/switchboard/README.md: differs from its source"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t)
			tc.change(t, root)
			files, err := generate(root)
			if err != nil {
				t.Fatal(err)
			}
			drift, err := diff(root, files)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, drift); d != "" {
				t.Errorf("drift (-want +got):\n%s", d)
			}
			if err := run([]string{"-root", root}, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run([]string{"-root", root, "-check"}, &out); err != nil {
				t.Errorf("after regenerating: %v\n%s", err, out.String())
			}
		})
	}
}

// TestManagerRulesSplitByScope checks how the manager's ClusterRole is split for
// watchNamespaces: rules on namespaced resources go to the Role of each watched
// namespace, the others stay with their reason, a rule naming both is split, and a
// resource chartgen does not know fails the generation.
func TestManagerRulesSplitByScope(t *testing.T) {
	rule := func(group string, verbs []any, resources ...any) map[string]any {
		return map[string]any{"apiGroups": []any{group}, "resources": resources, "verbs": verbs}
	}
	get, create := []any{"get"}, []any{"create"}
	namespaced, cluster, err := splitByScope("role.yaml", []map[string]any{
		rule("", get, "secrets"),
		rule("ai.switchboard.dev", get, "modeldeployments/status"),
		rule("authentication.k8s.io", create, "tokenreviews"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]map[string]any{rule("", get, "secrets"), rule("ai.switchboard.dev", get, "modeldeployments/status")}, namespaced); d != "" {
		t.Errorf("namespaced (-want +got):\n%s", d)
	}
	if len(cluster) != 1 || !cmp.Equal(cluster[0].rule, rule("authentication.k8s.io", create, "tokenreviews")) ||
		len(cluster[0].why) != 1 || !strings.Contains(cluster[0].why[0], "TokenReview is cluster-scoped") {
		t.Errorf("cluster = %+v, want the TokenReview rule with its reason", cluster)
	}

	// One rule, a namespaced and a cluster-scoped resource (as controller-gen merges rules
	// of one group and the same verbs): two rules.
	namespacedResources["authentication.k8s.io/widgets"] = true
	t.Cleanup(func() { delete(namespacedResources, "authentication.k8s.io/widgets") })
	namespaced, cluster, err = splitByScope("role.yaml", []map[string]any{rule("authentication.k8s.io", create, "tokenreviews", "widgets")})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(namespaced, []map[string]any{rule("authentication.k8s.io", create, "widgets")}) ||
		len(cluster) != 1 || !cmp.Equal(cluster[0].rule, rule("authentication.k8s.io", create, "tokenreviews")) {
		t.Errorf("a mixed rule split into %v and %+v", namespaced, cluster)
	}

	for _, tc := range []struct {
		name string
		rule map[string]any
		want string
	}{
		{"unknown resource", rule("", get, "configmaps"), `does not know whether "/configmaps" is namespaced`},
		{"known resource, unknown group", map[string]any{"apiGroups": []any{"", "authentication.k8s.io"},
			"resources": []any{"tokenreviews"}, "verbs": create}, `does not know whether "/tokenreviews" is namespaced`},
		{"non-resource URL", map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": get}, "non-resource URLs"},
	} {
		if _, _, err := splitByScope("role.yaml", []map[string]any{tc.rule}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestEveryValueDocumented checks the rules the values table enforces.
func TestEveryValueDocumented(t *testing.T) {
	schema := []byte(`{"properties": {
		"a": {"description": "A.", "type": "string"},
		"b": {"description": "B.", "type": "object", "properties": {"c": {"$ref": "#/definitions/n"}}},
		"d": {"type": "string"}
	}, "definitions": {"n": {"description": "N.", "type": "integer"}}}`)
	for _, tc := range []struct {
		name, values, wantErr string
		want                  []valueRow
	}{
		{
			name:   "documented",
			values: "# Value a.\na: x\n# Group b.\nb:\n  # Count c,\n  # over two lines.\n  c: 3\n",
			want: []valueRow{
				{key: "a", typ: "string", def: `"x"`, doc: "Value a."},
				{key: "b", typ: "object", doc: "Group b."},
				{key: "b.c", typ: "integer", def: "3", doc: "Count c, over two lines."},
			},
		},
		{name: "no comment", values: "# Value a.\na: x\nb:\n  # C.\n  c: 3\n", wantErr: "b: no comment above it"},
		{name: "not in the schema", values: "# Value a.\na: x\n# E.\ne: 1\n", wantErr: "e: no property in values.schema.json"},
		{name: "nested, not in the schema", values: "# B.\nb:\n  # X.\n  x: 1\n", wantErr: "b.x: no property"},
		{name: "no description in the schema", values: "# D.\nd: x\n", wantErr: "d: no description in values.schema.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := valuesTable([]byte(tc.values), schema)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an error mentioning %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, rows, cmp.AllowUnexported(valueRow{})); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
		})
	}
}

func TestCell(t *testing.T) {
	for in, want := range map[string]string{
		"http://<service>.<namespace>.svc": "http://&lt;service&gt;.&lt;namespace&gt;.svc",
		"`<fullname>-executor` or a|b":     "`<fullname>-executor` or a\\|b",
		"replicas > 1":                     "replicas &gt; 1",
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %q, want %q", in, got, want)
		}
	}
}

// copyTree copies what chartgen reads and writes into a temporary root.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, dir := range []string{"config/crd/bases", "config/rbac", chartDir} {
		if err := os.CopyFS(filepath.Join(dst, dir), os.DirFS(filepath.Join(repoRoot, dir))); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func edit(t *testing.T, root, rel, old, replacement string) {
	t.Helper()
	path := filepath.Join(root, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q", rel, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(replacement), 1), 0o600); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, root, rel string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, rel)); err != nil {
		t.Fatal(err)
	}
}
