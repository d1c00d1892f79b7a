package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// This file converts API objects into routing types. It is pure: the reconcilers and the
// standalone manifest loader feed it what they read, so both build the table the same way.

// defaultWeight is routing.weight when omitted (the CRD defaults it too; objects from
// manifest files are not defaulted by an API server).
const defaultWeight = 100

// credentialState is the outcome of reading a deployment's credential.
type credentialState struct {
	resolved bool
	reason   string // a CredentialsResolved reason
	message  string
	value    string
	version  string // short hash of the Secret's uid and resourceVersion
}

// resolveCredential reads the key the deployment references from secret (nil when the
// Secret does not exist). A Secret that has not opted in is refused before its data is
// looked at, with a message that is the same whatever the data: the reconciler hands such
// a Secret over as metadata only, never having read it. Messages name the Secret and key,
// never the value.
func resolveCredential(md *v1alpha1.ModelDeployment, secret *corev1.Secret) credentialState {
	if md.Spec.Credentials == nil {
		return credentialState{resolved: true, reason: v1alpha1.ReasonResolved, message: "No credentials configured"}
	}
	ref := md.Spec.Credentials.SecretRef
	if secret == nil {
		return credentialState{reason: v1alpha1.ReasonSecretNotFound,
			message: fmt.Sprintf("Secret %q not found", ref.Name)}
	}
	if !optedIn(secret) {
		return credentialState{reason: v1alpha1.ReasonSecretNotEligible,
			message: fmt.Sprintf("Secret %q is not labelled %s: %q, so it is not used as a model credential",
				ref.Name, v1alpha1.CredentialLabel, v1alpha1.CredentialLabelValue)}
	}
	version := credentialsVersion(secret)
	value, ok := secret.Data[ref.Key]
	if !ok {
		if s, found := secret.StringData[ref.Key]; found {
			// Manifest files may use stringData; the API server folds it into data.
			value, ok = []byte(s), true
		}
	}
	if !ok {
		return credentialState{reason: v1alpha1.ReasonKeyNotFound, version: version,
			message: fmt.Sprintf("Secret %q has no key %q", ref.Name, ref.Key)}
	}
	trimmed := strings.TrimSpace(string(value))
	if len(trimmed) == 0 {
		return credentialState{reason: v1alpha1.ReasonKeyEmpty, version: version,
			message: fmt.Sprintf("Secret %q key %q is empty", ref.Name, ref.Key)}
	}
	return credentialState{resolved: true, reason: v1alpha1.ReasonResolved, version: version,
		value: trimmed,
		// What %q prints, without fmt: this message is built for every routable object
		// of a start-up sync.
		message: "Using Secret " + strconv.Quote(ref.Name) + " key " + strconv.Quote(ref.Key)}
}

// optedIn reports whether a Secret may be used as a model credential: whoever may write a
// ModelDeployment chooses the endpoint its credential is sent to, so a Secret must say it
// is meant for that (spec/modeldeployments.md, "Whose Secret a ModelDeployment may use").
// Standalone manifests are the operator's own and are marked eligible as they are loaded
// (Manifests.Apply).
func optedIn(s metav1.Object) bool {
	return s.GetLabels()[v1alpha1.CredentialLabel] == v1alpha1.CredentialLabelValue
}

// credentialsVersion hashes identity and revision only, so it changes on rotation but
// reveals nothing about the content.
func credentialsVersion(s *corev1.Secret) string {
	sum := sha256.Sum256([]byte(string(s.UID) + "/" + s.ResourceVersion))
	return hex.EncodeToString(sum[:4])
}

// policyValidity checks a CapabilityPolicy with the Go mirror of its CRD rules and
// evaluates its selector. The API server refuses invalid policies, but one may exist
// anyway (written before a rule existed, or restored from a backup); it then governs
// every ModelDeployment of its namespace (see governs). On success it returns the parsed
// selector and the Ready=True check.
func policyValidity(p *v1alpha1.CapabilityPolicy) (labels.Selector, check) {
	invalidSelector := func(err error) check {
		return check{reason: v1alpha1.ReasonInvalidSelector, message: "spec.selector cannot be evaluated: " + err.Error()}
	}
	if err := p.Spec.Validate(); err != nil { // the whole spec, selector included
		if selErr := p.Spec.Selector.Validate(); selErr != nil {
			return nil, invalidSelector(selErr)
		}
		return nil, check{reason: v1alpha1.ReasonInvalidSpec, message: err.Error()}
	}
	sel, err := policySelector(p)
	if err != nil {
		return nil, invalidSelector(err)
	}
	return sel, check{ok: true, reason: v1alpha1.ReasonEnforced, message: "Applied to the selected ModelDeployments"}
}

