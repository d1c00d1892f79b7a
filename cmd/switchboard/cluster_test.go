package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// Cluster mode of the built binary: the real kube-apiserver and etcd that
// hack/envtest-assets.sh builds into bin/k8s, with the generated CRDs, holding the
// models, reviewing the callers' tokens and answering access reviews with real RBAC
// (spec/authentication.md). One API server serves the whole test binary; it is started
// by the first test that needs it, so that the standalone tests do not wait for it, and
// stopped by TestMain.
//
// The binary gets exactly the permissions config/rbac ships: it runs as the
// ServiceAccount switchboard-system/switchboard, bound (by role_binding.yaml) to the
// ClusterRole switchboard-manager (role.yaml, generated from the RBAC markers), with a
// kubeconfig holding a token of that ServiceAccount.
//
// The world the tests share:
//   - team-a: models alpha-chat (ability chat) and alpha-stall (ability stall, a stream
//     that never ends); ServiceAccounts alice and carol, executors in team-a.
//   - team-b: models beta-chat (chat) and beta-summarizer (summarize, served nowhere
//     else); ServiceAccount bob, executor in team-b.
//   - callers: ServiceAccounts viewer (switchboard-execution-viewer in team-a only),
//     nobody (no binding) and scraper (switchboard-metrics-reader, cluster-wide).

// Namespaces and names of the shared world.
const (
	managerNamespace = "switchboard-system"
	managerAccount   = "switchboard"
	teamA            = "team-a"
	teamB            = "team-b"
	callersNamespace = "callers"
	// callerAudience is the runtime's default --auth-audiences.
	callerAudience = "switchboard"
)

// kube is the test binary's API server, started once by cluster.
var kube struct {
	once  sync.Once
	world *kubeWorld
	err   error
}

// kubeWorld is the running API server with the shared world in it.
type kubeWorld struct {
	env    *envtest.Environment
	admin  kubernetes.Interface // the envtest administrator (system:masters)
	client client.Client        // the same, with the switchboard types
	dir    string
	// kubeconfig is the manager's kubeconfig file: the API server and a token of the
	// ServiceAccount switchboard-system/switchboard.
	kubeconfig   string
	managerToken string
	// provider is the demo provider every model of the world points at, listening on
	// providerAddr.
	provider     *exec.Cmd
	providerOut  *lockedBuffer
	providerAddr string
}

// cluster returns the shared API server with the world in it, starting it on first use.
func cluster(tb testing.TB) *kubeWorld {
	tb.Helper()
	kube.once.Do(func() {
		start := time.Now()
		kube.world, kube.err = startKubeWorld()
		if kube.err == nil {
			fmt.Fprintf(os.Stderr, "envtest API server and shared world ready in %s\n", time.Since(start).Round(time.Millisecond))
		}
	})
	if kube.err != nil {
		tb.Fatalf("envtest (run 'make envtest-assets' first): %v", kube.err)
	}
	return kube.world
}

// stopCluster stops the API server and the demo provider, if cluster started them.
func stopCluster() {
	if kube.world != nil {
		kube.world.stop()
	}
}

