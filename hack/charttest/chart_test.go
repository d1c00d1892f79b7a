package charttest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// valueFiles are the two value files every check runs with.
var valueFiles = []struct {
	name string
	opts Options
}{
	{"default", Options{}},
	{"production", Options{ValuesFiles: []string{ProductionValues}}},
}

func TestLintStrict(t *testing.T) {
	t.Parallel()
	for _, vf := range valueFiles {
		t.Run(vf.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"lint", "--strict", ChartDir}
			for _, f := range vf.opts.ValuesFiles {
				args = append(args, "--values", f)
			}
			out, err := Helm(t.Context(), args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Fatalf("helm lint --strict:\n%s", out)
			}
		})
	}
}

// TestRenderedObjects renders both value files, CRDs included, and checks the objects
// each one yields, kind by kind.
func TestRenderedObjects(t *testing.T) {
	t.Parallel()
	want := map[string]map[string]int{
		"default": {
			"CustomResourceDefinition": 3, "ServiceAccount": 1, "ClusterRole": 4,
			"ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Service": 2, "Deployment": 1,
		},
		"production": {
			"CustomResourceDefinition": 3, "ServiceAccount": 1, "ClusterRole": 4,
			"ClusterRoleBinding": 2, "Role": 2, "RoleBinding": 2, "Service": 2, "Deployment": 1,
			"PodDisruptionBudget": 1, "NetworkPolicy": 1, "ServiceMonitor": 1,
		},
	}
	for _, vf := range valueFiles {
		t.Run(vf.name, func(t *testing.T) {
			t.Parallel()
			opts := vf.opts
			opts.IncludeCRDs = true
			objs := render(t, opts)
			got := map[string]int{}
			for _, o := range objs {
				got[o.Kind]++
				if o.Name == "" {
					t.Errorf("%s from %s has no name", o.Kind, o.Template)
				}
			}
			t.Logf("%s values: %d objects rendered (%d without the CRDs): %s",
				vf.name, len(objs), len(objs)-got["CustomResourceDefinition"], kindCounts(got))
			if diff := cmp.Diff(want[vf.name], got); diff != "" {
				t.Errorf("rendered kinds (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSchemaRefuses checks that helm refuses bad values before rendering, naming the
// value at fault.
func TestSchemaRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"negative replicas", set("replicaCount=-1"), []string{"'/replicaCount'", "minimum"}},
		{"redis without its Secret", set("eventStore.type=redis"), []string{"'/eventStore/redis/existingSecret'", "minLength"}},
		{"unknown top-level key", set("replicas=2"), []string{"additional properties 'replicas' not allowed"}},
		{"unknown nested key", set("eventStore.redis.url=redis://r:6379"), []string{"'/eventStore/redis'", "additional properties 'url' not allowed"}},
		{"memory with two replicas", set("replicaCount=2"), []string{"'/replicaCount'", "maximum: got 2, want 1"}},
		{"unknown event store", set("eventStore.type=etcd"), []string{"'/eventStore/type'", "'memory', 'redis', 'postgres'"}},
		{"unknown auth mode", set("auth.mode=oidc"), []string{"'/auth/mode'"}},
		{"static auth without its Secret", set("auth.mode=static"), []string{"'/auth/static/existingSecret'"}},
		{"kubernetes auth without an audience", Options{SetJSON: []string{"auth.audiences=[]"}}, []string{"'/auth/audiences'", "minItems"}},
		{"sentinel master without addresses", set("eventStore.type=redis", "eventStore.redis.existingSecret=r", "eventStore.redis.sentinel.master=m"),
			[]string{"'/eventStore/redis/sentinel/addrs'", "minItems"}},
		{"Redis URL on the command line", set("extraArgs[0]=--redis-url=redis://:pw@r:6379"), []string{"'/extraArgs/0'", "'not' failed"}},
		{"invalid duration", set("runtime.executionLease=15 seconds"), []string{"'/runtime/executionLease'"}},
		{"zero concurrency", set("runtime.maxConcurrentExecutions=0"), []string{"'/runtime/maxConcurrentExecutions'"}},
		{"typo in the security context", set("securityContext.readOnlyRootFileSystem=true"), []string{"'/securityContext'", "readOnlyRootFileSystem"}},
		{"invalid Secret name", set("eventStore.type=redis", "eventStore.redis.existingSecret=Redis_URL"), []string{"'/eventStore/redis/existingSecret'"}},
		{"postgres without its Secret", set("eventStore.type=postgres"), []string{"'/eventStore/postgres/existingSecret'", "minLength"}},
		{"postgres with an invalid Secret name", set("eventStore.type=postgres", "eventStore.postgres.existingSecret=PG_URL"), []string{"'/eventStore/postgres/existingSecret'"}},
		{"postgres with an empty Secret key", set("eventStore.type=postgres", "eventStore.postgres.existingSecret=pg", "eventStore.postgres.existingSecretKey="),
			[]string{"'/eventStore/postgres/existingSecretKey'"}},
		{"PostgreSQL URL in the values", set("eventStore.postgres.url=postgres://u:pw@db/x"), []string{"'/eventStore/postgres'", "additional properties 'url' not allowed"}},
		{"PostgreSQL URL on the command line", set("extraArgs[0]=--postgres-url=postgres://u:pw@db/x"), []string{"'/extraArgs/0'", "'not' failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := Render(t.Context(), tc.opts)
			if err == nil {
				t.Fatalf("helm template with %+v rendered:\n%s", tc.opts, out)
			}
			if !strings.Contains(err.Error(), "don't meet the specifications of the schema") {
				t.Errorf("not refused by values.schema.json: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
		})
	}
}

// TestTemplateRefuses checks the template's own checks, which stand in for the schema
// when it is skipped (--skip-schema-validation).
func TestTemplateRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"memory with two replicas", []string{"replicaCount=2"}, "replicaCount: eventStore.type=memory keeps executions in one process"},
		{"redis without its Secret", []string{"eventStore.type=redis"}, "eventStore.redis.existingSecret: eventStore.type=redis needs"},
		{"postgres without its Secret", []string{"eventStore.type=postgres"}, "eventStore.postgres.existingSecret: eventStore.type=postgres needs"},
		{"static auth without its Secret", []string{"auth.mode=static"}, "auth.static.existingSecret: auth.mode=static needs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(Options{Set: tc.set}.args("template"), "--skip-schema-validation")
			_, err := Helm(t.Context(), args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error mentioning %q, got %v", tc.want, err)
			}
		})
	}
}

// TestSchemaAccepts renders values the schema must let through.
func TestSchemaAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"memory scaled to zero", []string{"replicaCount=0"}},
		{"redis with defaults", []string{"eventStore.type=redis", "eventStore.redis.existingSecret=redis"}},
		{"redis through Sentinel", []string{"eventStore.type=redis", "eventStore.redis.existingSecret=redis",
			"eventStore.redis.sentinel.master=mymaster", "eventStore.redis.sentinel.addrs={s-0:26379,s-1:26379}",
			"eventStore.redis.sentinel.passwordSecret.name=sentinel", "eventStore.redis.ca.secretName=redis-ca"}},
		{"static auth", []string{"auth.mode=static", "auth.static.existingSecret=tokens", "auth.streamToken.existingSecret=stream-key"}},
		{"no auth, plain metrics", []string{"auth.mode=none", "metrics.secure=false", "serviceMonitor.enabled=true"}},
		{"metrics off", []string{"metrics.enabled=false", "serviceMonitor.enabled=true", "networkPolicy.enabled=true"}},
		{"percentage PDB", []string{"eventStore.type=redis", "eventStore.redis.existingSecret=redis", "podDisruptionBudget.minAvailable=50%"}},
		{"postgres with defaults", []string{"eventStore.type=postgres", "eventStore.postgres.existingSecret=pg"}},
		{"postgres, own key, one replica", []string{"eventStore.type=postgres", "eventStore.postgres.existingSecret=pg",
			"eventStore.postgres.existingSecretKey=dsn", "replicaCount=1", "eventStore.retention=72h"}},
		{"image digest", []string{"image.digest=sha256:" + strings.Repeat("ab", 32)}},
		{"existing ServiceAccount, no RBAC", []string{"serviceAccount.create=false", "serviceAccount.name=custom", "rbac.create=false", "rbac.createCallerRoles=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, Options{Set: tc.set})
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
		})
	}
}

