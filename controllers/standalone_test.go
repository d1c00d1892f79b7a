package controllers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const standaloneCanary = "CANARY-standalone-7d1e"

const manifestsYAML = `apiVersion: v1
kind: Secret
metadata: {name: openai, namespace: ai}
stringData:
  api-key: ` + standaloneCanary + `
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: gpt, namespace: ai, labels: {tier: standard}}
spec:
  provider: openai
  model: gpt-4o-mini
  credentials: {secretRef: {name: openai, key: api-key}}
  abilities: [chat]
  capabilities: {tools: true}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: local, namespace: ai}
spec:
  provider: openai-compatible
  model: llama
  endpoint: http://127.0.0.1:9090/openai/v1
  allowInsecureEndpoint: true
  abilities: [chat]
`

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadManifestsBuildsTheTable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "models.yaml", manifestsYAML)
	writeFile(t, dir, "policy.yml", `apiVersion: ai.switchboard.dev/v1alpha1
kind: CapabilityPolicy
metadata: {name: strict-tools, namespace: ai}
spec: {selector: {matchLabels: {tier: standard}}, tools: Disabled}
`)
	writeFile(t, dir, "notes.txt", "not a manifest")
	m, err := LoadManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := &routing.Holder{}
	reg := routing.NewRegistry(h)
	m.Apply(reg, nil)
	reg.Start()
	gpt, ok := h.Load().Get(routing.Ref{Namespace: "ai", Name: "gpt"})
	if !ok || gpt.Credential.Reveal() != standaloneCanary || gpt.Weight != 100 {
		t.Fatalf("gpt entry = %v (ok %v)", gpt, ok)
	}
	if gpt.Capabilities.Has(routing.CapsOf(protocol.CapTools)) {
		t.Error("the policy from another file did not disable tools")
	}
	if _, ok := h.Load().Get(routing.Ref{Namespace: "ai", Name: "local"}); !ok {
		t.Error("openai-compatible deployment without credentials missing")
	}
}

func TestLoadManifestsRejectsBadDocuments(t *testing.T) {
	valid := manifestsYAML
	tests := map[string]struct {
		content string
		want    string
	}{
		"cel rule":       {strings.Replace(valid, "allowInsecureEndpoint: true", "allowInsecureEndpoint: false", 1), "endpoint must use https unless allowInsecureEndpoint is true"},
		"unknown field":  {strings.Replace(valid, "model: llama", "model: llama\n  unknownField: typo", 1), "unknown field"},
		"unknown kind":   {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", `unsupported kind "ConfigMap"`},
		"bad name":       {strings.Replace(valid, "name: gpt,", "name: GPT,", 1), "metadata.name"},
		"duplicate":      {valid + "---\n" + valid[strings.Index(valid, "apiVersion: ai"):], "also defined"},
		"bad base64":     {"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: " + standaloneCanary + "}\n", "malformed Secret"},
		"not yaml":       {"{{{", "not valid YAML"},
		"replicate caps": {strings.Replace(valid, "provider: openai\n", "provider: replicate\n", 1), "provider replicate must declare"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "m.yaml", tt.content)
			_, err := LoadManifests(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadManifests error = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), standaloneCanary) {
				t.Errorf("error leaks a Secret value: %v", err)
			}
			if !strings.Contains(err.Error(), "m.yaml: document") {
				t.Errorf("error does not name the file and document: %v", err)
			}
		})
	}
}

func TestWatchManifestsAppliesEditsAndKeepsTheLastGoodTable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "models.yaml", manifestsYAML)
	var (
		mu   sync.Mutex
		logs bytes.Buffer
	)
	logged := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 1})
	h := &routing.Holder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchManifests(ctx, dir, routing.NewRegistry(h), new(budget.Holder), 20*time.Millisecond, log)
	}()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func(*routing.Table) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Second) // the contract: changes apply within 1 s
		for !cond(h.Load()) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 1s: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("initial table", func(tb *routing.Table) bool { return h.Synced() && tb.Len() == 2 })

	// Rotate the credential and suspend one model.
	edited := strings.Replace(manifestsYAML, standaloneCanary, standaloneCanary+"-2", 1)
	edited = strings.Replace(edited, "abilities: [chat]\n", "abilities: [chat]\n  suspend: true\n", 1)
	writeFile(t, dir, "models.yaml", edited)
	waitFor("rotation and suspension", func(tb *routing.Table) bool {
		d, ok := tb.Get(routing.Ref{Namespace: "ai", Name: "local"})
		return tb.Len() == 1 && ok && d != nil
	})

	// A broken file is logged and the last good table keeps serving.
	before := h.Load()
	writeFile(t, dir, "broken.yaml", "apiVersion: ai.switchboard.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {name: x}\nspec: {provider: nope}\n")
	time.Sleep(200 * time.Millisecond)
	if h.Load() != before {
		t.Error("a broken file replaced the table")
	}
	if !strings.Contains(logged(), "Manifests not applied") {
		t.Errorf("broken file not reported in the log:\n%s", logged())
	}
	if strings.Contains(logged(), standaloneCanary) {
		t.Error("the log holds a Secret value")
	}

	// Removing the broken file and the whole models file empties the table.
	os.Remove(filepath.Join(dir, "broken.yaml"))
	os.Remove(filepath.Join(dir, "models.yaml"))
	waitFor("removal", func(tb *routing.Table) bool { return tb.Len() == 0 })
}

