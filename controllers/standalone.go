package controllers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Standalone mode (--manifests DIR): the same kinds are read from YAML files instead of a
// cluster, validated with the Go mirror of the CRD schema and CEL rules, and fed through
// resolve — the code path the reconcilers use — into the routing table.

// Manifests is the content of a manifest folder.
type Manifests struct {
	Deployments []v1alpha1.ModelDeployment
	Policies    []v1alpha1.CapabilityPolicy
	// Budgets are validated and defaulted here like the other kinds, so that an invalid
	// Budget fails the load; enforcing them is the runtime's (spec/budgets.md).
	Budgets []v1alpha1.Budget
	Secrets []corev1.Secret

	// revisions counts, per Secret namespace/name, the changes seen across reloads: the
	// standalone stand-in for a resourceVersion. Apply fills it from the previous load;
	// entries of removed Secrets are kept, so a Secret that comes back counts as changed.
	revisions map[string]uint64
}

// typeMeta is read first to pick the kind of a document.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// LoadManifests reads every *.yaml, *.yml and *.json file of dir (not recursive; files
// starting with "." are skipped, as are Kubernetes' ..data ConfigMap links). Each file may
// hold several documents. Any invalid document fails the whole load with an error naming
// the file, the document and the field — never a Secret value.
func LoadManifests(dir string) (*Manifests, error) {
	files, err := manifestFiles(dir)
	if err != nil {
		return nil, err
	}
	m := &Manifests{}
	seen := map[string]string{} // kind/namespace/name → file
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for doc := 1; ; doc++ {
			var obj rawDoc
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: document %d: not valid YAML or JSON", filepath.Base(f), doc)
			}
			if len(obj) == 0 || string(obj) == "null" {
				continue // empty document between separators
			}
			where := fmt.Sprintf("%s: document %d", filepath.Base(f), doc)
			key, err := m.add(obj)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("%s: %s is also defined in %s", where, key, prev)
			}
			seen[key] = filepath.Base(f)
		}
	}
	return m, nil
}

// rawDoc keeps one document's JSON bytes, as the YAML decoder converts it.
type rawDoc []byte

func (d *rawDoc) UnmarshalJSON(b []byte) error { *d = append((*d)[:0], b...); return nil }

func manifestFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read manifest folder: %w", err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		path := filepath.Join(dir, name)
		if info, err := os.Stat(path); err != nil || info.IsDir() {
			continue // a dangling link or a folder
		}
		files = append(files, path)
	}
	slices.Sort(files)
	return files, nil
}

// add decodes, defaults and validates one document and appends it to m. It returns the
// object's kind/namespace/name.
func (m *Manifests) add(doc []byte) (string, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return "", errors.New("apiVersion and kind must be strings")
	}
	group := v1alpha1.GroupVersion.String()
	switch {
	case tm.Kind == "ModelDeployment" && tm.APIVersion == group:
		md := v1alpha1.ModelDeployment{}
		if err := strictUnmarshal(doc, &md); err != nil {
			return "", err
		}
		if err := validateMeta(md.Name, &md.Namespace); err != nil {
			return "", err
		}
		if err := md.Spec.Validate(); err != nil {
			return "", err
		}
		md.Status = v1alpha1.ModelDeploymentStatus{}
		m.Deployments = append(m.Deployments, md)
		return "ModelDeployment " + md.Namespace + "/" + md.Name, nil
	case tm.Kind == "CapabilityPolicy" && tm.APIVersion == group:
		p := v1alpha1.CapabilityPolicy{}
		if err := strictUnmarshal(doc, &p); err != nil {
			return "", err
		}
		if err := validateMeta(p.Name, &p.Namespace); err != nil {
			return "", err
		}
		if err := p.Spec.Validate(); err != nil {
			return "", err
		}
		if _, err := policySelector(&p); err != nil {
			return "", fmt.Errorf("spec.selector: %w", err)
		}
		if p.Spec.Tools == "" {
			p.Spec.Tools = v1alpha1.ToolsAllowed
		}
		p.Status = v1alpha1.CapabilityPolicyStatus{}
		m.Policies = append(m.Policies, p)
		return "CapabilityPolicy " + p.Namespace + "/" + p.Name, nil
	case tm.Kind == "Budget" && tm.APIVersion == group:
		b := v1alpha1.Budget{}
		if err := strictUnmarshal(doc, &b); err != nil {
			return "", err
		}
		if err := validateMeta(b.Name, &b.Namespace); err != nil {
			return "", err
		}
		if err := b.Spec.Validate(); err != nil {
			return "", err
		}
		if b.Spec.Selector != nil {
			if _, err := metav1.LabelSelectorAsSelector(b.Spec.Selector.AsLabelSelector()); err != nil {
				return "", fmt.Errorf("spec.selector: %w", err)
			}
		}
		if b.Spec.Action == "" {
			b.Spec.Action = v1alpha1.BudgetActionBlock
		}
		// What the API server cannot check (a time zone this runtime does not know)
		// makes the manifest invalid too: the folder's last good state keeps serving.
		if _, invalid := CompileBudget(&b); invalid != "" {
			return "", errors.New(invalid)
		}
		b.Status = v1alpha1.BudgetStatus{}
		m.Budgets = append(m.Budgets, b)
		return "Budget " + b.Namespace + "/" + b.Name, nil
	case tm.Kind == "Secret" && tm.APIVersion == "v1":
		s := corev1.Secret{}
		// Secret errors are generic on purpose: a decoder error could quote a value.
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			return "", errors.New("malformed Secret (data values must be base64; use stringData for plain text)")
		}
		if err := validateMeta(s.Name, &s.Namespace); err != nil {
			return "", err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData { // stringData wins, as on an API server
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
		m.Secrets = append(m.Secrets, s)
		return "Secret " + s.Namespace + "/" + s.Name, nil
	}
	return "", fmt.Errorf("unsupported kind %q of apiVersion %q (want %s ModelDeployment, CapabilityPolicy or Budget, or v1 Secret)",
		tm.Kind, tm.APIVersion, group)
}

