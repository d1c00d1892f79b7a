package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/hack/charttest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Installing on a cluster, proven against envtest's real kube-apiserver: every object the
// chart (charts/switchboard) and the kustomize configuration (config/default) render is
// accepted by the API server, and the chart's own RBAC, and nothing else, lets the built
// binary do its whole job in cluster mode (spec/modeldeployments.md, "What the manager
// reads"; spec/authentication.md).
//
// These tests are not parallel: Go runs them before the parallel cluster tests, so no
// other runtime watches the API server meanwhile and every status write seen is the
// tested binary's.

// leaseName is the leader-election Lease the binary holds (its LeaderElectionID).
const leaseName = "switchboard.ai.switchboard.dev"

// bodylessLogLevel is the most verbose logging short of client-go's request and response
// bodies (verbosity 8 and up), which hold the Secret the manager reads: the canary then
// looks for the provider key in everything else the binary logs.
const bodylessLogLevel = "--zap-log-level=7"

// TestInstallDryRun applies everything `helm template` renders, with the default and
// the production values, and everything `kubectl kustomize config/default` renders, to
// the API server with server-side apply and dry run: the API server validates each
// object (the CRDs' schemas for the custom resources) and stores nothing. Server-side
// apply rather than create, because the CRDs and the shipped RBAC are already there, as
// they would be on an upgrade.
func TestInstallDryRun(t *testing.T) {
	w := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	installServiceMonitorCRD(t, w)
	ensureNamespace(t, w, charttest.DefaultNamespace)
	// The production values' watchNamespaces hold a Role and a RoleBinding each.
	ensureNamespace(t, w, productionWatchNamespaces(t)...)

	kubectl := filepath.Join(w.env.BinaryAssetsDirectory, "kubectl")
	kustomized, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join("..", "..", "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", exitDetail(err))
	}
	sources := []struct {
		name     string
		manifest func() ([]byte, error)
	}{
		{"helm template (default values)", func() ([]byte, error) {
			return charttest.Render(ctx, charttest.Options{IncludeCRDs: true})
		}},
		{"helm template (ci/production-values.yaml)", func() ([]byte, error) {
			return charttest.Render(ctx, charttest.Options{IncludeCRDs: true, ValuesFiles: []string{charttest.ProductionValues}})
		}},
		{"kubectl kustomize config/default", func() ([]byte, error) { return kustomized, nil }},
	}
	var deployment *unstructured.Unstructured
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			manifest, err := src.manifest()
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeManifest(t, manifest)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			kinds := map[string]int{}
			for _, u := range objs {
				kinds[u.GetKind()]++
				if err := dryRunApply(ctx, w, u); err != nil {
					t.Errorf("%s %s: %v", u.GetKind(), objectName(u), err)
				}
				if u.GetKind() == "Deployment" && deployment == nil {
					deployment = u.DeepCopy()
				}
			}
			t.Logf("%d objects accepted by server-side dry run: %s", len(objs), kindCounts(kinds))
		})
	}

	t.Run("the dry run validates and stores nothing", func(t *testing.T) {
		if deployment == nil {
			t.Fatal("no Deployment rendered")
		}
		for what, edit := range map[string]func(*unstructured.Unstructured) error{
			"an unknown field": func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, int64(2), "spec", "replica")
			},
			"an invalid value": func(u *unstructured.Unstructured) error {
				return unstructured.SetNestedField(u.Object, int64(-1), "spec", "replicas")
			},
		} {
			broken := deployment.DeepCopy()
			if err := edit(broken); err != nil {
				t.Fatal(err)
			}
			err := dryRunApply(ctx, w, broken)
			if err == nil {
				t.Errorf("a Deployment with %s was accepted", what)
				continue
			}
			t.Logf("a Deployment with %s: %v", what, err)
		}
		err := w.client.Get(ctx, client.ObjectKeyFromObject(deployment), deployment.DeepCopy())
		if !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s after the dry runs: %v, want not found", objectName(deployment), err)
		}
	})
}

