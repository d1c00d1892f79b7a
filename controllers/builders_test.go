package controllers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// Test objects are built from small functional options (cert-manager's test/unit/gen
// style), starting from a valid openai ModelDeployment.

type mdOption func(*v1alpha1.ModelDeployment)

func newMD(ns, name string, opts ...mdOption) *v1alpha1.ModelDeployment {
	md := &v1alpha1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ModelDeploymentSpec{
			Provider:    v1alpha1.ProviderOpenAI,
			Model:       "gpt-4o-mini",
			Credentials: &v1alpha1.Credentials{SecretRef: v1alpha1.SecretKeyReference{Name: "openai", Key: "api-key"}},
			Abilities:   []v1alpha1.AbilityName{"chat"},
		},
	}
	for _, o := range opts {
		o(md)
	}
	return md
}

func withProvider(p v1alpha1.Provider) mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Provider = p }
}

// inRegion sets spec.region and, when given, spec.project.
func inRegion(region, project string) mdOption {
	return func(md *v1alpha1.ModelDeployment) {
		md.Spec.Region = region
		md.Spec.Project = project
	}
}

func withEndpoint(url string, insecure bool) mdOption {
	return func(md *v1alpha1.ModelDeployment) {
		md.Spec.Endpoint = url
		md.Spec.AllowInsecureEndpoint = insecure
	}
}

func withSecret(name, key string) mdOption {
	return func(md *v1alpha1.ModelDeployment) {
		md.Spec.Credentials = &v1alpha1.Credentials{SecretRef: v1alpha1.SecretKeyReference{Name: name, Key: key}}
	}
}

func withoutCredentials() mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Credentials = nil }
}

func withAbilities(a ...v1alpha1.AbilityName) mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Abilities = a }
}

func withCapabilities(c v1alpha1.Capabilities) mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Capabilities = &c }
}

func withLabels(kv ...string) mdOption {
	return func(md *v1alpha1.ModelDeployment) {
		md.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			md.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withSuspend() mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Suspend = true }
}

type policyOption func(*v1alpha1.CapabilityPolicy)

func newPolicy(ns, name string, opts ...policyOption) *v1alpha1.CapabilityPolicy {
	p := &v1alpha1.CapabilityPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withToolsDisabled() policyOption {
	return func(p *v1alpha1.CapabilityPolicy) { p.Spec.Tools = v1alpha1.ToolsDisabled }
}

func selecting(kv ...string) policyOption {
	return func(p *v1alpha1.CapabilityPolicy) {
		m := map[string]v1alpha1.LabelValue{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = v1alpha1.LabelValue(kv[i+1])
		}
		p.Spec.Selector = &v1alpha1.LabelSelector{MatchLabels: m}
	}
}

// selectingWhere sets a selector of one matchExpressions requirement.
func selectingWhere(key string, op v1alpha1.LabelSelectorOperator, values ...v1alpha1.LabelValue) policyOption {
	return func(p *v1alpha1.CapabilityPolicy) {
		p.Spec.Selector = &v1alpha1.LabelSelector{MatchExpressions: []v1alpha1.LabelSelectorRequirement{
			{Key: v1alpha1.LabelKey(key), Operator: op, Values: values}}}
	}
}

func withAllowedParameters(names ...v1alpha1.ParameterName) mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.AllowedParameters = names }
}

// replicateImageModel makes md a valid replicate text-to-image deployment.
func replicateImageModel() mdOption {
	return func(md *v1alpha1.ModelDeployment) {
		md.Spec.Provider = v1alpha1.ProviderReplicate
		md.Spec.Model = "black-forest-labs/flux-schnell"
		md.Spec.Capabilities = &v1alpha1.Capabilities{
			Input: []v1alpha1.InputModality{"text"}, Output: []v1alpha1.OutputModality{"image"}}
	}
}

func withAllowedInputs(m ...v1alpha1.InputModality) policyOption {
	return func(p *v1alpha1.CapabilityPolicy) { p.Spec.AllowedInputs = m }
}

// newSecret builds the Secret "openai" that newMD references by default, opted in as a
// model credential (labelled v1alpha1.CredentialLabel).
func newSecret(ns string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "openai",
		Labels: map[string]string{v1alpha1.CredentialLabel: v1alpha1.CredentialLabelValue}}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// notOptedIn removes s's opt-in label: a Secret that is not meant as a model credential.
func notOptedIn(s *corev1.Secret) *corev1.Secret {
	delete(s.Labels, v1alpha1.CredentialLabel)
	return s
}

// withPricing sets spec.pricing.
func withPricing(p v1alpha1.Pricing) mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Pricing = &p }
}

// withMaxOutputTokens sets spec.limits.maxOutputTokens.
func withMaxOutputTokens(n int32) mdOption {
	return func(md *v1alpha1.ModelDeployment) { md.Spec.Limits = &v1alpha1.DeploymentLimits{MaxOutputTokens: &n} }
}

// contractPricing is the pricing block of the contract's example (spec/budgets.md).
func contractPricing() v1alpha1.Pricing {
	return v1alpha1.Pricing{Currency: "USD", InputTokens: "2.50", OutputTokens: "10.00",
		CacheReadTokens: "1.25", CacheWriteTokens: "3.125", ReasoningTokens: "10.00", Images: "40000"}
}

type budgetOption func(*v1alpha1.Budget)

// newBudget builds a Budget of one limit, 600 requests a minute, for every caller of
// every ModelDeployment of ns.
func newBudget(ns, name string, opts ...budgetOption) *v1alpha1.Budget {
	b := &v1alpha1.Budget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.BudgetSpec{Limits: []v1alpha1.BudgetLimit{{Window: v1alpha1.BudgetWindowMinute, Requests: ptr[int64](600)}}}}
	for _, o := range opts {
		o(b)
	}
	return b
}

// contractBudget makes b the contract's example Budget (spec/budgets.md): premium models,
// three subjects, 500.00 a month in Berlin and 200000 tokens and 600 requests a minute.
func contractBudget() budgetOption {
	return func(b *v1alpha1.Budget) {
		b.Spec = v1alpha1.BudgetSpec{
			Selector: &v1alpha1.LabelSelector{MatchLabels: map[string]v1alpha1.LabelValue{"tier": "premium"}},
			Subjects: []v1alpha1.BudgetSubject{
				{Kind: v1alpha1.BudgetSubjectServiceAccount, Namespace: "search", Name: "indexer"},
				{Kind: v1alpha1.BudgetSubjectGroup, Name: "system:serviceaccounts:search"},
				{Kind: v1alpha1.BudgetSubjectUser, Name: "alice"},
			},
			Limits: []v1alpha1.BudgetLimit{
				{Window: v1alpha1.BudgetWindowMonth, TimeZone: "Europe/Berlin", Cost: ptr[v1alpha1.Price]("500.00")},
				{Window: v1alpha1.BudgetWindowMinute, Tokens: ptr[int64](200000), Requests: ptr[int64](600)},
			},
			Action: v1alpha1.BudgetActionBlock,
		}
	}
}

func withBudgetLimits(l ...v1alpha1.BudgetLimit) budgetOption {
	return func(b *v1alpha1.Budget) { b.Spec.Limits = l }
}

func withSubjects(s ...v1alpha1.BudgetSubject) budgetOption {
	return func(b *v1alpha1.Budget) { b.Spec.Subjects = s }
}