func strictUnmarshal(doc []byte, into any) error {
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// validateMeta checks the name and defaults the namespace to "default".
func validateMeta(name string, namespace *string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("metadata.name %q: %s", name, strings.Join(msgs, "; "))
	}
	if *namespace == "" {
		*namespace = "default"
	}
	if msgs := validation.IsDNS1123Label(*namespace); len(msgs) > 0 {
		return fmt.Errorf("metadata.namespace %q: %s", *namespace, strings.Join(msgs, "; "))
	}
	return nil
}

// Apply resolves every ModelDeployment of m exactly as the reconciler does and makes the
// registry hold exactly those that are routable. It records each one's readiness gauge
// and removes the series of those previous held and m does not. It returns the
// per-deployment outcome for logging.
func (m *Manifests) Apply(registry *routing.Registry, previous *Manifests) []Outcome {
	m.countRevisions(previous)
	secrets := map[string]*corev1.Secret{}
	for i := range m.Secrets {
		s := &m.Secrets[i]
		secrets[s.Namespace+"/"+s.Name] = s
	}
	policies := compilePolicies(m.Policies)
	var outcomes []Outcome
	present := map[routing.Ref]bool{}
	for i := range m.Deployments {
		md := &m.Deployments[i]
		var secret *corev1.Secret
		if c := md.Spec.Credentials; c != nil {
			key := md.Namespace + "/" + c.SecretRef.Name
			if secret = secrets[key]; secret != nil {
				// Files have no uid or resourceVersion: the Secret's identity and its change
				// counter stand in for them, so a rotation changes credentialsVersion while
				// the version never derives from the content. The operator wrote the
				// folder, so each of its Secrets is eligible without the opt-in label.
				secret = secret.DeepCopy()
				secret.UID, secret.ResourceVersion = fileSecretIdentity(key, m.revisions[key])
				metav1.SetMetaDataLabel(&secret.ObjectMeta, v1alpha1.CredentialLabel, v1alpha1.CredentialLabelValue)
			}
		}
		res := policies.resolve(md, secret)
		ref := routing.Ref{Namespace: md.Namespace, Name: md.Name}
		present[ref] = true
		registry.Set(ref, res.deployment)
		// WatchManifests publishes the table right after the first Apply, so routable
		// here means live.
		readiness.RecordReady(ref, res.routable.ok)
		outcomes = append(outcomes, Outcome{Ref: ref, Routable: res.routable.ok, Reason: res.routable.reason, Message: res.routable.message})
	}
	if previous != nil {
		for i := range previous.Deployments {
			ref := routing.Ref{Namespace: previous.Deployments[i].Namespace, Name: previous.Deployments[i].Name}
			if !present[ref] {
				registry.Set(ref, nil)
				readiness.Forget(ref)
			}
		}
	}
	return outcomes
}