// productionWatchNamespaces reads watchNamespaces from the chart's production values.
func productionWatchNamespaces(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(charttest.Root(), charttest.ProductionValues))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		WatchNamespaces []string `json:"watchNamespaces"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", charttest.ProductionValues, err)
	}
	return v.WatchNamespaces
}

// installServiceMonitorCRD installs a stand-in for the Prometheus Operator's
// ServiceMonitor CRD, which envtest does not have. Its schema accepts any spec: the dry
// run proves the API server takes the object of the production values, not that the
// Prometheus Operator of a given version would accept every field.
func installServiceMonitorCRD(t *testing.T, w *kubeWorld) {
	t.Helper()
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: "ServiceMonitor", ListKind: "ServiceMonitorList", Plural: "servicemonitors", Singular: "servicemonitor",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: &preserve},
					},
				}},
			}},
		},
	}
	if _, err := envtest.InstallCRDs(w.env.Config, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{crd},
	}); err != nil {
		t.Fatalf("install the ServiceMonitor CRD: %v", err)
	}
}

func ensureNamespace(t *testing.T, w *kubeWorld, names ...string) {
	t.Helper()
	for _, ns := range names {
		err := w.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
}

// decodeManifest splits a multi-document manifest into objects.
func decodeManifest(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	docs, err := charttest.Objects(manifest)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*unstructured.Unstructured, 0, len(docs))
	for _, d := range docs {
		data, err := yaml.YAMLToJSON(d.YAML)
		if err != nil {
			t.Fatalf("%s %s: %v", d.Kind, d.Name, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("%s %s: %v", d.Kind, d.Name, err)
		}
		out = append(out, u)
	}
	return out
}

// dryRunApply applies u with server-side apply in dry-run mode, as `kubectl apply
// --server-side --dry-run=server` does. A namespaced object must name its namespace and
// a cluster-scoped one must not: what lands where may not depend on the applier's
// kubeconfig context.
func dryRunApply(ctx context.Context, w *kubeWorld, u *unstructured.Unstructured) error {
	mapping, err := w.client.RESTMapper().RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
	if err != nil {
		return fmt.Errorf("no such kind on the API server: %w", err)
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	switch {
	case namespaced && u.GetNamespace() == "":
		return errors.New("namespaced, but names no namespace")
	case !namespaced && u.GetNamespace() != "":
		return fmt.Errorf("cluster-scoped, but names namespace %s", u.GetNamespace())
	}
	// The client writes the API server's answer into the object it applies: apply a copy.
	return w.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
		client.DryRunAll, client.ForceOwnership, client.FieldOwner("install-dry-run"))
}

func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() != "" {
		return u.GetNamespace() + "/" + u.GetName()
	}
	return u.GetName()
}

func kindCounts(kinds map[string]int) string {
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, kinds[k])
	}
	return strings.Join(parts, ", ")
}

func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

// TestChartRBAC runs the built binary with the Deployment's arguments and environment as
// the chart renders them (listen addresses, grace periods and log level aside), as the
// chart's ServiceAccount, bound by nothing but the chart's rendered RBAC, applied for
// real: once as installed by default (the manager's ClusterRole bound cluster-wide) and
// once with watchNamespaces (a Role and RoleBinding in each watched namespace, and only
// TokenReview and SubjectAccessReview cluster-wide). Each time it must do its whole job
// without a single refusal, and may do no more than spec/modeldeployments.md ("What the
// manager reads") lists.
func TestChartRBAC(t *testing.T) {
	w := cluster(t)
	for _, mode := range []struct {
		name    string
		release string
		scoped  bool
	}{
		{"cluster-wide (default values)", "wide", false},
		{"watchNamespaces", "scoped", true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			testChartRBAC(t, w, mode.release, mode.scoped)
		})
	}
}

// chartInstall is one release of the chart in the API server: its RBAC applied, its
// Deployment's container read.
type chartInstall struct {
	// fullname prefixes the chart's objects; account is its ServiceAccount.
	fullname, account string
	args              []string
	env               []corev1.EnvVar
	// rbac are the ServiceAccount and RBAC objects created.
	rbac []*unstructured.Unstructured
}

