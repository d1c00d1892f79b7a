package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestLeaderElectionFromKubeconfig runs two binaries outside any pod, from a kubeconfig
// whose context names the manager's namespace, with --leader-elect and the same identity
// (the ServiceAccount config/rbac ships, whose leader-election Role is in that
// namespace). Both serve executions from their own tables; exactly one holds the Lease
// and only that one writes status; when it stops, the other one, which has followed
// every change in its table meanwhile, takes the Lease over and catches status up.
//
// Which replica leads is read from each one's leader_election_master_status metric: both
// run on this host, so the Lease's holderIdentity (host name and a random suffix) does
// not tell them apart. Status writes are read from each one's log ("Updated status",
// written after every successful status patch, spec/modeldeployments.md).
func TestLeaderElectionFromKubeconfig(t *testing.T) {
	w := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const ns = "leaders"
	ensureNamespace(t, w, ns)
	apply(ctx, t, w, demoSecretYAML(ns)+demoModelYAML(w.providerAddr, ns, "chat", "openai-compatible", "openai/v1", "echo", "chat")+fmt.Sprintf(`---
apiVersion: v1
kind: ServiceAccount
metadata: {name: caller, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: caller-executor, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: switchboard-executor}
subjects: [{kind: ServiceAccount, name: caller, namespace: %[1]s}]
`, ns))
	key := client.ObjectKey{Namespace: ns, Name: "chat"}

	// The manager's kubeconfig, its context now naming the manager's namespace: no
	// --leader-election-namespace, no POD_NAMESPACE, no pod.
	kc, err := clientcmd.LoadFromFile(w.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[kc.CurrentContext].Namespace = managerNamespace
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	id := clusterIdentity{kubeconfig: kubeconfig}
	// Plain /metrics, to read the leader metric without a scraper's token.
	args := []string{"--leader-elect", "--watch-namespaces=" + ns, "--metrics-secure=false", bodylessLogLevel}
	replicas := []*clusterRuntime{startInClusterAs(t, id, "a", args...), startInClusterAs(t, id, "b", args...)}

	c := newAuthClient()
	c.secret("the manager's token", w.managerToken)
	c.secret("the demo provider's key", e2eKey)
	caller := c.secret("the caller's token", w.token(t, ns, "caller", callerAudience))

	t.Run("both serve executions", func(t *testing.T) {
		for _, r := range replicas {
			base := "http://" + r.api
			a := c.submit(t, base, caller, chatBody("hello "+r.label))
			st := c.waitTerminal(t, base, caller, a.ID)
			if st.Status != protocol.StatusCompleted || st.Route == nil || st.Route.Deployment != key.String() {
				t.Errorf("replica %s: %+v, route %+v; want completed on %s", r.label, st, st.Route, key)
			}
		}
	})

	// Exactly one leads; its Lease is in the kubeconfig context's namespace.
	var leader, follower *clusterRuntime
	eventually(t, 15*time.Second, "exactly one leader", func() bool {
		var leading []*clusterRuntime
		for _, r := range replicas {
			if plainMetric(t, r.metrics, `leader_election_master_status{name="`+leaseName+`"}`) == "1" {
				leading = append(leading, r)
			}
		}
		if len(leading) > 1 {
			t.Fatalf("both replicas report leading")
		}
		if len(leading) == 1 {
			leader = leading[0]
		}
		return len(leading) == 1
	})
	if leader == replicas[0] {
		follower = replicas[1]
	} else {
		follower = replicas[0]
	}
	holder := leaseHolder(ctx, t, w)
	host, _ := os.Hostname()
	if !strings.HasPrefix(holder, host+"_") {
		t.Errorf("Lease %s/%s holder %q, want this host's name and a suffix", managerNamespace, leaseName, holder)
	}
	t.Logf("replica %s leads (Lease holder %s); %s follows", leader.label, holder, follower.label)

	ready := waitModelStatus(t, w, key, 15*time.Second, "Ready", func(md *v1alpha1.ModelDeployment) bool {
		return meta.IsStatusConditionTrue(md.Status.Conditions, v1alpha1.ConditionReady) &&
			md.Status.ObservedGeneration == md.Generation
	})
	waitStatusWrite(t, leader, key)
	if n := statusWrites(follower, key); n != 0 {
		t.Errorf("the follower (%s) logged %d status writes of %s", follower.label, n, key)
	}

	// The leader stops without giving up the Lease, which stays held until it expires.
	// Meanwhile the model is suspended: the follower drops it from its table at once but
	// writes no status.
	leader.stop(t)
	md := &v1alpha1.ModelDeployment{}
	if err := w.client.Get(ctx, key, md); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Suspend = true
	if err := w.client.Patch(ctx, md, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the follower's table without the suspended model", func() bool {
		r := c.do(t, http.MethodPost, "http://"+follower.api+"/v1/executions", caller, chatBody("anyone there?"))
		return r.status == http.StatusUnprocessableEntity && r.err.Code == protocol.CodeUnsupportedCapability
	})
	stale := &v1alpha1.ModelDeployment{}
	if err := w.client.Get(ctx, key, stale); err != nil {
		t.Fatal(err)
	}
	if h := leaseHolder(ctx, t, w); h != holder {
		t.Logf("the follower took the Lease (%s) before the status could be checked: skipping the stale-status check", h)
	} else if stale.Status.ObservedGeneration != ready.Status.ObservedGeneration || statusWrites(follower, key) != 0 {
		t.Errorf("while following, %s wrote status: observedGeneration %d (was %d), %d writes logged",
			follower.label, stale.Status.ObservedGeneration, ready.Status.ObservedGeneration, statusWrites(follower, key))
	}

	// Once the Lease expires the follower takes it over and writes status.
	start := time.Now()
	eventually(t, 30*time.Second, "the follower to take the Lease over", func() bool {
		return plainMetric(t, follower.metrics, `leader_election_master_status{name="`+leaseName+`"}`) == "1"
	})
	if h := leaseHolder(ctx, t, w); h == holder {
		t.Errorf("the follower leads, but the Lease still names the old holder %s", h)
	}
	waitModelStatus(t, w, key, 10*time.Second, "suspended in status", func(md *v1alpha1.ModelDeployment) bool {
		c := meta.FindStatusCondition(md.Status.Conditions, v1alpha1.ConditionRoutable)
		return md.Status.ObservedGeneration == md.Generation && c != nil && c.Reason == v1alpha1.ReasonSuspended
	})
	waitStatusWrite(t, follower, key)
	t.Logf("the follower took over and caught status up %s after the leader stopped", time.Since(start).Round(100*time.Millisecond))
	c.canary(t, "switchboard "+leader.label, leader.out.String())
	c.canary(t, "switchboard "+follower.label, follower.out.String())
}