// countRevisions carries the Secret change counters over from previous (nil at the first
// load) and increments the counter of every Secret whose data differs from previous, or
// that previous did not hold. The comparison stays in memory; only the counter leaves.
func (m *Manifests) countRevisions(previous *Manifests) {
	m.revisions = map[string]uint64{}
	old := map[string]*corev1.Secret{}
	if previous != nil {
		maps.Copy(m.revisions, previous.revisions)
		for i := range previous.Secrets {
			s := &previous.Secrets[i]
			old[s.Namespace+"/"+s.Name] = s
		}
	}
	for i := range m.Secrets {
		s := &m.Secrets[i]
		key := s.Namespace + "/" + s.Name
		prev, seen := old[key]
		if previous == nil || (seen && maps.EqualFunc(prev.Data, s.Data, bytes.Equal)) {
			continue
		}
		m.revisions[key]++
	}
}

// fileSecretIdentity is the uid and resourceVersion standing in for a Secret read from a
// file: its namespace/name and its change counter. credentialsVersion hashes them.
func fileSecretIdentity(namespacedName string, revision uint64) (types.UID, string) {
	return types.UID("file:" + namespacedName), strconv.FormatUint(revision, 10)
}

// Outcome is what happened to one ModelDeployment in standalone mode: the standalone
// equivalent of its Routable condition.
type Outcome struct {
	Ref      routing.Ref
	Routable bool
	Reason   string
	Message  string
}

// WatchManifests loads dir into registry and its Budgets into budgets, publishes the
// table, then reloads whenever a file changes, until ctx ends. A load error at start is
// returned; a broken file later is logged and the last good table and Budgets keep
// serving.
//
// It polls (every interval, 250ms by default) rather than using inotify: Kubernetes
// mounts ConfigMaps and Secrets through symlink swaps that inotify reports unreliably, and
// a stat of a small folder four times a second costs nothing.
func WatchManifests(ctx context.Context, dir string, registry *routing.Registry, budgets *budget.Holder, interval time.Duration, log logr.Logger) error {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	current, err := LoadManifests(dir)
	if err != nil {
		return err
	}
	logOutcomes(log, current.Apply(registry, nil))
	budgets.Store(compileBudgets(current.Budgets))
	registry.Start()
	log.Info("Routing table synced from manifests", "folder", dir, "modelDeployments", len(current.Deployments))

	stamp := folderStamp(dir)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		next := folderStamp(dir)
		if next == stamp {
			continue
		}
		stamp = next
		m, err := LoadManifests(dir)
		if err != nil {
			log.Error(err, "Manifests not applied; the last good routing table keeps serving", "folder", dir)
			continue
		}
		logOutcomes(log, m.Apply(registry, current))
		budgets.Store(compileBudgets(m.Budgets))
		current = m
		log.Info("Manifests applied", "folder", dir, "modelDeployments", len(m.Deployments))
	}
}

// folderStamp summarises the names, sizes and modification times of the manifest files.
func folderStamp(dir string) string {
	files, err := manifestFiles(dir)
	if err != nil {
		return "error: " + err.Error()
	}
	h := sha256.New()
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(h, "%s %d %d\n", f, info.Size(), info.ModTime().UnixNano())
	}
	return string(h.Sum(nil))
}

func logOutcomes(log logr.Logger, outcomes []Outcome) {
	for _, o := range outcomes {
		if o.Routable {
			log.V(1).Info("ModelDeployment routable", "modelDeployment", o.Ref.String())
			continue
		}
		log.Info("ModelDeployment not routable", "modelDeployment", o.Ref.String(), "reason", o.Reason, "message", o.Message)
	}
}

// ReportBudgets records, every interval until ctx ends, what each Budget of o.Holder
// used in o.Metrics: in standalone mode, where no status is written, the metrics are
// how a Budget is watched.
func ReportBudgets(ctx context.Context, o BudgetOptions, interval time.Duration, log logr.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		now := time.Now()
		if o.Now != nil {
			now = o.Now()
		}
		for _, b := range o.Holder.Load().All() {
			if b.Invalid {
				continue
			}
			windows, err := budget.Report(ctx, o.Store, b, now)
			if err != nil {
				if ctx.Err() == nil {
					log.Error(err, "Cannot read a Budget's counters", "budget", b.Namespace+"/"+b.Name)
				}
				continue
			}
			for _, w := range windows {
				o.Metrics.BudgetWindow(b, w)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
