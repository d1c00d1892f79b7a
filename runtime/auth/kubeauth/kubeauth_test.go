package kubeauth_test

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/auth/kubeauth"
)

func TestServiceAccountToken(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "sa")
	sa := newServiceAccount(t, ns, "caller")
	token := tokenFor(t, ns, "caller", kubeauth.DefaultAudience)
	a := newAuth(t, kubeauth.Config{})

	r := bearer(token)
	p, err := a.Authenticator.Authenticate(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + ns + ":caller"; p.Name != want {
		t.Errorf("name %q, want %q", p.Name, want)
	}
	if p.UID != string(sa.UID) {
		t.Errorf("uid %q, want the ServiceAccount's %q", p.UID, sa.UID)
	}
	for _, g := range []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"} {
		if !slices.Contains(p.Groups, g) {
			t.Errorf("groups %q lack %q", p.Groups, g)
		}
	}
	// The token's id, which SubjectAccessReview needs to judge as the API server would.
	if len(p.Extra["authentication.kubernetes.io/credential-id"]) != 1 {
		t.Errorf("extra %v lacks the credential id", p.Extra)
	}
	if r.Header.Get("Authorization") != "Bearer "+token {
		t.Error("Authenticate changed the caller's request")
	}

	// Several audiences: a token for any one of them is accepted.
	other := tokenFor(t, ns, "caller", "other")
	b := newAuth(t, kubeauth.Config{Audiences: []string{"other", "switchboard"}})
	for _, tok := range []string{token, other} {
		if p, err := b.Authenticator.Authenticate(bearer(tok)); err != nil || p.Name != "system:serviceaccount:"+ns+":caller" {
			t.Errorf("two audiences: got %v, %v", p, err)
		}
	}
}

func TestRefusedCredentials(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "refused")
	newServiceAccount(t, ns, "caller")
	good := tokenFor(t, ns, "caller", kubeauth.DefaultAudience)
	otherAudience := tokenFor(t, ns, "caller", "other")
	apiAudience := tokenFor(t, ns, "caller") // the API server's own audience
	a := newAuth(t, kubeauth.Config{})

	adminCert := func() *x509.Certificate {
		block, _ := pem.Decode(adminConfig.CertData)
		if block == nil {
			t.Fatal("the envtest admin has no client certificate")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}()
	req := func(header ...string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "/v1/executions", nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Add(header[i], header[i+1])
		}
		return r
	}
	withCert := req()
	withCert.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{adminCert}, VerifiedChains: [][]*x509.Certificate{{adminCert}}}

	tests := map[string]*http.Request{
		"no credentials":       req(),
		"garbage token":        bearer("not-a-token"),
		"malformed JWT":        bearer("eyJhbGciOiJSUzI1NiJ9.e30.c2ln"),
		"audience other":       bearer(otherAudience),
		"the API's audience":   bearer(apiAudience),
		"basic scheme":         req("Authorization", "Basic "+good),
		"client certificate":   withCert,
		"front-proxy headers":  req("X-Remote-User", "system:admin", "X-Remote-Group", "system:masters"),
		"access token, no key": req("Authorization", "Bearer"),
		"websocket subprotocol": req("Connection", "Upgrade", "Upgrade", "websocket",
			"Sec-WebSocket-Protocol", "base64url.bearer.authorization.k8s.io."+base64.RawURLEncoding.EncodeToString([]byte(good))),
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := a.Authenticator.Authenticate(r)
			if !errors.Is(err, auth.ErrUnauthenticated) || p != nil {
				t.Fatalf("got %v, %v; want ErrUnauthenticated", p, err)
			}
			for _, tok := range []string{good, otherAudience, apiAudience} {
				if strings.Contains(err.Error(), tok) {
					t.Errorf("error %q holds a token", err)
				}
			}
		})
	}
}