// governs reports whether a policy of md's namespace, with sel and valid from
// policyValidity, applies to md: its selector matches md's labels, or it is invalid.
// Policies fail closed: an invalid policy never silently stops applying
// (spec/capabilitypolicies.md, "Fail closed").
func governs(sel labels.Selector, valid check, md *v1alpha1.ModelDeployment) bool {
	return !valid.ok || sel.Matches(labels.Set(md.Labels))
}

// policySelector converts the policy's selector with metav1.LabelSelectorAsSelector. An
// omitted selector selects everything.
func policySelector(p *v1alpha1.CapabilityPolicy) (labels.Selector, error) {
	if p.Spec.Selector == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(p.Spec.Selector.AsLabelSelector())
}

// resolution is everything derived from one ModelDeployment, its Secret and the policies
// of its namespace.
type resolution struct {
	credential credentialState
	declared   v1alpha1.EffectiveCapabilities // declared, with provider defaults
	effective  v1alpha1.EffectiveCapabilities // declared ∩ policies
	policies   []string                       // names of governing policies, sorted
	invalid    []string                       // names of governing policies that are invalid, sorted
	limits     routing.Limits
	// routable is the first failing routability check (or Declared).
	routable check
	// deployment is the table entry; nil when not routable.
	deployment *routing.Deployment
}

// check is the result of one routability rule.
type check struct {
	ok      bool
	reason  string
	message string
}

// compiledPolicy is a CapabilityPolicy with policyValidity's verdict: checking a policy
// and parsing its selector cost more than applying it to a ModelDeployment, so a batch of
// ModelDeployments resolved against the same policies does it once per policy.
type compiledPolicy struct {
	policy *v1alpha1.CapabilityPolicy
	sel    labels.Selector
	valid  check
}

// policySet holds compiled policies by namespace. It is read-only once built.
type policySet map[string][]compiledPolicy

// compilePolicies compiles policies, which may be of any namespace.
func compilePolicies(policies []v1alpha1.CapabilityPolicy) policySet {
	s := policySet{}
	for i := range policies {
		p := &policies[i]
		s[p.Namespace] = append(s[p.Namespace], compile(p))
	}
	return s
}

func compile(p *v1alpha1.CapabilityPolicy) compiledPolicy {
	sel, valid := policyValidity(p)
	return compiledPolicy{policy: p, sel: sel, valid: valid}
}

// resolve computes the resolution of md. policies may hold policies of any namespace;
// only those selecting md apply. To resolve many ModelDeployments against the same
// policies, compile them once and use policySet.resolve.
func resolve(md *v1alpha1.ModelDeployment, secret *corev1.Secret, policies []v1alpha1.CapabilityPolicy) resolution {
	var own []compiledPolicy
	for i := range policies {
		if p := &policies[i]; p.Namespace == md.Namespace {
			own = append(own, compile(p))
		}
	}
	return resolveWith(md, secret, own)
}

// resolve computes the resolution of md under the policies of its namespace in s.
func (s policySet) resolve(md *v1alpha1.ModelDeployment, secret *corev1.Secret) resolution {
	return resolveWith(md, secret, s[md.Namespace])
}