// TestRestrictedSecurityContext reads the rendered Deployment and checks each field the
// restricted Pod Security Standard asks for, and what the runtime needs besides.
func TestRestrictedSecurityContext(t *testing.T) {
	t.Parallel()
	for _, vf := range valueFiles {
		t.Run(vf.name, func(t *testing.T) {
			t.Parallel()
			d := renderDeployment(t, vf.opts)
			pod := d.Spec.Template.Spec
			psc := pod.SecurityContext
			checks := []struct {
				field string
				ok    bool
			}{
				{"pod securityContext.runAsNonRoot: true", isTrue(psc.RunAsNonRoot)},
				{"pod securityContext.runAsUser: 65532", isInt(psc.RunAsUser, 65532)},
				{"pod securityContext.seccompProfile.type: RuntimeDefault", psc.SeccompProfile != nil && psc.SeccompProfile.Type == "RuntimeDefault"},
				{"automountServiceAccountToken: true (the runtime calls the API server)", isTrue(pod.AutomountServiceAccountToken)},
				{"no hostNetwork, hostPID or hostIPC", !pod.HostNetwork && !pod.HostPID && !pod.HostIPC},
				{"one container", len(pod.Containers) == 1},
			}
			for _, c := range checks {
				if !c.ok {
					t.Errorf("want %s", c.field)
				}
			}
			if len(pod.Containers) != 1 {
				t.FailNow()
			}
			ctr := pod.Containers[0]
			sc := ctr.SecurityContext
			if sc == nil {
				t.Fatal("the container has no securityContext")
			}
			for _, c := range []struct {
				field string
				ok    bool
			}{
				{"runAsNonRoot: true", isTrue(sc.RunAsNonRoot)},
				{"runAsUser: 65532", isInt(sc.RunAsUser, 65532)},
				{"readOnlyRootFilesystem: true", isTrue(sc.ReadOnlyRootFilesystem)},
				{"allowPrivilegeEscalation: false", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation},
				{"privileged unset or false", sc.Privileged == nil || !*sc.Privileged},
				{"capabilities.drop: [ALL]", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []string{"ALL"})},
				{"no capabilities added", sc.Capabilities == nil || len(sc.Capabilities.Add) == 0},
				{"seccompProfile.type: RuntimeDefault", sc.SeccompProfile != nil && sc.SeccompProfile.Type == "RuntimeDefault"},
				{"liveness probe GET /healthz on 8081", probeOn(ctr.LivenessProbe, "/healthz", ctr.Ports, 8081)},
				{"readiness probe GET /readyz on 8081", probeOn(ctr.ReadinessProbe, "/readyz", ctr.Ports, 8081)},
				{"resource requests", len(ctr.Resources.Requests) > 0},
				{"command /switchboard", slices.Equal(ctr.Command, []string{"/switchboard"})},
			} {
				if !c.ok {
					t.Errorf("container: want %s", c.field)
				}
			}
			if !strings.HasSuffix(ctr.Image, ":"+appVersion(t)) || !strings.HasPrefix(ctr.Image, "ghcr.io/switchboard-dev/switchboard:") {
				t.Errorf("image %q: want ghcr.io/switchboard-dev/switchboard:<appVersion %s>", ctr.Image, appVersion(t))
			}
			// The pod may only end after the drain (--shutdown-grace) and the providers'
			// cleanup (--cleanup-grace).
			grace := argSeconds(t, ctr.Args, "--shutdown-grace") + argSeconds(t, ctr.Args, "--cleanup-grace")
			if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= grace {
				t.Errorf("terminationGracePeriodSeconds %v: want more than --shutdown-grace + --cleanup-grace = %ds",
					pod.TerminationGracePeriodSeconds, grace)
			}
			if !slices.ContainsFunc(pod.TopologySpreadConstraints, func(c topologySpreadConstraint) bool {
				return c.TopologyKey == "kubernetes.io/hostname" && c.WhenUnsatisfiable == "ScheduleAnyway" && len(c.LabelSelector.MatchLabels) > 0
			}) {
				t.Errorf("want a topology spread constraint by hostname, ScheduleAnyway, selecting the pods: %+v", pod.TopologySpreadConstraints)
			}
		})
	}
}