func TestDeletedServiceAccount(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "deleted")
	newServiceAccount(t, ns, "unseen")
	newServiceAccount(t, ns, "seen")
	unseen := tokenFor(t, ns, "unseen", kubeauth.DefaultAudience)
	seen := tokenFor(t, ns, "seen", kubeauth.DefaultAudience)
	// A short cache: a positive review is reused for a second, then made again.
	a := newAuth(t, kubeauth.Config{AuthnCacheTTL: time.Second})
	if _, err := a.Authenticator.Authenticate(bearer(seen)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"unseen", "seen"} {
		if err := admin.CoreV1().ServiceAccounts(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(token string) func() bool {
		return func() bool {
			_, err := a.Authenticator.Authenticate(bearer(token))
			if err != nil && !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("got %v, want ErrUnauthenticated", err)
			}
			return err != nil
		}
	}
	// A token reviewed for the first time after the deletion is refused as soon as the
	// API server has seen the deletion (through its informer: almost at once).
	eventually(t, 2*time.Second, refused(unseen))
	// One reviewed before is refused once both caches have let it go: this package's
	// (AuthnCacheTTL) and the API server's own, which keeps successful token
	// authentications for 10 s (kube-apiserver's TokenSuccessCacheTTL).
	eventually(t, 10*time.Second+time.Second+5*time.Second, refused(seen))
}

// TestExpiredToken covers expiry although TokenRequest cannot mint a token that expires
// within a test (its minimum lifetime is ten minutes): it takes a token TokenRequest
// minted, moves its expiry into the past, and signs it again with the API server's
// ServiceAccount signing key (in envtest's certificate directory). The same re-signing
// without the change is accepted, so the expiry alone is what is refused: by the shape
// check, before any review (TestNoReviewForCertainRefusals), as the API server would.
func TestExpiredToken(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "expired")
	newServiceAccount(t, ns, "caller")
	token := tokenFor(t, ns, "caller", kubeauth.DefaultAudience)
	a := newAuth(t, kubeauth.Config{})

	resigned := resign(t, token, nil)
	if p, err := a.Authenticator.Authenticate(bearer(resigned)); err != nil || p.Name != "system:serviceaccount:"+ns+":caller" {
		t.Fatalf("the re-signed, unchanged token: got %v, %v", p, err)
	}
	now := time.Now()
	expired := resign(t, token, map[string]int64{
		"iat": now.Add(-15 * time.Minute).Unix(),
		"nbf": now.Add(-15 * time.Minute).Unix(),
		"exp": now.Add(-5 * time.Minute).Unix(), // beyond the validator's leeway of a minute
	})
	if _, err := a.Authenticator.Authenticate(bearer(expired)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("expired token: got %v, want ErrUnauthenticated", err)
	}
}

// resign returns token (an ES256 JWT from the envtest API server) with the given numeric
// claims replaced, signed again with the API server's ServiceAccount key.
func resign(t *testing.T, token string, claims map[string]int64) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	var header struct {
		Alg string `json:"alg"`
	}
	decodePart(t, parts[0], &header)
	if header.Alg != "ES256" {
		t.Fatalf("token signed with %s, the test re-signs ES256 only", header.Alg)
	}
	var payload map[string]any
	decodePart(t, parts[1], &payload)
	for k, v := range claims {
		payload[k] = v
	}
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	signed := parts[0] + "." + base64.RawURLEncoding.EncodeToString(body)

	keyPEM, err := os.ReadFile(filepath.Join(testEnv.ControlPlane.APIServer.CertDir, "sa-signer.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("no PEM block in sa-signer.key")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("sa-signer.key holds a %T", parsed)
	}
	digest := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func decodePart(t *testing.T, part string, v any) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatal(err)
	}
}

