package controllers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The manager runs as a ServiceAccount that holds only the generated RBAC of config/rbac,
// with --watch-namespaces set, and every request it sends to the API server is recorded:
// what it may do, what it asks for, and what its cache keeps.

const (
	managerNamespace   = "switchboard-system" // the namespace of the generated Role
	clusterWideWatched = "lp-cluster-watched"
	clusterWideOther   = "lp-cluster-other"
	namespacedWatched  = "lp-ns-watched"
	namespacedOther    = "lp-ns-other"
)

// readManifest decodes every object of a config/rbac file.
func readManifest(name string) ([]client.Object, error) {
	f, err := os.Open(filepath.Join("..", "config", "rbac", name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	decode := clientgoscheme.Codecs.UniversalDeserializer().Decode
	docs := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objs []client.Object
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		objs = append(objs, obj.(client.Object))
	}
}

// applyManifest creates every object of a config/rbac file, as kubectl apply -k would.
func applyManifest(name string) {
	GinkgoHelper()
	objs, err := readManifest(name)
	Expect(err).NotTo(HaveOccurred())
	for _, obj := range objs {
		Expect(k8s.Create(suiteCtx, obj)).To(Succeed(), name)
	}
}

// TestRBACHasNoWildcard checks every rule of config/rbac: no verb, resource or API group
// is "*".
func TestRBACHasNoWildcard(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "config", "rbac", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC files: %v", err)
	}
	rules := 0
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		objs, err := readManifest(filepath.Base(file))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			var rs []rbacv1.PolicyRule
			switch o := obj.(type) {
			case *rbacv1.ClusterRole:
				rs = o.Rules
			case *rbacv1.Role:
				rs = o.Rules
			}
			for _, r := range rs {
				rules++
				for _, field := range [][]string{r.Verbs, r.Resources, r.APIGroups, r.ResourceNames, r.NonResourceURLs} {
					if slices.Contains(field, "*") {
						t.Errorf("%s %s: wildcard in rule %+v", file, obj.GetName(), r)
					}
				}
			}
		}
	}
	if rules == 0 {
		t.Error("no rules found")
	}
}

// serviceAccount is the identity of a ServiceAccount of managerNamespace, impersonated.
func serviceAccount(name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + managerNamespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + managerNamespace, "system:authenticated"},
	}
}

func asIdentity(id rest.ImpersonationConfig) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = id
	return c
}

// apiLog records every request a manager sends and, for Secrets, the response bodies
// exactly as the API server sent them.
type apiLog struct {
	mu    sync.Mutex
	calls []*apiCall
}

type apiCall struct {
	method, path, query, accept string
	status                      int
	body                        bytes.Buffer // Secrets only
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (l *apiLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		call := &apiCall{method: req.Method, path: req.URL.Path, query: req.URL.RawQuery, accept: req.Header.Get("Accept")}
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			call.status = resp.StatusCode
			if isSecretPath(call.path) {
				resp.Body = &teeBody{ReadCloser: resp.Body, log: l, call: call}
			}
		}
		l.mu.Lock()
		l.calls = append(l.calls, call)
		l.mu.Unlock()
		return resp, err
	})
}

// teeBody copies what the client reads of a response (a list, or a watch stream as it
// arrives) into its call.
type teeBody struct {
	io.ReadCloser
	log  *apiLog
	call *apiCall
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.log.mu.Lock()
	t.call.body.Write(p[:n])
	t.log.mu.Unlock()
	return n, err
}

func isSecretPath(path string) bool {
	return strings.HasSuffix(path, "/secrets") || strings.Contains(path, "/secrets/")
}

// callSummary is a copy of one recorded call.
type callSummary struct {
	Method, Path, Query, Accept string
	Status                      int
	Body                        string
}

func (l *apiLog) snapshot() []callSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]callSummary, len(l.calls))
	for i, c := range l.calls {
		out[i] = callSummary{c.method, c.path, c.query, c.accept, c.status, c.body.String()}
	}
	return out
}

// lpManager is a manager of this file's specs and what was recorded of it.
type lpManager struct {
	mgr    manager.Manager
	holder *routing.Holder
	api    *apiLog
}

func startLeastPrivilegeManager(ctx context.Context, id rest.ImpersonationConfig, leaseID string, watch ...string) *lpManager {
	m := &lpManager{holder: &routing.Holder{}, api: &apiLog{}}
	c := asIdentity(id)
	c.Wrap(m.api.wrap)
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		Controller:                    config.Controller{SkipNameValidation: ptr(true)},
		LeaderElection:                true,
		LeaderElectionID:              leaseID,
		LeaderElectionNamespace:       managerNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr(4 * time.Second),
		RenewDeadline:                 ptr(3 * time.Second),
		RetryPeriod:                   ptr(500 * time.Millisecond),
	}
	Options{WatchNamespaces: watch}.ApplyTo(&opts)
	var err error
	m.mgr, err = ctrl.NewManager(c, opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(Setup(m.mgr, routing.NewRegistry(m.holder))).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(m.mgr.Start(ctx)).To(Succeed())
	}()
	return m
}