// TestReplicas checks the replica defaults of each event store and the
// PodDisruptionBudget that comes with more than one replica.
func TestReplicas(t *testing.T) {
	t.Parallel()
	redis := []string{"eventStore.type=redis", "eventStore.redis.existingSecret=redis"}
	postgres := []string{"eventStore.type=postgres", "eventStore.postgres.existingSecret=pg"}
	for _, tc := range []struct {
		name     string
		opts     Options
		replicas int
	}{
		{"memory", Options{}, 1},
		{"redis", Options{Set: redis}, 2},
		{"redis, replicaCount=1", Options{Set: append(slices.Clone(redis), "replicaCount=1")}, 1},
		{"postgres", Options{Set: postgres}, 2},
		{"postgres, replicaCount=3", Options{Set: append(slices.Clone(postgres), "replicaCount=3")}, 3},
		{"production", Options{ValuesFiles: []string{ProductionValues}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, tc.opts)
			var d deployment
			decode(t, find(t, objs, "Deployment", DefaultRelease), &d)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("replicas %v, want %d", d.Spec.Replicas, tc.replicas)
			}
			pdbs := kinds(objs, "PodDisruptionBudget")
			if wantPDB := tc.replicas > 1; (len(pdbs) == 1) != wantPDB {
				t.Errorf("%d PodDisruptionBudgets with %d replicas", len(pdbs), tc.replicas)
			}
			for _, o := range pdbs {
				var pdb struct {
					Spec struct {
						MinAvailable any `json:"minAvailable"`
					} `json:"spec"`
				}
				decode(t, o, &pdb)
				if fmt.Sprint(pdb.Spec.MinAvailable) != "1" {
					t.Errorf("PodDisruptionBudget minAvailable %v, want 1", pdb.Spec.MinAvailable)
				}
			}
		})
	}
}