func startKubeWorld() (w *kubeWorld, err error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "bin", "k8s")
	}
	w = &kubeWorld{env: &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}}
	cfg, err := w.env.Start()
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	defer func() {
		if err != nil {
			w.stop()
			w = nil
		}
	}()
	if w.dir, err = os.MkdirTemp("", "switchboard-cluster-"); err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	if w.admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if w.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The demo provider outlives single tests: it lives as long as the world.
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	w.providerOut, w.providerAddr = &lockedBuffer{}, addr
	w.provider = exec.Command(filepath.Join(binDir, "demoprovider"), "--addr", addr, "--api-key", e2eKey, "--quiet")
	w.provider.Stdout, w.provider.Stderr = w.providerOut, w.providerOut
	if err := w.provider.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(w.providerOut.String(), "listening on"); {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("demo provider did not start: %s", w.providerOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	for _, ns := range []string{managerNamespace, teamA, teamB, callersNamespace} {
		if err := w.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	// The RBAC config/rbac ships, exactly as kustomize would apply it (its kustomization
	// has no namespace or name transformations).
	if err := w.applyKustomization(ctx, filepath.Join("..", "..", "config", "rbac"), scheme); err != nil {
		return nil, err
	}
	if err := w.apply(ctx, scheme, worldManifests(addr)); err != nil {
		return nil, err
	}
	for _, sa := range []struct{ ns, name string }{
		{teamA, "alice"}, {teamA, "carol"}, {teamB, "bob"},
		{callersNamespace, "viewer"}, {callersNamespace, "nobody"}, {callersNamespace, "scraper"},
	} {
		if err := w.client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.ns, Name: sa.name}}); err != nil {
			return nil, err
		}
	}
	bindings := []client.Object{
		roleBinding(teamA, "alice-executor", "switchboard-executor", teamA, "alice"),
		roleBinding(teamA, "carol-executor", "switchboard-executor", teamA, "carol"),
		roleBinding(teamB, "bob-executor", "switchboard-executor", teamB, "bob"),
		roleBinding(teamA, "viewer-execution-viewer", "switchboard-execution-viewer", callersNamespace, "viewer"),
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "switchboard-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: callersNamespace, Name: "scraper"}},
		},
	}
	for _, b := range bindings {
		if err := w.client.Create(ctx, b); err != nil {
			return nil, err
		}
	}

	// The manager's token: the API server's own audience, as a pod's default token.
	if w.managerToken, err = w.mintToken(ctx, managerNamespace, managerAccount, 3600); err != nil {
		return nil, fmt.Errorf("token of the manager's ServiceAccount: %w", err)
	}
	w.kubeconfig = filepath.Join(w.dir, "kubeconfig")
	if err := writeKubeconfig(w.kubeconfig, cfg, w.managerToken); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *kubeWorld) stop() {
	if w.provider != nil && w.provider.Process != nil {
		_ = w.provider.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = w.provider.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = w.provider.Process.Kill()
		}
	}
	if err := w.env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	if w.dir != "" {
		os.RemoveAll(w.dir)
	}
}

// freePort returns a free loopback address, as freeAddr does for a test.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// worldManifests are the models of team-a and team-b, served by the demo provider at
// provider.
func worldManifests(provider string) string {
	return demoSecretYAML(teamA) + demoSecretYAML(teamB) +
		demoModelYAML(provider, teamA, "alpha-chat", "openai-compatible", "openai/v1", "echo", "chat") +
		demoModelYAML(provider, teamA, "alpha-stall", "openai-compatible", "openai/v1", "echo-stall", "stall") +
		demoModelYAML(provider, teamB, "beta-chat", "openai-compatible", "openai/v1", "echo", "chat") +
		demoModelYAML(provider, teamB, "beta-summarizer", "anthropic", "anthropic", "echo", "summarize")
}

// demoSecretYAML is the Secret "demo" of namespace ns, holding the demo provider's key and
// opted in as a model credential.
func demoSecretYAML(ns string) string {
	return fmt.Sprintf(`---
apiVersion: v1
kind: Secret
metadata: {name: demo, namespace: %s, labels: {ai.switchboard.dev/credential: "true"}}
stringData: {api-key: %s}
`, ns, e2eKey)
}

// demoModelYAML is a streaming ModelDeployment ns/name of the demo provider at
// providerAddr, using the Secret of demoSecretYAML: providerKind is its spec.provider and
// path the demo provider's path for that wire format.
func demoModelYAML(providerAddr, ns, name, providerKind, path, model, ability string) string {
	return fmt.Sprintf(`---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  provider: %[3]s
  model: %[5]s
  endpoint: http://%[7]s/%[4]s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [%[6]s]
  capabilities: {streaming: true}
`, ns, name, providerKind, path, model, ability, providerAddr)
}

