package kubeauth_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/auth/kubeauth"
)

// The tests run against the real kube-apiserver and etcd that hack/envtest-assets.sh
// builds into bin/k8s, started once for the package. Envtest starts the API server with
// --authorization-mode=RBAC (so SubjectAccessReviews follow Roles and bindings) and with
// a ServiceAccount issuer and signing key in its certificate directory (so TokenRequest
// mints tokens and TokenReview verifies them); the admission plugin ServiceAccount is
// off, which does not matter here. No extra API server flags are needed.

var (
	testEnv *envtest.Environment
	// admin is the envtest administrator (system:masters), which sets the stage.
	admin kubernetes.Interface
	// runtimeClient acts as switchboard does in a cluster: a user bound to the
	// ClusterRole system:auth-delegator, which allows creating tokenreviews and
	// subjectaccessreviews and nothing else. runtimeConfig is its configuration.
	runtimeClient kubernetes.Interface
	runtimeConfig *rest.Config
	// powerlessClient is a user without any RBAC binding.
	powerlessClient kubernetes.Interface
	// adminConfig is admin's configuration, whose client certificate the tests present.
	adminConfig *rest.Config
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "..", "bin", "k8s")
	}
	testEnv = &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := testEnv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest (run 'make envtest-assets' first):", err)
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest:", err)
		}
	}()
	if err := setUp(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "set up the suite:", err)
		return 1
	}
	return m.Run()
}

func setUp(cfg *rest.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adminConfig = cfg
	var err error
	if admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	user, err := testEnv.AddUser(envtest.User{Name: "switchboard-runtime"}, nil)
	if err != nil {
		return err
	}
	// As the binary makes it (cmd/switchboard).
	runtimeConfig = user.Config()
	if runtimeClient, err = kubeauth.NewClient(runtimeConfig, 0); err != nil {
		return err
	}
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "switchboard-runtime-auth-delegator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "switchboard-runtime"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	powerless, err := testEnv.AddUser(envtest.User{Name: "powerless"}, nil)
	if err != nil {
		return err
	}
	powerlessClient, err = kubernetes.NewForConfig(powerless.Config())
	return err
}

// newAuth returns the mode under test, acting as runtimeClient unless cfg names another
// client, and without the per-address limit of failures unless cfg sets one: the tests'
// requests have no client address, so they would all share one.
func newAuth(t *testing.T, cfg kubeauth.Config) auth.Auth {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = runtimeClient
	}
	if cfg.FailureBurst == 0 {
		cfg.FailureBurst = -1
	}
	a, err := kubeauth.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// newNamespace creates a namespace of its own for one test, named prefix-<random>.
func newNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func newServiceAccount(t testing.TB, ns, name string) *corev1.ServiceAccount {
	t.Helper()
	sa, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// tokenFor mints a token for the ServiceAccount ns/name with TokenRequest, for audiences
// (the API server's own audience when none), valid for the minimum lifetime TokenRequest
// allows, ten minutes.
func tokenFor(t testing.TB, ns, name string, audiences ...string) string {
	t.Helper()
	seconds := int64(600)
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// bearer returns a request with "Authorization: Bearer <token>".
func bearer(token string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/v1/executions", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// eventually fails t unless cond holds within timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