// TestRedisURLFromSecret checks that the Redis URL reaches the runtime as a file from the
// Secret, never on its command line.
func TestRedisURLFromSecret(t *testing.T) {
	t.Parallel()
	d := renderDeployment(t, Options{ValuesFiles: []string{ProductionValues}})
	pod := d.Spec.Template.Spec
	args := pod.Containers[0].Args
	for _, a := range args {
		if strings.HasPrefix(a, "--redis-url=") {
			t.Errorf("the Redis URL is on the command line: %s", a)
		}
	}
	for _, want := range []string{"--event-store=redis", "--redis-url-file=/etc/switchboard/redis/url", "--leader-elect", "--auth=kubernetes"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	mounted := slices.ContainsFunc(pod.Containers[0].VolumeMounts, func(m volumeMount) bool {
		return m.Name == "redis-url" && m.MountPath == "/etc/switchboard/redis" && m.ReadOnly
	})
	fromSecret := slices.ContainsFunc(pod.Volumes, func(v volume) bool {
		return v.Name == "redis-url" && v.Secret != nil && v.Secret.SecretName == "switchboard-redis" &&
			len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "url" && v.Secret.Items[0].Path == "url"
	})
	if !mounted || !fromSecret {
		t.Errorf("want volume redis-url from Secret switchboard-redis (key url) mounted read-only at /etc/switchboard/redis: %+v %+v",
			pod.Volumes, pod.Containers[0].VolumeMounts)
	}
}

// TestPostgresURLFromSecret checks that the PostgreSQL URL reaches the runtime as
// $SWITCHBOARD_POSTGRES_URL from the Secret's key (spec/postgres.md, "Connecting"):
// never in its arguments, never in a ConfigMap, and no Redis setting beside it.
func TestPostgresURLFromSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  []string
		key  string
	}{
		{"default key", []string{"eventStore.type=postgres", "eventStore.postgres.existingSecret=switchboard-postgres"}, "url"},
		{"own key", []string{"eventStore.type=postgres", "eventStore.postgres.existingSecret=switchboard-postgres",
			"eventStore.postgres.existingSecretKey=dsn"}, "dsn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, Options{Set: tc.set})
			var d deployment
			decode(t, find(t, objs, "Deployment", DefaultRelease), &d)
			ctr := d.Spec.Template.Spec.Containers[0]
			if !slices.Contains(ctr.Args, "--event-store=postgres") {
				t.Errorf("args %q lack --event-store=postgres", ctr.Args)
			}
			for _, a := range ctr.Args {
				if strings.HasPrefix(a, "--postgres-url") || strings.HasPrefix(a, "--redis-") || strings.Contains(a, "postgres://") {
					t.Errorf("argument %q: the URL comes from the environment only, and no Redis flag goes with postgres", a)
				}
			}
			var found []envVar
			for _, e := range ctr.Env {
				if e.Name == "SWITCHBOARD_POSTGRES_URL" {
					found = append(found, e)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d SWITCHBOARD_POSTGRES_URL variables in %+v, want 1", len(found), ctr.Env)
			}
			e := found[0]
			var ref secretKeySelector
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref = *e.ValueFrom.SecretKeyRef
			}
			if e.Value != "" || ref.Name != "switchboard-postgres" || ref.Key != tc.key {
				t.Errorf("SWITCHBOARD_POSTGRES_URL: value %q, from Secret %q key %q; want it from Secret switchboard-postgres, key %s",
					e.Value, ref.Name, ref.Key, tc.key)
			}
			if slices.ContainsFunc(ctr.VolumeMounts, func(m volumeMount) bool { return strings.HasPrefix(m.Name, "redis") }) {
				t.Errorf("Redis volumes mounted with postgres: %+v", ctr.VolumeMounts)
			}
			if cms := kinds(objs, "ConfigMap"); len(cms) != 0 {
				t.Errorf("%d ConfigMaps rendered, want none: nothing of the store goes into one", len(cms))
			}
			notes, err := Notes(t.Context(), Options{Set: tc.set})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"2 replica(s), postgres event store.", "Secret switchboard-postgres\n(key " + tc.key + ", as $SWITCHBOARD_POSTGRES_URL)",
				"503 provider_unavailable"} {
				if !strings.Contains(notes, want) {
					t.Errorf("NOTES lack %q:\n%s", want, notes)
				}
			}
		})
	}
}

// TestArgsAreFlags checks that every argument the chart can pass is a flag the binary
// defines (in cmd/switchboard, the Redis connection flags, controller-runtime's zap
// flags), with every optional value set, so that a renamed flag fails here rather than
// in a cluster.
func TestArgsAreFlags(t *testing.T) {
	t.Parallel()
	sources := goSources(t, filepath.Join(Root(), "cmd/switchboard"), filepath.Join(Root(), "runtime/eventstore/redisconn"))
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.Dir}}", "sigs.k8s.io/controller-runtime/pkg/log/zap").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sources += goSources(t, strings.TrimSpace(string(out)))

	for _, opts := range []Options{
		{ValuesFiles: []string{ProductionValues}, Set: []string{
			"eventStore.retention=48h", "eventStore.redis.ca.secretName=redis-ca", "eventStore.redis.ca.configMapName=",
			"eventStore.redis.sentinel.master=mymaster", "eventStore.redis.sentinel.addrs={s-0:26379}",
			"eventStore.redis.sentinel.passwordSecret.name=sentinel", "auth.streamToken.existingSecret=stream-key",
			"auth.streamToken.ttl=5m", "runtime.executionLease=20s", "runtime.idempotencyTTL=48h",
			"watchNamespaces={ai}", "metrics.tls.existingSecret=metrics-cert",
			"service.tls.existingSecret=api-tls", "auth.streamToken.keyRotation=12h",
		}},
		set("auth.mode=static", "auth.static.existingSecret=tokens", "metrics.enabled=false", "leaderElection.enabled=false"),
		set("eventStore.type=postgres", "eventStore.postgres.existingSecret=pg", "eventStore.retention=48h"),
	} {
		d := renderDeployment(t, opts)
		for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
			name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if !strings.Contains(sources, strconv.Quote(name)) {
				t.Errorf("%s: the binary defines no flag %q", arg, name)
			}
		}
	}
}

