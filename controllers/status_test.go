package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Pure tests of resolve and the set<Condition> functions, without an API server.

func TestResolveConditions(t *testing.T) {
	secret := newSecret("ai", map[string]string{"api-key": "sk", "blank": " "})
	secret.UID, secret.ResourceVersion = types.UID("uid-1"), "7"
	tests := []struct {
		name        string
		md          *v1alpha1.ModelDeployment
		secret      bool
		policies    []v1alpha1.CapabilityPolicy
		credential  string // CredentialsResolved reason
		routable    string // Routable reason
		wantInTable bool
	}{
		{name: "valid", md: newMD("ai", "m"), secret: true,
			credential: v1alpha1.ReasonResolved, routable: v1alpha1.ReasonDeclared, wantInTable: true},
		{name: "secret missing", md: newMD("ai", "m"),
			credential: v1alpha1.ReasonSecretNotFound, routable: v1alpha1.ReasonCredentialsUnresolved},
		{name: "key missing", md: newMD("ai", "m", withSecret("openai", "nope")), secret: true,
			credential: v1alpha1.ReasonKeyNotFound, routable: v1alpha1.ReasonCredentialsUnresolved},
		{name: "key blank", md: newMD("ai", "m", withSecret("openai", "blank")), secret: true,
			credential: v1alpha1.ReasonKeyEmpty, routable: v1alpha1.ReasonCredentialsUnresolved},
		{name: "no credentials needed", md: newMD("ai", "m", withProvider(v1alpha1.ProviderOpenAICompatible),
			withoutCredentials(), withEndpoint("http://llama:8080", true)),
			credential: v1alpha1.ReasonResolved, routable: v1alpha1.ReasonDeclared, wantInTable: true},
		{name: "suspended wins over missing secret", md: newMD("ai", "m", withSuspend()),
			credential: v1alpha1.ReasonSecretNotFound, routable: v1alpha1.ReasonSuspended},
		{name: "invalid spec from a file", md: newMD("ai", "m", withProvider(v1alpha1.ProviderReplicate)), secret: true,
			credential: v1alpha1.ReasonResolved, routable: v1alpha1.ReasonInvalidSpec},
		{name: "no abilities", md: newMD("ai", "m", withAbilities()), secret: true,
			credential: v1alpha1.ReasonResolved, routable: v1alpha1.ReasonNoAbilities},
		{name: "policy leaves no input", md: newMD("ai", "m"), secret: true,
			policies:   []v1alpha1.CapabilityPolicy{*newPolicy("ai", "images-only", withAllowedInputs("image"))},
			credential: v1alpha1.ReasonResolved, routable: v1alpha1.ReasonPolicyDenied},
		{name: "policy of another namespace does not apply", md: newMD("ai", "m"), secret: true,
			policies:   []v1alpha1.CapabilityPolicy{*newPolicy("other", "images-only", withAllowedInputs("image"))},
			credential: v1alpha1.ReasonResolved, routable: v1alpha1.ReasonDeclared, wantInTable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := secret
			if !tt.secret {
				s = nil
			}
			res := resolve(tt.md, s, tt.policies)
			if res.credential.reason != tt.credential || res.routable.reason != tt.routable {
				t.Errorf("reasons = %s/%s, want %s/%s", res.credential.reason, res.routable.reason, tt.credential, tt.routable)
			}
			if (res.deployment != nil) != tt.wantInTable {
				t.Errorf("deployment = %v, want in table %v", res.deployment, tt.wantInTable)
			}
			md := tt.md.DeepCopy()
			setStatus(md, res, res.deployment != nil)
			ready := meta.FindStatusCondition(md.Status.Conditions, v1alpha1.ConditionReady)
			if got := ready.Status == metav1.ConditionTrue; got != tt.wantInTable {
				t.Errorf("Ready = %s, want true exactly when in the table (%v)", ready.Status, tt.wantInTable)
			}
			if !tt.wantInTable && ready.Reason != tt.routable {
				t.Errorf("Ready reason = %s, want the Routable reason %s", ready.Reason, tt.routable)
			}
		})
	}
}