func TestRBAC(t *testing.T) {
	t.Parallel()
	teamA := newNamespace(t, "team-a")
	teamB := newNamespace(t, "team-b")
	home := newNamespace(t, "callers")
	executorRole := newClusterRole(t, "executor", "create")
	viewerRole := newClusterRole(t, "viewer", "get")

	newServiceAccount(t, home, "executor")
	newServiceAccount(t, home, "viewer")
	newServiceAccount(t, home, "operator")
	bind(t, teamA, executorRole, home, "executor")
	bind(t, teamA, viewerRole, home, "viewer")
	bindClusterWide(t, executorRole, home, "operator")

	// Principals as Authenticate returns them, so that the reviews carry what a caller's
	// would (groups, extra).
	a := newAuth(t, kubeauth.Config{})
	principal := func(name string) *auth.Principal {
		p, err := a.Authenticator.Authenticate(bearer(tokenFor(t, home, name, kubeauth.DefaultAudience)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	executor, viewer, operator := principal("executor"), principal("viewer"), principal("operator")

	// The API server's RBAC authorizer sees new bindings through an informer: wait for
	// them with an uncached instance, so that a denial from before they arrived is not
	// cached in the instance under test.
	uncached := newAuth(t, kubeauth.Config{AllowCacheTTL: -1, DenyCacheTTL: -1})
	eventually(t, 10*time.Second, func() bool {
		ok1, _ := uncached.Authorizer.Allowed(t.Context(), executor, auth.VerbCreate, teamA)
		ok2, _ := uncached.Authorizer.Allowed(t.Context(), viewer, auth.VerbGet, teamA)
		ok3, _ := uncached.Authorizer.Allowed(t.Context(), operator, auth.VerbCreate, "")
		return ok1 && ok2 && ok3
	})

	tests := []struct {
		who  string
		p    *auth.Principal
		verb string
		ns   string
		want bool
	}{
		{"executor", executor, auth.VerbCreate, teamA, true},
		{"executor", executor, auth.VerbCreate, teamB, false},
		{"executor", executor, auth.VerbGet, teamA, false},
		{"executor", executor, auth.VerbUpdate, teamA, false},
		{"executor", executor, auth.VerbCreate, "", false},
		{"viewer", viewer, auth.VerbGet, teamA, true},
		{"viewer", viewer, auth.VerbUpdate, teamA, false},
		{"viewer", viewer, auth.VerbCreate, teamA, false},
		{"viewer", viewer, auth.VerbGet, teamB, false},
		{"operator", operator, auth.VerbCreate, "", true},
		{"operator", operator, auth.VerbCreate, teamB, true},
		{"operator", operator, auth.VerbGet, teamB, false},
		{"nobody", nil, auth.VerbCreate, teamA, false},
		{"a user the API server does not know", &auth.Principal{Name: "mallory"}, auth.VerbCreate, teamA, false},
	}
	for _, tt := range tests {
		ok, err := a.Authorizer.Allowed(t.Context(), tt.p, tt.verb, tt.ns)
		if err != nil || ok != tt.want {
			t.Errorf("%s %s in %q: got %v, %v; want %v", tt.who, tt.verb, tt.ns, ok, err, tt.want)
		}
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "unavailable")
	newServiceAccount(t, ns, "caller")
	token := tokenFor(t, ns, "caller", kubeauth.DefaultAudience)
	unreachable, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]kubernetes.Interface{
		"not allowed to review": powerlessClient, // 403 on tokenreviews and subjectaccessreviews
		"unreachable":           unreachable,
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			a := newAuth(t, kubeauth.Config{Client: client})
			p, err := a.Authenticator.Authenticate(bearer(token))
			if !errors.Is(err, auth.ErrUnavailable) || p != nil {
				t.Fatalf("Authenticate: got %v, %v; want ErrUnavailable", p, err)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("error %q holds the token", err)
			}
			ok, err := a.Authorizer.Allowed(t.Context(), &auth.Principal{Name: "alice"}, auth.VerbCreate, ns)
			if !errors.Is(err, auth.ErrUnavailable) || ok {
				t.Errorf("Allowed: got %v, %v; want ErrUnavailable", ok, err)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]kubeauth.Config{
		"no client":      {},
		"empty audience": {Client: runtimeClient, Audiences: []string{"switchboard", ""}},
	} {
		if _, err := kubeauth.New(t.Context(), cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// newClusterRole creates a ClusterRole granting verb on executions.ai.switchboard.dev.
func newClusterRole(t testing.TB, prefix, verb string) string {
	t.Helper()
	role, err := admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "switchboard-" + prefix + "-"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{auth.Group},
			Resources: []string{auth.Resource},
			Verbs:     []string{verb},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoles().Delete(t.Context(), role.Name, metav1.DeleteOptions{})
	})
	return role.Name
}

// bind binds the ClusterRole role to the ServiceAccount saNamespace/sa in ns.
func bind(t testing.TB, ns, role, saNamespace, sa string) {
	t.Helper()
	_, err := admin.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: sa}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// bindClusterWide binds the ClusterRole role to the ServiceAccount saNamespace/sa in every
// namespace.
func bindClusterWide(t *testing.T, role, saNamespace, sa string) {
	t.Helper()
	b, err := admin.RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: sa}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(t.Context(), b.Name, metav1.DeleteOptions{})
	})
}