// goSources returns the non-test Go files of the directories, concatenated.
func goSources(t *testing.T, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range dirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(src)
		}
	}
	return b.String()
}

// TestRBACMatchesConfig checks the chart's roles against config/rbac, where role.yaml is
// generated from the +kubebuilder:rbac markers, with both value files: the same rules (the
// manager's ClusterRole, with watchNamespaces, split into the cluster-scoped rules that
// stay in it and a Role per watched namespace), no wildcard, and bindings that all point
// at rendered roles and the release's ServiceAccount.
func TestRBACMatchesConfig(t *testing.T) {
	t.Parallel()
	configRoles := configRBAC(t)
	if len(configRoles) < 5 {
		t.Fatalf("config/rbac: %d roles, want the manager's ClusterRole and Role and the three caller roles", len(configRoles))
	}
	for _, vf := range valueFiles {
		t.Run(vf.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, vf.opts)
			rendered := renderedRoles(t, objs)
			var watched []string
			for key, r := range rendered {
				if strings.HasPrefix(key, "Role/") && r.Metadata.Name == DefaultRelease+"-manager-scoped" {
					watched = append(watched, r.Metadata.Namespace)
				}
			}
			sort.Strings(watched)
			if scoped := vf.name == "production"; scoped != (len(watched) > 0) {
				t.Errorf("Roles %s-manager-scoped in %q; want them exactly when watchNamespaces is set (the production values)", DefaultRelease, watched)
			}
			for _, c := range configRoles {
				name := c.Kind + "/" + DefaultRelease + "-" + strings.TrimPrefix(c.Metadata.Name, "switchboard-")
				if c.Kind == "Role" {
					name = "Role/" + DefaultNamespace + "/" + DefaultRelease + "-" + strings.TrimPrefix(c.Metadata.Name, "switchboard-")
				}
				r, ok := rendered[name]
				if !ok {
					t.Errorf("config/rbac's %s %s is not rendered as %s", c.Kind, c.Metadata.Name, name)
					continue
				}
				got := r.Rules
				if c.Kind == "ClusterRole" && c.Metadata.Name == "switchboard-manager" && len(watched) > 0 {
					// What the ClusterRole lost, each watched namespace's Role holds.
					for _, ns := range watched {
						role := rendered["Role/"+ns+"/"+DefaultRelease+"-manager-scoped"]
						if diff := cmp.Diff(sortedRules(namespacedRules(c.Rules)), sortedRules(role.Rules)); diff != "" {
							t.Errorf("Role %s-manager-scoped in %s: rules differ from the namespaced rules of config/rbac (-config +chart):\n%s", DefaultRelease, ns, diff)
						}
					}
					got = append(slices.Clone(got), namespacedRules(c.Rules)...)
				}
				if diff := cmp.Diff(sortedRules(c.Rules), sortedRules(got)); diff != "" {
					t.Errorf("%s rules differ from config/rbac (-config +chart):\n%s", name, diff)
				}
			}
			if want := len(configRoles) + len(watched); len(rendered) != want {
				t.Errorf("%d roles rendered, want config/rbac's %d and one per watched namespace", len(rendered), want)
			}

			// TokenReview and SubjectAccessReview stay with the manager's ClusterRole, so
			// nothing binds system:auth-delegator.
			manager := rendered["ClusterRole/"+DefaultRelease+"-manager"]
			for _, res := range []string{"tokenreviews", "subjectaccessreviews"} {
				if !slices.ContainsFunc(manager.Rules, func(r rbacRule) bool {
					return slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, "create")
				}) {
					t.Errorf("the manager's ClusterRole cannot create %s", res)
				}
			}
			checkBindings(t, objs, rendered)
			for _, o := range kinds(objs, "ClusterRoleBinding") {
				if strings.Contains(string(o.YAML), "system:auth-delegator") {
					t.Errorf("ClusterRoleBinding %s binds system:auth-delegator, which the manager's ClusterRole already covers", o.Name)
				}
			}
		})
	}
}