// stop interrupts the binary and waits for it to exit.
func (r *clusterRuntime) stop(t *testing.T) {
	t.Helper()
	if err := r.proc.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	r.proc.Wait(t, 15*time.Second)
}

// statusWrites counts the status writes of key the runtime logged.
func statusWrites(r *clusterRuntime, key client.ObjectKey) int {
	n := 0
	for _, line := range strings.Split(r.out.String(), "\n") {
		if strings.Contains(line, "Updated status") && strings.Contains(line, `"namespace":"`+key.Namespace+`"`) &&
			strings.Contains(line, `"name":"`+key.Name+`"`) {
			n++
		}
	}
	return n
}

// waitStatusWrite waits until the runtime has logged a status write of key: the line
// follows the write, so it may come a moment after the status is seen.
func waitStatusWrite(t *testing.T, r *clusterRuntime, key client.ObjectKey) {
	t.Helper()
	eventually(t, 5*time.Second, "switchboard "+r.label+" to log a status write of "+key.String(), func() bool {
		return statusWrites(r, key) > 0
	})
}

// leaseHolder returns the holder of the leader-election Lease in the manager's namespace.
func leaseHolder(ctx context.Context, t *testing.T, w *kubeWorld) string {
	t.Helper()
	lease, err := w.admin.CoordinationV1().Leases(managerNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		t.Fatalf("no Lease %s/%s: leader election did not use the kubeconfig context's namespace", managerNamespace, leaseName)
	}
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// plainMetric scrapes a plain-HTTP /metrics endpoint and returns the value of series, or
// "" when it is absent.
func plainMetric(t *testing.T, addr, series string) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + "/metrics")
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