// In standalone mode credentialsVersion comes from the Secret's namespace/name and a
// change counter kept across reloads: an unchanged Secret keeps its version, a changed
// one gets a new version, and the version is no function of the content.
func TestStandaloneCredentialsVersionCountsChanges(t *testing.T) {
	secret := func(value string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata: {name: openai, namespace: ai}\nstringData: {api-key: " + value + "}\n"
	}
	const model = `apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: gpt, namespace: ai}
spec:
  provider: openai
  model: gpt-4o-mini
  credentials: {secretRef: {name: openai, key: api-key}}
  abilities: [chat]
`
	const unrelated = "apiVersion: v1\nkind: Secret\nmetadata: {name: unrelated, namespace: ai}\nstringData: {k: "
	load := func(docs ...string) *Manifests {
		t.Helper()
		dir := t.TempDir()
		writeFile(t, dir, "m.yaml", strings.Join(append(docs, model), "---\n"))
		m, err := LoadManifests(dir)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	version := func(m, previous *Manifests) string {
		t.Helper()
		h := &routing.Holder{}
		reg := routing.NewRegistry(h)
		m.Apply(reg, previous)
		reg.Start()
		d, ok := h.Load().Get(routing.Ref{Namespace: "ai", Name: "gpt"})
		if !ok {
			return ""
		}
		return d.CredentialsVersion
	}
	counterVersion := func(revision uint64) string {
		uid, rv := fileSecretIdentity("ai/openai", revision)
		return credentialsVersion(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{UID: uid, ResourceVersion: rv}})
	}

	m0 := load(secret("sk-A"), unrelated+"1}\n")
	v0 := version(m0, nil)
	if v0 != counterVersion(0) {
		t.Fatalf("first version = %q, want the counter-0 version %q", v0, counterVersion(0))
	}
	m1 := load(secret("sk-A"), unrelated+"2}\n") // only another Secret changed
	if v := version(m1, m0); v != v0 {
		t.Errorf("unchanged Secret: version %q, want %q kept", v, v0)
	}
	m2 := load(secret("sk-B"), unrelated+"2}\n")
	v2 := version(m2, m1)
	if v2 == v0 || v2 != counterVersion(1) {
		t.Errorf("changed Secret: version %q, want the counter-1 version %q", v2, counterVersion(1))
	}
	m3 := load(secret("sk-A")) // the first content again, at another counter
	if v := version(m3, m2); v == v0 || v != counterVersion(2) {
		t.Errorf("same content at another counter: version %q, want the counter-2 version %q (not %q)", v, counterVersion(2), v0)
	}
	m4 := load() // the Secret disappears, then comes back: a change too
	if v := version(m4, m3); v != "" {
		t.Errorf("model routed without its Secret (version %q)", v)
	}
	if v := version(load(secret("sk-A")), m4); v != counterVersion(3) {
		t.Errorf("Secret back after a removal: version %q, want the counter-3 version %q", v, counterVersion(3))
	}
	// Different content at the same counter: the same version.
	if v := version(load(secret("sk-B")), nil); v != v0 {
		t.Errorf("different content, same counter: version %q, want %q", v, v0)
	}
}

// Apply sets switchboard_modeldeployment_ready for every ModelDeployment it resolves and
// deletes the series of one that a later load no longer holds.
func TestApplyRecordsReadiness(t *testing.T) {
	const (
		routable = `apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: local, namespace: ready-gauge}
spec:
  provider: openai-compatible
  model: llama
  endpoint: http://127.0.0.1:9090/openai/v1
  allowInsecureEndpoint: true
  abilities: [chat]
`
		noSecret = `apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: gpt, namespace: ready-gauge}
spec:
  provider: openai
  model: gpt-4o-mini
  credentials: {secretRef: {name: missing, key: api-key}}
  abilities: [chat]
`
	)
	local := routing.Ref{Namespace: "ready-gauge", Name: "local"}
	gpt := routing.Ref{Namespace: "ready-gauge", Name: "gpt"}
	load := func(docs ...string) *Manifests {
		t.Helper()
		dir := t.TempDir()
		writeFile(t, dir, "m.yaml", strings.Join(docs, "---\n"))
		m, err := LoadManifests(dir)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	expect := func(ref routing.Ref, wantFound bool, want float64) {
		t.Helper()
		v, found, err := readySeries(ref)
		if err != nil {
			t.Fatal(err)
		}
		if found != wantFound || v != want {
			t.Errorf("%s: series found %v value %v, want found %v value %v", ref, found, v, wantFound, want)
		}
	}

	reg := routing.NewRegistry(&routing.Holder{})
	first := load(routable, noSecret)
	first.Apply(reg, nil)
	expect(local, true, 1)
	expect(gpt, true, 0)

	second := load(noSecret)
	second.Apply(reg, first)
	expect(local, false, 0)
	expect(gpt, true, 0)

	load().Apply(reg, second)
	expect(gpt, false, 0)
}

// The samples under config/samples pass the Go mirror of the CRD rules (the API server
// runs the same rules on them in a cluster), and the cluster samples' Secrets opt in, or
// their models would never be routed.
func TestSamplesAreValid(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "config", "samples", "ai_*.yaml"))
	standalone, _ := filepath.Glob(filepath.Join("..", "config", "samples", "standalone", "*.yaml"))
	if len(files) == 0 || len(standalone) == 0 {
		t.Fatal("no samples found")
	}
	for _, f := range append(files, standalone...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		writeFile(t, dir, filepath.Base(f), string(data))
		m, err := LoadManifests(dir)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if filepath.Base(filepath.Dir(f)) == "standalone" {
			continue
		}
		for i := range m.Secrets {
			if !optedIn(&m.Secrets[i]) {
				t.Errorf("%s: Secret %s is not labelled %s: %q", f, m.Secrets[i].Name, v1alpha1.CredentialLabel, v1alpha1.CredentialLabelValue)
			}
		}
	}
}