// TestWatchNamespaces checks where the release's ServiceAccount may read Secrets: with
// watchNamespaces only in those namespaces, through a Role in each, and nothing namespaced
// cluster-wide; without it, everywhere (the default, which the README warns about).
func TestWatchNamespaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     Options
		wide     bool     // Secrets readable cluster-wide
		readable []string // namespaces where Secrets are readable through a RoleBinding
		bindings []string
	}{
		{name: "default", opts: Options{}, wide: true, bindings: []string{
			"ClusterRoleBinding /switchboard-manager -> ClusterRole switchboard-manager",
			"RoleBinding switchboard-system/switchboard-manager -> Role switchboard-manager",
		}},
		{name: "watchNamespaces", opts: set("watchNamespaces={ai,search}"), readable: []string{"ai", "search"}, bindings: []string{
			"ClusterRoleBinding /switchboard-manager -> ClusterRole switchboard-manager",
			"RoleBinding ai/switchboard-manager-scoped -> Role switchboard-manager-scoped",
			"RoleBinding search/switchboard-manager-scoped -> Role switchboard-manager-scoped",
			"RoleBinding switchboard-system/switchboard-manager -> Role switchboard-manager",
		}},
		{name: "production values", opts: Options{ValuesFiles: []string{ProductionValues}}, readable: []string{"ai"}, bindings: []string{
			"ClusterRoleBinding /switchboard-manager -> ClusterRole switchboard-manager",
			"ClusterRoleBinding /switchboard-metrics-reader -> ClusterRole switchboard-metrics-reader",
			"RoleBinding ai/switchboard-manager-scoped -> Role switchboard-manager-scoped",
			"RoleBinding switchboard-system/switchboard-manager -> Role switchboard-manager",
		}},
		// Nothing reviews callers: nothing at all is bound cluster-wide.
		{name: "watchNamespaces, no reviews", opts: set("watchNamespaces={ai}", "auth.mode=none", "metrics.secure=false"), readable: []string{"ai"}, bindings: []string{
			"RoleBinding ai/switchboard-manager-scoped -> Role switchboard-manager-scoped",
			"RoleBinding switchboard-system/switchboard-manager -> Role switchboard-manager",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, tc.opts)
			roles := renderedRoles(t, objs)
			var bindings, readable []string
			wide := false
			for _, o := range objs {
				if !strings.HasSuffix(o.Kind, "Binding") {
					continue
				}
				var b rbacBinding
				decode(t, o, &b)
				bindings = append(bindings, fmt.Sprintf("%s %s/%s -> %s %s", o.Kind, o.Namespace, o.Name, b.RoleRef.Kind, b.RoleRef.Name))
				key := b.RoleRef.Kind + "/" + b.RoleRef.Name
				if b.RoleRef.Kind == "Role" {
					key = "Role/" + o.Namespace + "/" + b.RoleRef.Name
				}
				role := roles[key]
				switch {
				case o.Kind == "ClusterRoleBinding" && grants(role.Rules, "", "secrets", "get"):
					wide = true
				case o.Kind == "RoleBinding" && grants(role.Rules, "", "secrets", "get"):
					readable = append(readable, o.Namespace)
				}
				if o.Kind == "ClusterRoleBinding" && !tc.wide {
					for _, r := range role.Rules {
						for _, res := range r.Resources {
							if !slices.Contains([]string{"tokenreviews", "subjectaccessreviews"}, res) {
								t.Errorf("ClusterRoleBinding %s grants %v on %s cluster-wide: %+v", o.Name, r.Verbs, res, r)
							}
						}
					}
				}
			}
			sort.Strings(bindings)
			sort.Strings(readable)
			if diff := cmp.Diff(tc.bindings, bindings); diff != "" {
				t.Errorf("bindings (-want +got):\n%s", diff)
			}
			if wide != tc.wide || !slices.Equal(readable, tc.readable) {
				t.Errorf("Secrets readable cluster-wide: %v, in namespaces %q; want %v, %q", wide, readable, tc.wide, tc.readable)
			}
			if !tc.wide {
				for key, r := range roles {
					if strings.HasPrefix(key, "ClusterRole/") && grants(r.Rules, "", "secrets", "get") {
						t.Errorf("%s grants Secrets, bound or not", key)
					}
				}
			}
			for _, ns := range tc.readable {
				role := roles["Role/"+ns+"/"+DefaultRelease+"-manager-scoped"]
				for _, verb := range []string{"get", "list", "watch"} {
					if !grants(role.Rules, "", "secrets", verb) || !grants(role.Rules, "ai.switchboard.dev", "modeldeployments", verb) ||
						!grants(role.Rules, "ai.switchboard.dev", "budgets", verb) {
						t.Errorf("Role %s-manager-scoped in %s does not grant %s on secrets, modeldeployments and budgets", DefaultRelease, ns, verb)
					}
				}
			}
			if len(tc.readable) > 0 {
				var d deployment
				decode(t, find(t, objs, "Deployment", DefaultRelease), &d)
				if want := "--watch-namespaces=" + strings.Join(tc.readable, ","); !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, want) {
					t.Errorf("args lack %s: %q", want, d.Spec.Template.Spec.Containers[0].Args)
				}
			}
		})
	}
}