// worldDeployments are the ModelDeployments of worldManifests.
var worldDeployments = []client.ObjectKey{
	{Namespace: teamA, Name: "alpha-chat"}, {Namespace: teamA, Name: "alpha-stall"},
	{Namespace: teamB, Name: "beta-chat"}, {Namespace: teamB, Name: "beta-summarizer"},
}

// applyKustomization creates the resources a kustomization.yaml lists.
func (w *kubeWorld) applyKustomization(ctx context.Context, dir string, scheme *runtime.Scheme) error {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			return err
		}
		if err := w.apply(ctx, scheme, string(data)); err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
	}
	return nil
}

// apply creates the objects of a multi-document YAML stream.
func (w *kubeWorld) apply(ctx context.Context, scheme *runtime.Scheme, docs string) error {
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	for doc := range strings.SplitSeq(docs, "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if err != nil {
			return err
		}
		if err := w.client.Create(ctx, obj.(client.Object)); err != nil {
			return err
		}
	}
	return nil
}

func stripComments(doc string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(doc))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "---" && !strings.HasPrefix(line, "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func roleBinding(ns, name, clusterRole, saNamespace, sa string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: sa}},
	}
}

// mintToken mints a token of the ServiceAccount ns/name with TokenRequest, for audiences
// (the API server's own when none), valid for seconds.
func (w *kubeWorld) mintToken(ctx context.Context, ns, name string, seconds int64, audiences ...string) (string, error) {
	tr, err := w.admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// token mints a token of ns/name for audiences, valid for ten minutes (TokenRequest's
// minimum).
func (w *kubeWorld) token(tb testing.TB, ns, name string, audiences ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := w.mintToken(ctx, ns, name, 600, audiences...)
	if err != nil {
		tb.Fatalf("token of %s/%s: %v", ns, name, err)
	}
	return tok
}

// writeKubeconfig writes a kubeconfig for the API server of cfg and a bearer token.
func writeKubeconfig(path string, cfg *rest.Config, token string) error {
	server := cfg.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	if _, err := url.Parse(server); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["switchboard"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["switchboard"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "switchboard"}
	kc.CurrentContext = "switchboard"
	return clientcmd.WriteToFile(*kc, path)
}

// waitDeploymentsReady waits until every model of the world has the condition Ready,
// written by a runtime in cluster mode with the shipped RBAC.
func (w *kubeWorld) waitDeploymentsReady(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := w.deploymentsReady()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("models not Ready within %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *kubeWorld) deploymentsReady() error {
	for _, key := range worldDeployments {
		var md v1alpha1.ModelDeployment
		if err := w.client.Get(context.Background(), key, &md); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(md.Status.Conditions, v1alpha1.ConditionReady) {
			return fmt.Errorf("%s: conditions %+v", key, md.Status.Conditions)
		}
	}
	return nil
}

// clusterRuntime is the built binary running in cluster mode against the world.
type clusterRuntime struct {
	label               string
	api, probe, metrics string
	out                 *lockedBuffer
	proc                *process
}

// startInCluster runs the binary in cluster mode (no --manifests) as the manager's
// ServiceAccount, at the most verbose log level, with loopback endpoints allowed (the
// demo provider listens on loopback), and waits for /readyz; args are added to its
// flags. The kubeconfig is given by $KUBECONFIG, which the binary's configuration
// loading (controller-runtime's GetConfig) reads: the binary has no --kubeconfig flag.
func startInCluster(tb testing.TB, w *kubeWorld, label string, args ...string) *clusterRuntime {
	tb.Helper()
	return startInClusterAs(tb, clusterIdentity{kubeconfig: w.kubeconfig}, label, args...)
}

// clusterIdentity is what a cluster-mode binary runs as: its kubeconfig, and variables
// added to its environment (POD_NAMESPACE, as a pod gets it from the downward API).
type clusterIdentity struct {
	kubeconfig string
	env        []string
}

// startInClusterAs is startInCluster with another kubeconfig and environment. None of
// the test process's own KUBECONFIG, in-cluster or POD_NAMESPACE variables reach the
// binary.
func startInClusterAs(tb testing.TB, id clusterIdentity, label string, args ...string) *clusterRuntime {
	tb.Helper()
	r := &clusterRuntime{label: label, api: freeAddr(tb), probe: freeAddr(tb), metrics: freeAddr(tb)}
	flags := []string{"--leader-elect=false", "--runtime-bind-address", r.api,
		"--health-probe-bind-address", r.probe, "--metrics-bind-address", r.metrics,
		"--cleanup-grace", "1s", "--shutdown-grace", "1s", "--zap-log-level", "10", "--allow-loopback-endpoints"}
	cmd := exec.Command(filepath.Join(binDir, "switchboard"), append(flags, args...)...)
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE"),
		"KUBECONFIG="+id.kubeconfig)
	cmd.Env = append(cmd.Env, id.env...)
	r.out, r.proc = startCommand(tb, "switchboard "+label, cmd)
	eventually(tb, 30*time.Second, "switchboard "+label+" /readyz", func() bool {
		select {
		case <-r.proc.done:
			tb.Fatalf("switchboard %s exited before it was ready:\n%s", label, r.out.String())
		default:
		}
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get("http://" + r.probe + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return r
}

func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		keep := true
		for _, n := range names {
			keep = keep && !strings.HasPrefix(kv, n+"=")
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// recorder is an http.RoundTripper that keeps every response's headers and body, for
// the canary checks: it records what callers were answered, streams included. The body
// of an accepted submission is left out: its links carry the signed stream tokens by
// design (spec/authentication.md, "Signed stream links").
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	buf  bytes.Buffer
	// accepted counts the 202 bodies of submissions left out.
	accepted int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range resp.Header {
		fmt.Fprintf(&r.buf, "%s: %s\n", k, strings.Join(v, ", "))
	}
	if req.Method == http.MethodPost && req.URL.Path == "/v1/executions" && resp.StatusCode == http.StatusAccepted {
		r.accepted++
		return resp, nil
	}
	resp.Body = &recordedBody{ReadCloser: resp.Body, r: r}
	return resp, nil
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

type recordedBody struct {
	io.ReadCloser
	r *recorder
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.r.mu.Lock()
	b.r.buf.Write(p[:n])
	b.r.mu.Unlock()
	return n, err
}

func (b *recordedBody) Close() error { return b.ReadCloser.Close() }

// secretsIn returns the secrets among secrets that text holds, for the canary checks. A
// JWT also counts as present when its signature alone is.
func secretsIn(text string, secrets map[string]string) []string {
	var found []string
	for what, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(text, s) {
			found = append(found, what)
			continue
		}
		if parts := strings.Split(s, "."); len(parts) == 3 && len(parts[2]) >= 32 && strings.Contains(text, parts[2]) {
			found = append(found, what+" (its signature)")
		}
		if u := url.QueryEscape(s); u != s && strings.Contains(text, u) {
			found = append(found, what+" (URL-encoded)")
		}
	}
	return found
}

// linesWith returns the lines of text that hold any of the secrets, for a failure
// message that shows where a secret leaked without repeating it.
func linesWith(text string, secrets map[string]string) []int {
	var lines []int
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		if len(secretsIn(sc.Text(), secrets)) > 0 {
			lines = append(lines, n)
		}
	}
	return lines
}

var errNoToken = errors.New("no token parameter")

// linkToken returns the token query parameter of a link.
func linkToken(link string) (string, error) {
	u, err := url.Parse(link)
	if err != nil {
		return "", err
	}
	tok := u.Query().Get("token")
	if tok == "" {
		return "", errNoToken
	}
	return tok, nil
}
