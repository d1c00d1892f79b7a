package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

func TestParseWatchNamespaces(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "team-a", want: []string{"team-a"}},
		{in: "team-a, team-b,team-a,", want: []string{"team-a", "team-b"}},
		{in: "Team-A", wantErr: true},
		{in: "team_a", wantErr: true},
		{in: "team-a,*", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseWatchNamespaces(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseWatchNamespaces(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseWatchNamespaces(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestApplyToKeepsWhatIsSetAndNeverCachesSecrets(t *testing.T) {
	selector := fields.OneTermNotEqualSelector("metadata.namespace", "x")
	policy := &v1alpha1.CapabilityPolicy{}
	opts := ctrl.Options{Cache: cache.Options{
		DefaultFieldSelector: selector,
		ByObject:             map[client.Object]cache.ByObject{policy: {}},
	}}
	Options{WatchNamespaces: []string{"team-a", "team-b"}}.ApplyTo(&opts)

	got := opts.Cache.DefaultNamespaces
	_, a := got["team-a"]
	_, b := got["team-b"]
	if len(got) != 2 || !a || !b {
		t.Errorf("DefaultNamespaces = %v, want team-a and team-b", got)
	}
	if opts.Cache.DefaultFieldSelector != selector {
		t.Error("DefaultFieldSelector was replaced")
	}
	if _, ok := opts.Cache.ByObject[policy]; !ok || len(opts.Cache.ByObject) != 2 {
		t.Errorf("ByObject = %v, want the policy entry and a Secret entry", opts.Cache.ByObject)
	}
	if !opts.Cache.ReaderFailOnMissingInformer {
		t.Error("ReaderFailOnMissingInformer is false")
	}
	disabled := opts.Client.Cache.DisableFor
	if len(disabled) != 1 {
		t.Fatalf("Client.Cache.DisableFor = %v, want Secrets", disabled)
	}
	if _, ok := disabled[0].(*corev1.Secret); !ok {
		t.Errorf("Client.Cache.DisableFor = %T, want *v1.Secret", disabled[0])
	}

	all := ctrl.Options{}
	Options{}.ApplyTo(&all)
	if all.Cache.DefaultNamespaces != nil {
		t.Errorf("no WatchNamespaces: DefaultNamespaces = %v, want nil (all)", all.Cache.DefaultNamespaces)
	}
}

func TestSecretIdentityKeepsIdentityRevisionAndOptInOnly(t *testing.T) {
	in := func(labels map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ai", Name: "openai", UID: "uid-1", ResourceVersion: "7",
				Labels:        labels,
				Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"api-key":"c2s="}}`},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		}
	}
	for _, tc := range []struct {
		name       string
		labels     map[string]string
		wantLabels map[string]string
	}{
		{"no opt-in", map[string]string{"team": "a"}, nil},
		{"opted in", map[string]string{"team": "a", v1alpha1.CredentialLabel: "true"}, map[string]string{v1alpha1.CredentialLabel: "true"}},
		// The value is kept as it is: resolve decides what it means.
		{"another value", map[string]string{v1alpha1.CredentialLabel: "no"}, map[string]string{v1alpha1.CredentialLabel: "no"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := secretIdentity(in(tc.labels))
			if err != nil {
				t.Fatal(err)
			}
			want := &metav1.PartialObjectMetadata{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "ai", Name: "openai", UID: "uid-1", ResourceVersion: "7",
					Labels: tc.wantLabels},
			}
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("secretIdentity (-want +got):\n%s", diff)
			}
		})
	}
}