// renderedRoles decodes the rendered Roles and ClusterRoles by "ClusterRole/name" and
// "Role/namespace/name", failing on a wildcard.
func renderedRoles(t *testing.T, objs []Object) map[string]rbacRole {
	t.Helper()
	roles := map[string]rbacRole{}
	for _, o := range objs {
		if o.Kind != "Role" && o.Kind != "ClusterRole" {
			continue
		}
		var r rbacRole
		decode(t, o, &r)
		key := o.Kind + "/" + o.Name
		if o.Kind == "Role" {
			key = "Role/" + o.Namespace + "/" + o.Name
		}
		roles[key] = r
		for _, rule := range r.Rules {
			for _, field := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.NonResourceURLs} {
				if slices.Contains(field, "*") {
					t.Errorf("%s %s has a wildcard: %+v", o.Kind, o.Name, rule)
				}
			}
		}
	}
	return roles
}

// namespacedRules are the rules of rules that do not name a cluster-scoped resource (the
// manager's: TokenReview and SubjectAccessReview).
func namespacedRules(rules []rbacRule) []rbacRule {
	return slices.DeleteFunc(slices.Clone(rules), func(r rbacRule) bool {
		return slices.ContainsFunc(r.Resources, func(res string) bool {
			return res == "tokenreviews" || res == "subjectaccessreviews"
		})
	})
}

