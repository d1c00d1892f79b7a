package controllers

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// A value that may hold a secret — endpoint user info or query string, a model id — never
// reaches a condition, an Event, a log line or an error. The API server side is covered
// by the envtest spec in validation_test.go; these tests cover what the controllers and
// the standalone loader write themselves.

const endpointCanary = "CANARY-endpoint-91c4"

// canaryEndpoints carry the canary in user info and in a query string.
var canaryEndpoints = map[string]string{
	"user info":    "https://user:" + endpointCanary + "@api.example.com/v1",
	"query string": "https://api.example.com/v1?api_key=" + endpointCanary,
	"both":         "https://" + endpointCanary + "@api.example.com/v1?key=" + endpointCanary + "#" + endpointCanary,
}

// canaryModels are deployments whose spec fails only because of a secret-bearing value.
func canaryModels() map[string]*v1alpha1.ModelDeployment {
	mds := map[string]*v1alpha1.ModelDeployment{
		"model id": newMD("ai", "gpt", func(md *v1alpha1.ModelDeployment) {
			md.Spec.Model = endpointCanary + strings.Repeat("x", 300)
		}),
	}
	for name, ep := range canaryEndpoints {
		mds["endpoint "+name] = newMD("ai", "gpt", withEndpoint(ep, false))
	}
	return mds
}

func TestSpecErrorsNeverRepeatSecretBearingValues(t *testing.T) {
	for name, md := range canaryModels() {
		t.Run(name, func(t *testing.T) {
			err := md.Spec.Validate()
			if err == nil {
				t.Fatal("spec accepted")
			}
			if strings.Contains(err.Error(), endpointCanary) {
				t.Errorf("validation error repeats the value: %v", err)
			}

			// The reconciler's path after the Go check: resolve → status → Events.
			res := resolve(md, newSecret("ai", map[string]string{"api-key": "sk"}), nil)
			if res.routable.reason != v1alpha1.ReasonInvalidSpec {
				t.Fatalf("Routable reason = %s, want InvalidSpec", res.routable.reason)
			}
			before := md.DeepCopy()
			setStatus(md, res, false)
			rec := events.NewFakeRecorder(16)
			r := &ModelDeploymentReconciler{Recorder: rec}
			r.recordTransitions(before, md)
			close(rec.Events)
			var recorded []string
			for e := range rec.Events {
				recorded = append(recorded, e)
			}
			if len(recorded) == 0 {
				t.Fatal("no Event recorded")
			}
			status, _ := yaml.Marshal(md.Status)
			for what, text := range map[string]string{"status": string(status), "Events": strings.Join(recorded, "\n")} {
				if strings.Contains(text, endpointCanary) {
					t.Errorf("%s repeat the value:\n%s", what, text)
				}
			}
		})
	}
}

func TestStandaloneNeverRepeatsSecretBearingValues(t *testing.T) {
	for name, md := range canaryModels() {
		t.Run(name, func(t *testing.T) {
			md.APIVersion, md.Kind = v1alpha1.GroupVersion.String(), "ModelDeployment"
			doc, err := yaml.Marshal(md)
			if err != nil {
				t.Fatal(err)
			}

			// At start: the error WatchManifests (and LoadManifests) returns.
			bad := t.TempDir()
			writeFile(t, bad, "models.yaml", string(doc))
			err = WatchManifests(context.Background(), bad, routing.NewRegistry(&routing.Holder{}), new(budget.Holder), time.Millisecond, funcr.New(func(string, string) {}, funcr.Options{}))
			if err == nil || !strings.Contains(err.Error(), "models.yaml: document 1") {
				t.Fatalf("WatchManifests error = %v, want the file's validation error", err)
			}
			if strings.Contains(err.Error(), endpointCanary) {
				t.Errorf("error repeats the value: %v", err)
			}

			// While running: the log line of a reload that fails, at every verbosity.
			dir := t.TempDir()
			writeFile(t, dir, "models.yaml", manifestsYAML)
			var (
				mu   sync.Mutex
				logs bytes.Buffer
			)
			log := funcr.New(func(prefix, args string) {
				mu.Lock()
				defer mu.Unlock()
				logs.WriteString(prefix + args + "\n")
			}, funcr.Options{Verbosity: 10})
			logged := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- WatchManifests(ctx, dir, routing.NewRegistry(&routing.Holder{}), new(budget.Holder), 10*time.Millisecond, log)
			}()
			defer func() { cancel(); <-done }()
			for !strings.Contains(logged(), "Routing table synced") {
				time.Sleep(5 * time.Millisecond)
			}
			writeFile(t, dir, "broken.yaml", string(doc))
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(logged(), "Manifests not applied") {
				if time.Now().After(deadline) {
					t.Fatalf("the failed reload was not logged:\n%s", logged())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if strings.Contains(logged(), endpointCanary) {
				t.Errorf("the log repeats the value:\n%s", logged())
			}
		})
	}

	// A Manifests value that skipped LoadManifests logs only the Routable message.
	for name, md := range canaryModels() {
		m := &Manifests{Deployments: []v1alpha1.ModelDeployment{*md}}
		var logs strings.Builder
		logOutcomes(funcr.New(func(prefix, args string) { logs.WriteString(prefix + args + "\n") }, funcr.Options{Verbosity: 10}),
			m.Apply(routing.NewRegistry(&routing.Holder{}), nil))
		if !strings.Contains(logs.String(), v1alpha1.ReasonInvalidSpec) {
			t.Errorf("%s: outcome not logged: %s", name, logs.String())
		}
		if strings.Contains(logs.String(), endpointCanary) {
			t.Errorf("%s: the log repeats the value: %s", name, logs.String())
		}
	}
}