func testChartRBAC(t *testing.T, w *kubeWorld, release string, scoped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The release's own namespace; the models' namespace, the one the binary watches when
	// scoped; and a namespace with a Secret no model references.
	releaseNS, models, elsewhere := release+"-system", release+"-models", release+"-elsewhere"
	ensureNamespace(t, w, releaseNS, models, elsewhere)

	opts := charttest.Options{Release: release, Namespace: releaseNS, SetJSON: []string{
		fmt.Sprintf(`rbac.metricsReaderSubjects=[{"kind":"ServiceAccount","name":"scraper","namespace":%q}]`, models),
		// The demo provider listens on loopback, as a model server in the pod would.
		`runtime.allowLoopbackEndpoints=true`,
	}}
	if scoped {
		opts.SetJSON = append(opts.SetJSON, fmt.Sprintf(`watchNamespaces=[%q]`, models))
	}
	inst := installChartRBAC(ctx, t, w, opts)
	t.Logf("release %s: ServiceAccount %s/%s, arguments %q", release, releaseNS, inst.account, inst.args)

	// The models' namespace: a credential Secret, a model of the demo provider, a caller
	// bound to the chart's executor role, a scraper (bound by the chart's
	// metricsReaderSubjects), and a Secret that is not a credential, which a model names
	// anyway (as anyone who may write ModelDeployments could); elsewhere: a Secret nothing
	// references.
	apply(ctx, t, w, demoSecretYAML(models)+demoModelYAML(w.providerAddr, models, "chat", "openai-compatible", "openai/v1", "echo", "chat")+fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: database, namespace: %[1]s}
stringData: {api-key: db-password-4d2a}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: exfiltrate, namespace: %[1]s}
spec:
  provider: openai-compatible
  model: echo
  endpoint: http://%[4]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: database, key: api-key}}
  abilities: [exfiltrate]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: caller, namespace: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: caller-executor, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[2]s-executor}