// sortedRules orders rules by their content, so that lists compare as sets.
func sortedRules(rules []rbacRule) []rbacRule {
	out := slices.Clone(rules)
	slices.SortFunc(out, func(a, b rbacRule) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}

// grants reports whether rules allow verb on group/resource.
func grants(rules []rbacRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}

// TestNotes checks that the release notes tell a team how to call the runtime.
func TestNotes(t *testing.T) {
	t.Parallel()
	for _, vf := range valueFiles {
		t.Run(vf.name, func(t *testing.T) {
			t.Parallel()
			notes, err := Notes(t.Context(), vf.opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"http://switchboard.switchboard-system.svc",
				`audience "switchboard"`,
				"--clusterrole=switchboard-executor",
				"audience: switchboard",
				"kubectl create token summarizer -n search --audience switchboard",
				"curl -sS -X POST http://switchboard.switchboard-system.svc:8080/v1/executions",
				`-H "Authorization: Bearer $TOKEN"`,
				"kubectl -n ai label secret openai-credentials ai.switchboard.dev/credential=true",
				"may send that namespace's labelled\nSecrets to the endpoint they choose",
			} {
				if !strings.Contains(notes, want) {
					t.Errorf("NOTES lack %q:\n%s", want, notes)
				}
			}
			// The default install is warned about; the production values set
			// watchNamespaces.
			warned := strings.Contains(notes, "watchNamespaces is empty: the runtime's ClusterRole lets it read every Secret")
			if want := vf.name == "default"; warned != want {
				t.Errorf("NOTES warn about every Secret being readable: %v, want %v:\n%s", warned, want, notes)
			}
		})
	}
}

// checkBindings checks that every binding names a rendered role (a Role of its own
// namespace) and only the release's ServiceAccount, except the metrics-reader binding,
// whose subjects are the scrapers.
func checkBindings(t *testing.T, objs []Object, roles map[string]rbacRole) {
	t.Helper()
	for _, o := range objs {
		if o.Kind != "RoleBinding" && o.Kind != "ClusterRoleBinding" {
			continue
		}
		var b rbacBinding
		decode(t, o, &b)
		key := b.RoleRef.Kind + "/" + b.RoleRef.Name
		if b.RoleRef.Kind == "Role" {
			key = "Role/" + o.Namespace + "/" + b.RoleRef.Name
		}
		if _, ok := roles[key]; !ok {
			t.Errorf("%s %s refers to %s %s, which is not rendered (in its namespace)", o.Kind, o.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		if b.RoleRef.Name == DefaultRelease+"-metrics-reader" {
			continue
		}
		want := []rbacSubject{{Kind: "ServiceAccount", Name: DefaultRelease, Namespace: DefaultNamespace}}
		if diff := cmp.Diff(want, b.Subjects); diff != "" {
			t.Errorf("%s %s subjects (-want +got):\n%s", o.Kind, o.Name, diff)
		}
	}
}

// configRBAC reads the Roles and ClusterRoles of config/rbac.
func configRBAC(t *testing.T) []rbacRole {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(Root(), "config/rbac/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var roles []rbacRole
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Objects(b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, o := range objs {
			if o.Kind == "Role" || o.Kind == "ClusterRole" {
				var r rbacRole
				decode(t, o, &r)
				roles = append(roles, r)
			}
		}
	}
	return roles
}

// set returns Options that set values with --set.
func set(values ...string) Options { return Options{Set: values} }

func render(t *testing.T, o Options) []Object {
	t.Helper()
	out, err := Render(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func renderDeployment(t *testing.T, o Options) deployment {
	t.Helper()
	var d deployment
	decode(t, find(t, render(t, o), "Deployment", DefaultRelease), &d)
	return d
}

func find(t *testing.T, objs []Object, kind, name string) Object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return Object{}
}

func kinds(objs []Object, kind string) []Object {
	var out []Object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// decode decodes the fields of an object that into models; the others are ignored.
func decode(t *testing.T, o Object, into any) {
	t.Helper()
	if err := yaml.Unmarshal(o.YAML, into); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Name, err)
	}
}

func kindCounts(counts map[string]int) string {
	var parts []string
	for k, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(), ChartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q, %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// argSeconds returns the value of a --flag=<n>s argument.
func argSeconds(t *testing.T, args []string, flag string) int64 {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			var n int64
			if _, err := fmt.Sscanf(v, "%ds", &n); err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			return n
		}
	}
	t.Fatalf("no %s argument in %q", flag, args)
	return 0
}

func isTrue(b *bool) bool { return b != nil && *b }

func isInt(n *int64, want int64) bool { return n != nil && *n == want }

// probeOn reports whether p is an HTTP GET of path on the container port numbered port
// (by name or number).
func probeOn(p *probe, path string, ports []containerPort, port int) bool {
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path {
		return false
	}
	var name string
	if err := json.Unmarshal(p.HTTPGet.Port, &name); err != nil {
		var n int
		return json.Unmarshal(p.HTTPGet.Port, &n) == nil && n == port
	}
	return slices.ContainsFunc(ports, func(c containerPort) bool { return c.Name == name && c.ContainerPort == port })
}

// The parts of the rendered objects the tests read.
type (
	deployment struct {
		Spec struct {
			Replicas *int `json:"replicas"`
			Template struct {
				Spec podSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	podSpec struct {
		AutomountServiceAccountToken  *bool                      `json:"automountServiceAccountToken"`
		HostNetwork                   bool                       `json:"hostNetwork"`
		HostPID                       bool                       `json:"hostPID"`
		HostIPC                       bool                       `json:"hostIPC"`
		SecurityContext               podSecurityContext         `json:"securityContext"`
		TerminationGracePeriodSeconds *int64                     `json:"terminationGracePeriodSeconds"`
		Containers                    []container                `json:"containers"`
		Volumes                       []volume                   `json:"volumes"`
		TopologySpreadConstraints     []topologySpreadConstraint `json:"topologySpreadConstraints"`
	}
	podSecurityContext struct {
		RunAsNonRoot   *bool           `json:"runAsNonRoot"`
		RunAsUser      *int64          `json:"runAsUser"`
		SeccompProfile *seccompProfile `json:"seccompProfile"`
	}
	seccompProfile struct {
		Type string `json:"type"`
	}
	container struct {
		Image           string           `json:"image"`
		Command         []string         `json:"command"`
		Args            []string         `json:"args"`
		Ports           []containerPort  `json:"ports"`
		LivenessProbe   *probe           `json:"livenessProbe"`
		ReadinessProbe  *probe           `json:"readinessProbe"`
		SecurityContext *securityContext `json:"securityContext"`
		VolumeMounts    []volumeMount    `json:"volumeMounts"`
		Env             []envVar         `json:"env"`
		Resources       struct {
			Requests map[string]any `json:"requests"`
		} `json:"resources"`
	}
	containerPort struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	}
	probe struct {
		HTTPGet *struct {
			Path string          `json:"path"`
			Port json.RawMessage `json:"port"`
		} `json:"httpGet"`
	}
	securityContext struct {
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool  `json:"runAsNonRoot"`
		RunAsUser                *int64 `json:"runAsUser"`
		Privileged               *bool  `json:"privileged"`
		Capabilities             *struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
		SeccompProfile *seccompProfile `json:"seccompProfile"`
	}
	envVar struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			SecretKeyRef *secretKeySelector `json:"secretKeyRef"`
		} `json:"valueFrom"`
	}
	volumeMount struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	}
	volume struct {
		Name   string `json:"name"`
		Secret *struct {
			SecretName string `json:"secretName"`
			Items      []struct {
				Key  string `json:"key"`
				Path string `json:"path"`
			} `json:"items"`
		} `json:"secret"`
	}
	topologySpreadConstraint struct {
		TopologyKey       string `json:"topologyKey"`
		WhenUnsatisfiable string `json:"whenUnsatisfiable"`
		LabelSelector     struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"labelSelector"`
	}
	rbacRole struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Rules []rbacRule `json:"rules"`
	}
	rbacRule struct {
		APIGroups       []string `json:"apiGroups,omitempty"`
		Resources       []string `json:"resources,omitempty"`
		ResourceNames   []string `json:"resourceNames,omitempty"`
		NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
		Verbs           []string `json:"verbs"`
	}
	rbacBinding struct {
		RoleRef struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"roleRef"`
		Subjects []rbacSubject `json:"subjects"`
	}
	rbacSubject struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
	}
)