// TestSecretMustOptIn: a Secret without the opt-in label is not used, and what is said
// about it is the same whether it holds the key, holds it empty or lacks it, so that
// writing a ModelDeployment does not tell which keys a Secret has.
func TestSecretMustOptIn(t *testing.T) {
	md := newMD("ai", "m")
	labelled := func(value string) func(*corev1.Secret) {
		return func(s *corev1.Secret) { s.Labels = map[string]string{v1alpha1.CredentialLabel: value} }
	}
	var first credentialState
	for i, tc := range []struct {
		name string
		data map[string]string
		edit func(*corev1.Secret)
	}{
		{"unlabelled, with the key", map[string]string{"api-key": "db-password"}, func(s *corev1.Secret) { notOptedIn(s) }},
		{"unlabelled, without the key", map[string]string{"password": "db-password"}, func(s *corev1.Secret) { notOptedIn(s) }},
		{"unlabelled, the key empty", map[string]string{"api-key": " "}, func(s *corev1.Secret) { notOptedIn(s) }},
		{"unlabelled, no data at all", nil, func(s *corev1.Secret) { notOptedIn(s) }},
		{"labelled false", map[string]string{"api-key": "db-password"}, labelled("false")},
		{"labelled True", map[string]string{"api-key": "db-password"}, labelled("True")},
		{"other labels only", map[string]string{"api-key": "db-password"}, func(s *corev1.Secret) {
			s.Labels = map[string]string{"app": "db", "ai.switchboard.dev/credentials": "true"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSecret("ai", tc.data)
			s.UID, s.ResourceVersion = types.UID("uid-1"), "7"
			tc.edit(s)
			res := resolve(md, s, nil)
			c := res.credential
			if c.resolved || c.reason != v1alpha1.ReasonSecretNotEligible || res.routable.reason != v1alpha1.ReasonCredentialsUnresolved {
				t.Fatalf("credential %s, routable %s; want SecretNotEligible, CredentialsUnresolved", c.reason, res.routable.reason)
			}
			if res.deployment != nil || c.value != "" || c.version != "" {
				t.Errorf("a Secret that did not opt in is used: deployment %v, version %q", res.deployment, c.version)
			}
			if i == 0 {
				first = c
			} else if diff := cmp.Diff(first, c, cmp.AllowUnexported(credentialState{})); diff != "" {
				t.Errorf("differs from an unlabelled Secret with the key (-that +this):\n%s", diff)
			}
			for _, leak := range []string{"api-key", "password", "db-password", "empty", "no key"} {
				if strings.Contains(c.message, leak) {
					t.Errorf("message %q mentions %q", c.message, leak)
				}
			}
		})
	}
	if want := `Secret "openai" is not labelled ai.switchboard.dev/credential: "true"`; !strings.Contains(first.message, want) {
		t.Errorf("message %q does not say %q", first.message, want)
	}

	// Labelled, the same Secrets resolve as before, key by key.
	s := newSecret("ai", map[string]string{"api-key": "sk", "blank": " "})
	for key, want := range map[string]string{"api-key": v1alpha1.ReasonResolved, "nope": v1alpha1.ReasonKeyNotFound, "blank": v1alpha1.ReasonKeyEmpty} {
		if got := resolve(newMD("ai", "m", withSecret("openai", key)), s, nil).credential.reason; got != want {
			t.Errorf("labelled Secret, key %s: %s, want %s", key, got, want)
		}
	}
}

func TestResolveCombinesPoliciesMostRestrictively(t *testing.T) {
	md := newMD("ai", "m", withLabels("tier", "standard"), withCapabilities(v1alpha1.Capabilities{
		Input: []v1alpha1.InputModality{"text", "json", "image", "audio"}, Tools: true, Streaming: true}))
	deadline := func(ms int64) func(*v1alpha1.CapabilityPolicy) {
		return func(p *v1alpha1.CapabilityPolicy) { p.Spec.MaxDeadlineMs = &ms }
	}
	attempts := func(n int32) func(*v1alpha1.CapabilityPolicy) {
		return func(p *v1alpha1.CapabilityPolicy) { p.Spec.MaxAttempts = &n }
	}
	extensions := func(e ...v1alpha1.ExtensionPattern) func(*v1alpha1.CapabilityPolicy) {
		return func(p *v1alpha1.CapabilityPolicy) { p.Spec.AllowedExtensions = e }
	}
	policies := []v1alpha1.CapabilityPolicy{
		*newPolicy("ai", "b-vision", withAllowedInputs("text", "image", "audio"), deadline(60000), extensions("openai.*")),
		*newPolicy("ai", "a-tools", withToolsDisabled(), selecting("tier", "standard"), withAllowedInputs("text", "image"), attempts(2), deadline(120000)),
		*newPolicy("ai", "unselected", selecting("tier", "premium"), withAllowedInputs("json")),
	}
	res := resolve(md, newSecret("ai", map[string]string{"api-key": "sk"}), policies)

	want := v1alpha1.EffectiveCapabilities{Input: []v1alpha1.InputModality{"text", "image"},
		Output: []v1alpha1.OutputModality{"text"}, Streaming: true}
	if diff := cmp.Diff(want, res.effective); diff != "" {
		t.Errorf("effective (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a-tools", "b-vision"}, res.policies); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	wantLimits := routing.Limits{MaxDeadline: time.Minute, MaxAttempts: 2, Extensions: [][]string{{"openai.*"}}}
	if diff := cmp.Diff(wantLimits, res.limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	wantCaps := routing.CapsOf(protocol.CapInputText, protocol.CapInputImage, protocol.CapOutputText, protocol.CapStreaming)
	if res.deployment.Capabilities != wantCaps {
		t.Errorf("table capabilities = %s, want %s", res.deployment.Capabilities, wantCaps)
	}
}

func TestCredentialsVersionTracksRevisionNotContent(t *testing.T) {
	s := newSecret("ai", map[string]string{"api-key": "sk-1"})
	s.UID, s.ResourceVersion = "uid", "1"
	v1 := credentialsVersion(s)
	s.Data["api-key"] = []byte("sk-2")
	if credentialsVersion(s) != v1 {
		t.Error("version depends on content")
	}
	s.ResourceVersion = "2"
	if credentialsVersion(s) == v1 {
		t.Error("version did not change with the resourceVersion")
	}
}

func TestPolicyStatus(t *testing.T) {
	p := newPolicy("ai", "p", withToolsDisabled())
	p.Generation = 4
	_, valid := policyValidity(p)
	setPolicyStatus(p, 3, valid)
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
	if p.Status.MatchedDeployments != 3 || p.Status.ObservedGeneration != 4 || c.Status != metav1.ConditionTrue ||
		c.Reason != v1alpha1.ReasonEnforced {
		t.Errorf("status = %+v", p.Status)
	}

	// Written before the CRD's enum existed: the selector cannot be evaluated.
	selectingWhere("tier", "Bogus", "standard")(p)
	_, valid = policyValidity(p)
	setPolicyStatus(p, 0, valid)
	c = meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInvalidSelector {
		t.Errorf("Ready = %s/%s, want False/InvalidSelector", c.Status, c.Reason)
	}
	if !strings.Contains(c.Message, "spec.selector.matchExpressions[0].operator") {
		t.Errorf("Ready message does not name the field: %q", c.Message)
	}

	// A valid selector with a spec the Go validator refuses.
	p = newPolicy("ai", "p", func(p *v1alpha1.CapabilityPolicy) { p.Spec.Tools = "Sometimes" })
	_, valid = policyValidity(p)
	setPolicyStatus(p, 0, valid)
	if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse ||
		c.Reason != v1alpha1.ReasonInvalidSpec {
		t.Errorf("Ready = %s/%s, want False/InvalidSpec", c.Status, c.Reason)
	}
}

func TestResolveCopiesAllowedParameters(t *testing.T) {
	md := newMD("ai", "flux", replicateImageModel(), withAllowedParameters("aspect_ratio", "seed"))
	res := resolve(md, newSecret("ai", map[string]string{"api-key": "r8"}), nil)
	if res.deployment == nil {
		t.Fatalf("not routable: %+v", res.routable)
	}
	if diff := cmp.Diff([]string{"aspect_ratio", "seed"}, res.deployment.Parameters); diff != "" {
		t.Errorf("Parameters (-want +got):\n%s", diff)
	}
	if d := resolve(newMD("ai", "flux", replicateImageModel()), newSecret("ai", map[string]string{"api-key": "r8"}), nil).deployment; len(d.Parameters) != 0 {
		t.Errorf("Parameters = %v without allowedParameters, want none", d.Parameters)
	}
}