func secretWith(ns, name, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{"api-key": []byte(value)}}
}

// containsValue reports whether body carries value as JSON (base64) or protobuf (raw)
// would.
func containsValue(body, value string) bool {
	return strings.Contains(body, value) || strings.Contains(body, base64.StdEncoding.EncodeToString([]byte(value)))
}

func createNamespaces(names ...string) {
	GinkgoHelper()
	for _, ns := range names {
		Expect(k8s.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
}

// runsWithLeastPrivilege starts a manager as id watching only watched (both namespaces
// exist, empty), and checks everything it must do with the permissions it has, and
// everything it must not read.
func runsWithLeastPrivilege(id rest.ImpersonationConfig, leaseID, watched, other string) {
	GinkgoHelper()
	const (
		referenced = "LP-REFERENCED-sk-1"
		rotated    = "LP-REFERENCED-sk-2"
		unrelated  = "LP-UNRELATED-sk"
		elsewhere  = "LP-ELSEWHERE-sk"
		lastApply  = "kubectl.kubernetes.io/last-applied-configuration"
	)
	optedIn := map[string]string{v1alpha1.CredentialLabel: v1alpha1.CredentialLabelValue}
	secret := secretWith(watched, "openai", referenced)
	secret.Labels = optedIn
	Expect(k8s.Create(suiteCtx, secret)).To(Succeed())
	Expect(k8s.Create(suiteCtx, secretWith(watched, "unrelated", unrelated))).To(Succeed())
	// As kubectl apply leaves a Secret: its manifest, data included (base64 of the value),
	// in an annotation.
	applied := secretWith(watched, "applied", "LP-APPLIED-sk")
	applied.Annotations = map[string]string{lastApply: `{"data":{"api-key":"TFAtQVBQTElFRC1zaw=="}}`}
	applied.Labels = map[string]string{"app": "db", v1alpha1.CredentialLabel: v1alpha1.CredentialLabelValue}
	Expect(k8s.Create(suiteCtx, applied)).To(Succeed())
	Expect(k8s.Create(suiteCtx, secretWith(other, "openai", elsewhere))).To(Succeed())
	md, ignored := newMD(watched, "gpt"), newMD(other, "gpt")
	// A model naming a Secret that did not opt in: the manager must not even read it.
	notOptedIn := newMD(watched, "not-opted-in", withSecret("unrelated", "api-key"))
	Expect(k8s.Create(suiteCtx, md)).To(Succeed())
	Expect(k8s.Create(suiteCtx, ignored)).To(Succeed())
	Expect(k8s.Create(suiteCtx, notOptedIn)).To(Succeed())

	ctx, stop := context.WithCancel(suiteCtx)
	DeferCleanup(stop)
	m := startLeastPrivilegeManager(ctx, id, leaseID, watched)
	credential := func() string {
		if d, ok := m.holder.Load().Get(refOf(md)); ok {
			return d.Credential.Reveal()
		}
		return ""
	}

	By("becoming leader, building the table and writing status and Events")
	var version string
	Eventually(func(g Gomega) {
		g.Expect(m.holder.Synced()).To(BeTrue())
		got := fetch(g, md)
		g.Expect(condition(got, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		version = got.Status.CredentialsVersion
		g.Expect(credential()).To(Equal(referenced))

		lease := &coordinationv1.Lease{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: managerNamespace, Name: leaseID}, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		leaderEvents := &corev1.EventList{}
		g.Expect(k8s.List(suiteCtx, leaderEvents, client.InNamespace(managerNamespace))).To(Succeed())
		g.Expect(leaderEvents.Items).To(ContainElement(HaveField("InvolvedObject.Name", leaseID)))
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(suiteCtx, events, client.InNamespace(watched))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(HaveField("Regarding.Name", md.Name)))
		g.Expect(condition(fetch(g, notOptedIn), v1alpha1.ConditionCredentialsResolved).Reason).
			To(Equal(v1alpha1.ReasonSecretNotEligible))
	}, 20*time.Second).Should(Succeed())

	By("following a rotated Secret within 5 s")
	secret.Data["api-key"] = []byte(rotated)
	Expect(k8s.Update(suiteCtx, secret)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(credential()).To(Equal(rotated))
		g.Expect(fetch(g, md).Status.CredentialsVersion).NotTo(Equal(version))
	}, 5*time.Second, 50*time.Millisecond).Should(Succeed())

	By("ignoring the namespace it does not watch")
	Consistently(func(g Gomega) {
		_, ok := m.holder.Load().Get(refOf(ignored))
		g.Expect(ok).To(BeFalse())
		g.Expect(fetch(g, ignored).Status).To(Equal(v1alpha1.ModelDeploymentStatus{}))
	}, time.Second).Should(Succeed())

	By("caching Secret metadata only, without annotations, and of the labels the opt-in only")
	key := client.ObjectKeyFromObject(applied)
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	Expect(m.mgr.GetCache().Get(ctx, key, meta)).To(Succeed())
	Expect(meta.UID).To(Equal(applied.UID))
	Expect(meta.Annotations).To(BeEmpty())
	Expect(meta.Labels).To(Equal(optedIn))
	noSecretInformer := func() {
		GinkgoHelper()
		var notCached *cache.ErrResourceNotCached
		err := m.mgr.GetCache().Get(ctx, key, &corev1.Secret{})
		Expect(errors.As(err, &notCached)).To(BeTrue(), "the cache has no informer of whole Secrets: %v", err)
	}
	noSecretInformer()
	// The manager's client reads Secrets from the API server, and starts no informer.
	full := &corev1.Secret{}
	Expect(m.mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(secret), full)).To(Succeed())
	Expect(string(full.Data["api-key"])).To(Equal(rotated))
	noSecretInformer()

	By("asking the API server only for what it needs, and being refused nothing")
	calls := m.api.snapshot()
	var secretLists, secretListsSeen, secretGets int
	for _, c := range calls {
		Expect(c.Status).NotTo(BeElementOf(http.StatusUnauthorized, http.StatusForbidden), "%+v", c)
		Expect(c.Path).NotTo(ContainSubstring("/namespaces/"+other+"/"), "%+v", c)
		if !isSecretPath(c.Path) {
			continue
		}
		Expect(c.Method).To(Equal(http.MethodGet), "%+v", c)
		if strings.HasSuffix(c.Path, "/secrets") { // a list or a watch
			secretLists++
			Expect(c.Path).To(Equal("/api/v1/namespaces/"+watched+"/secrets"), "%+v", c)
			Expect(c.Accept).To(ContainSubstring("as=PartialObjectMetadata"), "%+v", c)
			if strings.Contains(c.Body, "unrelated") { // the body holds the Secrets' metadata
				secretListsSeen++
			}
			// Data never crosses; annotations do (the API server sends metadata whole),
			// and the cache drops them (above).
			for _, v := range []string{referenced, rotated, unrelated} {
				Expect(containsValue(c.Body, v)).To(BeFalse(), "a list or watch of Secrets returned content: %+v", c)
			}
			continue
		}
		secretGets++
		// Only the opted-in Secret: the one that did not opt in is known by its metadata.
		Expect(c.Path).To(Equal("/api/v1/namespaces/"+watched+"/secrets/openai"), "%+v", c)
	}
	// A list and a watch, or one watch that streams the list first (client-go's WatchList).
	Expect(secretLists).To(BeNumerically(">=", 1))
	Expect(secretListsSeen).To(BeNumerically(">=", 1), "no list or watch body was recorded: %+v", calls)
	Expect(secretGets).To(BeNumerically(">=", 2), "the reconciles and the client's read")
}

var _ = Describe("Least privilege", Ordered, func() {
	BeforeAll(func() {
		Expect(k8s.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}})).To(Succeed())
		for _, f := range []string{"service_account.yaml", "role.yaml", "role_binding.yaml", "leader_election_role_binding.yaml"} {
			applyManifest(f)
		}
	})

	It("runs with the RBAC of config/rbac alone, caches no Secret content and ignores namespaces it does not watch", func() {
		createNamespaces(clusterWideWatched, clusterWideOther)
		runsWithLeastPrivilege(serviceAccount("switchboard"), "switchboard.ai.switchboard.dev", clusterWideWatched, clusterWideOther)

		// RBAC has no metadata-only verb: the list and watch the metadata informer needs
		// let the ClusterRole's holder read any Secret. The manager does not (above);
		// --watch-namespaces with RoleBindings closes the rest (next spec).
		idClient, err := client.New(asIdentity(serviceAccount("switchboard")), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(idClient.Get(suiteCtx, client.ObjectKey{Namespace: clusterWideOther, Name: "openai"}, &corev1.Secret{})).To(Succeed())
	})

	It("with --watch-namespaces needs the ClusterRole bound in the watched namespaces only, and cannot read a Secret elsewhere", func() {
		const sa = "switchboard-scoped"
		createNamespaces(namespacedWatched, namespacedOther)
		Expect(k8s.Create(suiteCtx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: sa}})).To(Succeed())
		subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: managerNamespace, Name: sa}}
		// The generated Role for leader election, and the generated ClusterRole through a
		// RoleBinding in the watched namespace: nothing cluster-wide.
		Expect(k8s.Create(suiteCtx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: sa}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "switchboard-manager"}})).To(Succeed())
		Expect(k8s.Create(suiteCtx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespacedWatched, Name: sa}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "switchboard-manager"}})).To(Succeed())
		runsWithLeastPrivilege(serviceAccount(sa), "switchboard-scoped", namespacedWatched, namespacedOther)

		idClient, err := client.New(asIdentity(serviceAccount(sa)), client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		err = idClient.Get(suiteCtx, client.ObjectKey{Namespace: namespacedOther, Name: "openai"}, &corev1.Secret{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "get of a Secret outside the watched namespaces: %v", err)
		err = idClient.List(suiteCtx, &corev1.SecretList{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "list of every Secret: %v", err)
	})
})