// resolveWith computes the resolution of md under policies, the compiled policies of its
// namespace.
func resolveWith(md *v1alpha1.ModelDeployment, secret *corev1.Secret, policies []compiledPolicy) resolution {
	res := resolution{credential: resolveCredential(md, secret)}
	res.declared = declaredCapabilities(md.Spec)
	res.effective = res.declared
	for _, cp := range policies {
		if !governs(cp.sel, cp.valid, md) {
			continue
		}
		p := cp.policy
		res.policies = append(res.policies, p.Name)
		if !cp.valid.ok {
			// Its rules cannot be trusted, so none is applied; checkPolicyValid keeps
			// md out of routing instead.
			res.invalid = append(res.invalid, p.Name)
			continue
		}
		res.effective = narrow(res.effective, p.Spec)
		res.limits = tighten(res.limits, p.Spec)
	}
	sort.Strings(res.policies)
	sort.Strings(res.invalid)

	res.routable = firstFailing(md, &res,
		checkSuspended, checkAbilities, checkSpec, checkPolicyValid, checkCredentials, checkPolicies)
	if !res.routable.ok {
		return res
	}

	d := &routing.Deployment{
		Ref:                routing.Ref{Namespace: md.Namespace, Name: md.Name},
		Provider:           string(md.Spec.Provider),
		Model:              md.Spec.Model,
		Endpoint:           md.Spec.Endpoint,
		Region:             md.Spec.Region,
		Project:            md.Spec.Project,
		Credential:         routing.NewCredential(res.credential.value),
		CredentialsVersion: res.credential.version,
		Capabilities:       capSet(res.effective),
		Weight:             defaultWeight,
		Limits:             res.limits,
	}
	for _, a := range md.Spec.Abilities {
		d.Abilities = append(d.Abilities, string(a))
	}
	for _, name := range md.Spec.AllowedParameters {
		d.Parameters = append(d.Parameters, string(name))
	}
	if r := md.Spec.Routing; r != nil {
		d.Priority = r.Priority
		if r.Weight > 0 {
			d.Weight = r.Weight
		}
	}
	if md.Spec.AttemptTimeout != nil {
		d.AttemptTimeout = md.Spec.AttemptTimeout.Duration
	}
	if len(md.Labels) > 0 {
		d.Labels = maps.Clone(md.Labels)
	}
	d.Pricing = prices(md.Spec.Pricing)
	if l := md.Spec.Limits; l != nil && l.MaxOutputTokens != nil {
		d.MaxOutputTokens = int64(*l.MaxOutputTokens)
	}
	res.deployment = d
	return res
}

// prices reads a ModelDeployment's pricing into the runtime's micro-units; nil when it
// declares none. The API server (or the standalone validator) has checked every price,
// so one that still does not parse leaves the model unpriced, which every Budget with
// a cost limit refuses (spec/budgets.md, "Fail closed").
func prices(p *v1alpha1.Pricing) *pricing.Prices {
	if p == nil {
		return nil
	}
	out, err := pricing.New(pricing.Declared{
		Currency: p.Currency, InputTokens: string(p.InputTokens), OutputTokens: string(p.OutputTokens),
		CacheReadTokens: string(p.CacheReadTokens), CacheWriteTokens: string(p.CacheWriteTokens),
		ReasoningTokens: string(p.ReasoningTokens), Images: string(p.Images), MediaSeconds: string(p.MediaSeconds),
	})
	if err != nil {
		return nil
	}
	return out
}

// A rule returns ok, or the Routable=False reason and message that excludes the model.
// Rules run in order; the first failure wins (cert-manager's policy-chain style).
type rule func(md *v1alpha1.ModelDeployment, res *resolution) check

func firstFailing(md *v1alpha1.ModelDeployment, res *resolution, rules ...rule) check {
	for _, r := range rules {
		if c := r(md, res); !c.ok {
			return c
		}
	}
	return check{ok: true, reason: v1alpha1.ReasonDeclared,
		message: "Routable with declared capabilities (declared by the manifest, not verified against the provider)"}
}

func checkSuspended(md *v1alpha1.ModelDeployment, _ *resolution) check {
	if md.Spec.Suspend {
		return check{reason: v1alpha1.ReasonSuspended, message: "spec.suspend is true"}
	}
	return check{ok: true}
}

// checkSpec runs the Go mirror of the CRD rules. Its messages never repeat the endpoint
// or the model id, which may hold a secret; they reach status, Events and logs.
func checkSpec(md *v1alpha1.ModelDeployment, _ *resolution) check {
	if err := md.Spec.Validate(); err != nil {
		return check{reason: v1alpha1.ReasonInvalidSpec, message: err.Error()}
	}
	return check{ok: true}
}

// checkPolicyValid keeps md out of routing while an invalid policy of its namespace
// exists. The message names the policies, never their values.
func checkPolicyValid(_ *v1alpha1.ModelDeployment, res *resolution) check {
	if len(res.invalid) == 0 {
		return check{ok: true}
	}
	what := "CapabilityPolicy " + res.invalid[0] + " is"
	if len(res.invalid) > 1 {
		what = "CapabilityPolicies " + strings.Join(res.invalid, ", ") + " are"
	}
	return check{reason: v1alpha1.ReasonPolicyInvalid, message: what +
		" invalid (see the Ready condition); no ModelDeployment of this namespace is routed until the policy is fixed or deleted"}
}

func checkCredentials(_ *v1alpha1.ModelDeployment, res *resolution) check {
	if !res.credential.resolved {
		return check{reason: v1alpha1.ReasonCredentialsUnresolved, message: res.credential.message}
	}
	return check{ok: true}
}