subjects: [{kind: ServiceAccount, name: caller, namespace: %[1]s}]
---
apiVersion: v1
kind: Secret
metadata: {name: unrelated, namespace: %[3]s}
stringData: {password: not-for-switchboard}
`, models, inst.fullname, elsewhere, w.providerAddr))

	c := newAuthClient()
	c.secret("the demo provider's key", e2eKey)
	c.secret("the unrelated Secret", "not-for-switchboard")
	c.secret("the Secret that did not opt in", "db-password-4d2a")
	managerToken := c.secret("the chart ServiceAccount's token", w.token(t, releaseNS, inst.account))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeKubeconfig(kubeconfig, w.env.Config, managerToken); err != nil {
		t.Fatal(err)
	}
	env, err := podEnv(inst, releaseNS)
	if err != nil {
		t.Fatal(err)
	}
	sb := startInClusterAs(t, clusterIdentity{kubeconfig: kubeconfig, env: env}, release,
		append(withoutListeners(inst.args), "--shutdown-grace=1s", "--cleanup-grace=1s", bodylessLogLevel)...)

	key := client.ObjectKey{Namespace: models, Name: "chat"}
	first := waitModelStatus(t, w, key, 20*time.Second, "Ready with a credentials version", func(md *v1alpha1.ModelDeployment) bool {
		return meta.IsStatusConditionTrue(md.Status.Conditions, v1alpha1.ConditionReady) && md.Status.CredentialsVersion != ""
	})

	t.Run("it leads: holds the Lease in the release namespace and writes status", func(t *testing.T) {
		lease, err := w.admin.CoordinationV1().Leases(releaseNS).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Lease %s/%s: %v", releaseNS, leaseName, err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			t.Errorf("Lease %s/%s has no holder", releaseNS, leaseName)
		}
		waitStatusWrite(t, sb, key)
		scraper := c.secret("the scraper's token", w.token(t, models, "scraper"))
		if v := metricValue(t, sb.metrics, scraper, `leader_election_master_status{name="`+leaseName+`"}`); v != "1" {
			t.Errorf("leader_election_master_status = %q, want 1", v)
		}
	})

	t.Run("it serves an execution to a caller bound to the chart's executor role", func(t *testing.T) {
		caller := c.secret("the caller's token", w.token(t, models, "caller", callerAudience))
		base := "http://" + sb.api
		a := c.submit(t, base, caller, chatBody("hello from the chart"))
		st := c.waitTerminal(t, base, caller, a.ID)
		if st.Status != protocol.StatusCompleted || st.Route == nil || st.Route.Deployment != key.String() {
			t.Errorf("execution: %+v, route %+v; want completed on %s", st, st.Route, key)
		}
	})

	t.Run("it does not use a Secret that did not opt in", func(t *testing.T) {
		md := waitModelStatus(t, w, client.ObjectKey{Namespace: models, Name: "exfiltrate"}, 10*time.Second, "SecretNotEligible",
			func(md *v1alpha1.ModelDeployment) bool {
				c := meta.FindStatusCondition(md.Status.Conditions, v1alpha1.ConditionCredentialsResolved)
				return c != nil && c.Reason == v1alpha1.ReasonSecretNotEligible
			})
		if meta.IsStatusConditionTrue(md.Status.Conditions, v1alpha1.ConditionReady) {
			t.Errorf("%s/exfiltrate is Ready with a Secret that did not opt in", models)
		}
	})

	t.Run("it follows a rotated Secret", func(t *testing.T) {
		var s corev1.Secret
		if err := w.client.Get(ctx, client.ObjectKey{Namespace: models, Name: "demo"}, &s); err != nil {
			t.Fatal(err)
		}
		// A new revision of the Secret; the key stays the one the demo provider accepts.
		s.StringData = map[string]string{"rotated": "1"}
		if err := w.client.Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		waitModelStatus(t, w, key, 10*time.Second, "a new credentials version", func(md *v1alpha1.ModelDeployment) bool {
			return md.Status.CredentialsVersion != "" && md.Status.CredentialsVersion != first.Status.CredentialsVersion &&
				meta.IsStatusConditionTrue(md.Status.Conditions, v1alpha1.ConditionReady)
		})
	})

	t.Run("no wider", func(t *testing.T) {
		as := kubernetes.NewForConfigOrDie(tokenConfig(w.env.Config, managerToken))
		_, errOther := as.CoreV1().Secrets(elsewhere).Get(ctx, "unrelated", metav1.GetOptions{})
		_, errList := as.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		_, errOwn := as.CoreV1().Secrets(models).Get(ctx, "demo", metav1.GetOptions{})
		if errOwn != nil {
			t.Errorf("get of the referenced Secret %s/demo: %v", models, errOwn)
		}
		if scoped {
			// Namespaced Roles only: not even an unbound ClusterRole of the release holds
			// Secrets.
			for _, u := range inst.rbac {
				if u.GetKind() != "ClusterRole" {
					continue
				}
				var cr rbacv1.ClusterRole
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cr); err != nil {
					t.Fatal(err)
				}
				for _, r := range cr.Rules {
					if slices.Contains(r.Resources, "secrets") {
						t.Errorf("ClusterRole %s grants %v on Secrets", cr.Name, r.Verbs)
					}
				}
			}
			if !apierrors.IsForbidden(errOther) {
				t.Errorf("get of the unreferenced Secret %s/unrelated: %v, want forbidden", elsewhere, errOther)
			}
			if !apierrors.IsForbidden(errList) {
				t.Errorf("list of Secrets in all namespaces: %v, want forbidden", errList)
			}
		} else {
			// The metadata-only watch of Secrets needs list and watch on secrets, which RBAC
			// cannot grant for metadata alone: bound cluster-wide, the identity may read
			// every Secret (spec/modeldeployments.md, "What the manager reads"). The binary
			// itself never does (its cache keeps metadata and it gets the referenced Secret
			// only); watchNamespaces is the chart's way to close this.
			if errOther != nil || errList != nil {
				t.Errorf("cluster-wide binding: get of %s/unrelated = %v, list of all Secrets = %v; "+
					"spec/modeldeployments.md says both are allowed", elsewhere, errOther, errList)
			}
			t.Logf("as documented, the default install's identity may get %s/unrelated and list every Secret", elsewhere)
		}
		for _, ra := range []authorizationv1.ResourceAttributes{
			{Namespace: models, Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: "modeldeployments"},
			{Namespace: models, Verb: "update", Group: v1alpha1.GroupVersion.Group, Resource: "modeldeployments"},
			{Namespace: models, Verb: "delete", Group: v1alpha1.GroupVersion.Group, Resource: "capabilitypolicies"},
			{Namespace: models, Verb: "update", Resource: "secrets"},
			{Namespace: models, Verb: "create", Resource: "secrets"},
			{Namespace: models, Verb: "get", Resource: "configmaps"},
			{Namespace: models, Verb: "get", Group: "coordination.k8s.io", Resource: "leases"},
			{Namespace: releaseNS, Verb: "delete", Group: "coordination.k8s.io", Resource: "leases"},
			{Namespace: releaseNS, Verb: "list", Group: "coordination.k8s.io", Resource: "leases"},
			{Namespace: models, Verb: "create", Resource: "pods"},
			{Verb: "create", Group: rbacv1.GroupName, Resource: "clusterrolebindings"},
		} {
			if allowed := selfAccess(ctx, t, as, ra); allowed {
				t.Errorf("the chart's identity may %s %s %s in %q", ra.Verb, ra.Group, ra.Resource, ra.Namespace)
			}
		}
	})

	out := sb.out.String()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the binary was refused something (the chart's RBAC is short of it): %s", line)
		}
	}
	c.canary(t, "switchboard "+release, out)
}

// installChartRBAC renders the chart with opts and creates its ServiceAccount and RBAC
// objects for real; it returns the release with its Deployment's container arguments.
func installChartRBAC(ctx context.Context, t *testing.T, w *kubeWorld, opts charttest.Options) chartInstall {
	t.Helper()
	manifest, err := charttest.Render(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var inst chartInstall
	var applied []string
	for _, u := range decodeManifest(t, manifest) {
		switch u.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				t.Fatal(err)
			}
			cs := d.Spec.Template.Spec.Containers
			if len(cs) != 1 {
				t.Fatalf("Deployment %s has %d containers, want 1", d.Name, len(cs))
			}
			inst.fullname, inst.account = d.Name, d.Spec.Template.Spec.ServiceAccountName
			inst.args, inst.env = cs[0].Args, cs[0].Env
			continue
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		if err := w.client.Create(ctx, u); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), objectName(u), err)
		}
		applied = append(applied, u.GetKind()+" "+objectName(u))
		inst.rbac = append(inst.rbac, u)
	}
	if inst.account == "" {
		t.Fatal("the chart rendered no Deployment with a ServiceAccount")
	}
	t.Logf("the chart's RBAC, created: %s", strings.Join(applied, "; "))
	return inst
}

// podEnv is the environment the chart's container gets: plain values as they are, and
// the pod's namespace where the downward API would give it; any other source fails.
func podEnv(inst chartInstall, namespace string) ([]string, error) {
	var env []string
	for _, e := range inst.env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+namespace)
		default:
			return nil, fmt.Errorf("env %s: a source the test cannot provide outside a pod", e.Name)
		}
	}
	return env, nil
}

// withoutListeners drops the listen addresses from the chart's arguments: the test gives
// each binary free loopback ports instead.
func withoutListeners(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		for _, f := range []string{"--runtime-bind-address", "--health-probe-bind-address", "--metrics-bind-address"} {
			if a == f || strings.HasPrefix(a, f+"=") {
				return true
			}
		}
		return false
	})
}

// apply creates the objects of a multi-document YAML stream, as they are.
func apply(ctx context.Context, t *testing.T, w *kubeWorld, docs string) {
	t.Helper()
	for _, u := range decodeManifest(t, []byte(docs)) {
		if err := w.client.Create(ctx, u); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), objectName(u), err)
		}
	}
}

// waitModelStatus polls a ModelDeployment until cond holds and returns it.
func waitModelStatus(t *testing.T, w *kubeWorld, key client.ObjectKey, timeout time.Duration, what string, cond func(*v1alpha1.ModelDeployment) bool) *v1alpha1.ModelDeployment {
	t.Helper()
	md := &v1alpha1.ModelDeployment{}
	deadline := time.Now().Add(timeout)
	for {
		err := w.client.Get(context.Background(), key, md)
		if err == nil && cond(md) {
			return md
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %s within %s (error %v, status %+v)", key, what, timeout, err, md.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tokenConfig is cfg's API server with a bearer token instead of cfg's credentials.
func tokenConfig(cfg *rest.Config, token string) *rest.Config {
	return &rest.Config{Host: cfg.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}}
}

// selfAccess asks the API server whether the client's own identity may do ra.
func selfAccess(ctx context.Context, t *testing.T, as kubernetes.Interface, ra authorizationv1.ResourceAttributes) bool {
	t.Helper()
	r, err := as.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectAccessReview %+v: %v", ra, err)
	}
	return r.Status.Allowed
}

// metricValue scrapes the secure /metrics endpoint at addr with token and returns the
// value of the sample series (name and labels as exposed), or "" when it is absent.
func metricValue(t *testing.T, addr, token, series string) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		//nolint:gosec // G402: the metrics server's certificate is self-signed, as kubebuilder scaffolds it.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return sampleValue(string(body), series)
}

// sampleValue returns the value of series in a Prometheus text exposition, or "".
func sampleValue(exposition, series string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
