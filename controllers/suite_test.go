package controllers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The suite runs the real kube-apiserver and etcd (built by hack/envtest-assets.sh) with
// the generated CRDs, and one manager with both controllers for all namespaces except
// privateNamespaces, which the leader-election and least-privilege specs give to managers
// of their own.

const leaderNamespace = "leader-election"

var privateNamespaces = []string{leaderNamespace, managerNamespace,
	clusterWideWatched, clusterWideOther, namespacedWatched, namespacedOther}

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8s       client.Client
	scheme    = runtime.NewScheme()
	holder    *routing.Holder
	logs      syncBuffer // every log line of every manager in the suite
	suiteCtx  context.Context
	suiteStop context.CancelFunc
	// budgets is the Budget set the suite's manager publishes; budgetStore holds the
	// counters its status writer reads.
	budgets     *budget.Holder
	budgetStore *memory.Store
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers Suite")
}

var _ = BeforeSuite(func() {
	// Reconciles take milliseconds, but CI machines are small and shared: wait generously
	// by default. Specs with a contractual bound (rotation within 5 s) set their own.
	SetDefaultEventuallyTimeout(10 * time.Second)
	SetDefaultEventuallyPollingInterval(25 * time.Millisecond)
	// Debug level, so that the canary spec also covers V(1) lines.
	ctrl.SetLogger(zap.New(zap.WriteTo(&logs), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "bin", "k8s")
	}
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start envtest (run 'make envtest-assets' first)")
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	suiteCtx, suiteStop = context.WithCancel(context.Background())
	holder = &routing.Holder{}
	notPrivate := make([]fields.Selector, len(privateNamespaces))
	for i, ns := range privateNamespaces {
		notPrivate[i] = fields.OneTermNotEqualSelector("metadata.namespace", ns)
	}
	opts := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultFieldSelector: fields.AndSelectors(notPrivate...)},
	}
	Options{}.ApplyTo(&opts)
	mgr, err := ctrl.NewManager(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(Setup(mgr, routing.NewRegistry(holder))).To(Succeed())
	budgetStore = memory.New()
	budgets = &budget.Holder{}
	budgetsSynced, err := SetupBudgets(mgr, BudgetOptions{Holder: budgets, Table: holder, Store: budgetStore})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(suiteCtx)).To(Succeed())
	}()
	Eventually(holder.Synced, 10*time.Second).Should(BeTrue())
	Eventually(budgetsSynced, 10*time.Second).Should(BeTrue())
})

var _ = AfterSuite(func() {
	if suiteStop != nil {
		suiteStop()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
	if budgetStore != nil {
		_ = budgetStore.Close()
	}
})

// newNamespace creates a namespace of its own for one spec.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sb-"}}
	Expect(k8s.Create(suiteCtx, ns)).To(Succeed())
	return ns.Name
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, _ = GinkgoWriter.Write(p)
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