func checkAbilities(md *v1alpha1.ModelDeployment, _ *resolution) check {
	if len(md.Spec.Abilities) == 0 {
		return check{reason: v1alpha1.ReasonNoAbilities, message: "spec.abilities is empty"}
	}
	return check{ok: true}
}

func checkPolicies(_ *v1alpha1.ModelDeployment, res *resolution) check {
	if len(res.effective.Input) == 0 {
		return check{reason: v1alpha1.ReasonPolicyDenied,
			message: "Policies " + strings.Join(res.policies, ",") + " allow none of the declared input modalities"}
	}
	if len(res.effective.Output) == 0 {
		return check{reason: v1alpha1.ReasonPolicyDenied,
			message: "Policies " + strings.Join(res.policies, ",") + " allow none of the declared output modalities"}
	}
	return check{ok: true}
}

// declaredCapabilities fills the text providers' defaults: input [text, json] and output
// [text]. Replicate has no defaults (the CRD requires it to declare both).
func declaredCapabilities(spec v1alpha1.ModelDeploymentSpec) v1alpha1.EffectiveCapabilities {
	var c v1alpha1.EffectiveCapabilities
	if spec.Capabilities != nil {
		c.Input = slices.Clone(spec.Capabilities.Input)
		c.Output = slices.Clone(spec.Capabilities.Output)
		c.Tools = spec.Capabilities.Tools
		c.Streaming = spec.Capabilities.Streaming
		c.StructuredOutput = spec.Capabilities.StructuredOutput
	}
	if spec.Provider != v1alpha1.ProviderReplicate {
		if len(c.Input) == 0 {
			c.Input = []v1alpha1.InputModality{v1alpha1.InputText, v1alpha1.InputJSON}
		}
		if len(c.Output) == 0 {
			c.Output = []v1alpha1.OutputModality{v1alpha1.OutputText}
		}
	}
	if c.Input == nil {
		c.Input = []v1alpha1.InputModality{}
	}
	if c.Output == nil {
		c.Output = []v1alpha1.OutputModality{}
	}
	return c
}

// narrow applies one policy: allowed sets intersect, Disabled tools win.
func narrow(c v1alpha1.EffectiveCapabilities, p v1alpha1.CapabilityPolicySpec) v1alpha1.EffectiveCapabilities {
	if p.AllowedInputs != nil {
		c.Input = slices.DeleteFunc(slices.Clone(c.Input), func(m v1alpha1.InputModality) bool {
			return !slices.Contains(p.AllowedInputs, m)
		})
	}
	if p.AllowedOutputs != nil {
		c.Output = slices.DeleteFunc(slices.Clone(c.Output), func(m v1alpha1.OutputModality) bool {
			return !slices.Contains(p.AllowedOutputs, m)
		})
	}
	if p.Tools == v1alpha1.ToolsDisabled {
		c.Tools = false
	}
	return c
}

// tighten applies one policy's caps: the minimum of caps wins.
func tighten(l routing.Limits, p v1alpha1.CapabilityPolicySpec) routing.Limits {
	if p.MaxDeadlineMs != nil {
		d := time.Duration(*p.MaxDeadlineMs) * time.Millisecond
		if l.MaxDeadline == 0 || d < l.MaxDeadline {
			l.MaxDeadline = d
		}
	}
	if p.MaxAttempts != nil {
		n := int(*p.MaxAttempts)
		if l.MaxAttempts == 0 || n < l.MaxAttempts {
			l.MaxAttempts = n
		}
	}
	if p.AllowedExtensions != nil {
		patterns := make([]string, len(p.AllowedExtensions))
		for i, e := range p.AllowedExtensions {
			patterns[i] = string(e)
		}
		l.Extensions = append(slices.Clone(l.Extensions), patterns)
	}
	return l
}

// capSet converts effective capabilities to routing's capability set.
func capSet(c v1alpha1.EffectiveCapabilities) routing.CapSet {
	var s routing.CapSet
	for _, m := range c.Input {
		s |= routing.CapsOf(protocol.Capability("input." + string(m)))
	}
	for _, m := range c.Output {
		s |= routing.CapsOf(protocol.Capability("output." + string(m)))
	}
	if c.Tools {
		s |= routing.CapsOf(protocol.CapTools)
	}
	if c.Streaming {
		s |= routing.CapsOf(protocol.CapStreaming)
	}
	if c.StructuredOutput {
		s |= routing.CapsOf(protocol.CapStructuredOutput)
	}
	return s
}
