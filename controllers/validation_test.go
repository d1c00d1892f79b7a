package controllers

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// Every CEL rule of the CRDs rejects a bad manifest with its human message; the valid
// manifest is accepted (gateway-api tests/cel style). The same table runs against the API
// server (envtest), the Go validators, and the standalone manifest loader (YAML files),
// which must all reach the same verdict.

// manifestDir writes obj as the only YAML manifest of a new folder.
func manifestDir(obj any) string {
	GinkgoHelper()
	data, err := yaml.Marshal(obj)
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	Expect(os.WriteFile(filepath.Join(dir, "manifest.yaml"), data, 0o600)).To(Succeed())
	return dir
}

type mdCase struct {
	opts    []mdOption
	message string // "" = valid
}

var modelDeploymentCases = []TableEntry{
	Entry("a valid openai manifest", mdCase{}),
	Entry("a valid openai-compatible manifest without credentials", mdCase{opts: []mdOption{
		withProvider(v1alpha1.ProviderOpenAICompatible), withoutCredentials(),
		withEndpoint("http://vllm.ai.svc:8000/v1", true)}}),
	Entry("a valid replicate manifest", mdCase{opts: []mdOption{withProvider(v1alpha1.ProviderReplicate),
		withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text"}, Output: []v1alpha1.OutputModality{"image"}})}}),
	Entry("http endpoint without allowInsecureEndpoint", mdCase{
		opts:    []mdOption{withEndpoint("http://api.example.com/v1", false)},
		message: "endpoint must use https unless allowInsecureEndpoint is true"}),
	Entry("endpoint that is not a URL", mdCase{
		opts:    []mdOption{withEndpoint("https//nope", false)},
		message: "endpoint must be an absolute http(s) URL"}),
	Entry("endpoint with a query", mdCase{
		opts:    []mdOption{withEndpoint("https://api.example.com/v1?key=abc", false)},
		message: "endpoint must not carry user info, a query or a fragment"}),
	Entry("openai-compatible without endpoint", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderOpenAICompatible)},
		message: "endpoint is required for provider openai-compatible"}),
	Entry("anthropic without credentials", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderAnthropic), withoutCredentials()},
		message: "credentials.secretRef is required for every provider except openai-compatible"}),
	Entry("repeated ability", mdCase{
		opts:    []mdOption{withAbilities("chat", "summarize", "chat")},
		message: "abilities must not repeat a name"}),
	Entry("repeated input modality", mdCase{
		opts:    []mdOption{withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "image", "text"}})},
		message: "capabilities.input must not repeat a modality"}),
	Entry("repeated output modality", mdCase{
		opts:    []mdOption{withCapabilities(v1alpha1.Capabilities{Output: []v1alpha1.OutputModality{"text", "text"}})},
		message: "capabilities.output must not repeat a modality"}),
	Entry("replicate without declared modalities", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderReplicate)},
		message: "provider replicate must declare capabilities.input and capabilities.output"}),
	Entry("replicate declaring streaming", mdCase{
		opts: []mdOption{withProvider(v1alpha1.ProviderReplicate), withCapabilities(v1alpha1.Capabilities{
			Input: []v1alpha1.InputModality{"text"}, Output: []v1alpha1.OutputModality{"image"}, Streaming: true})},
		message: "provider replicate cannot declare capabilities.streaming: true"}),
	Entry("attemptTimeout out of range", mdCase{
		opts: []mdOption{func(md *v1alpha1.ModelDeployment) {
			md.Spec.AttemptTimeout = &metav1.Duration{Duration: 2 * 3600 * 1e9}
		}},
		message: "attemptTimeout must be between 1s and 1h"}),
}

type policyCase struct {
	opts    []policyOption
	message string
}

var policyCases = []TableEntry{
	Entry("a valid policy", policyCase{opts: []policyOption{withToolsDisabled(), selecting("tier", "standard"),
		withAllowedInputs("text", "image")}}),
	Entry("repeated allowed input", policyCase{
		opts:    []policyOption{withAllowedInputs("text", "text")},
		message: "allowedInputs must not repeat a modality"}),
	Entry("repeated allowed output", policyCase{
		opts:    []policyOption{func(p *v1alpha1.CapabilityPolicy) { p.Spec.AllowedOutputs = []v1alpha1.OutputModality{"text", "text"} }},
		message: "allowedOutputs must not repeat a modality"}),
	Entry("repeated extension pattern", policyCase{
		opts: []policyOption{func(p *v1alpha1.CapabilityPolicy) {
			p.Spec.AllowedExtensions = []v1alpha1.ExtensionPattern{"openai.*", "openai.*"}
		}},
		message: "allowedExtensions must not repeat a pattern"}),
}

var _ = Describe("CRD validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("ModelDeployment through the API server",
		func(c mdCase) {
			err := k8s.Create(suiteCtx, newMD(ns, "model", c.opts...))
			if c.message == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(c.message))
		}, modelDeploymentCases)

	DescribeTable("ModelDeployment through the Go validator",
		func(c mdCase) {
			err := newMD(ns, "model", c.opts...).Spec.Validate()
			if c.message == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(c.message)))
		}, modelDeploymentCases)

	DescribeTable("ModelDeployment through the standalone manifest loader",
		func(c mdCase) {
			md := newMD(ns, "model", c.opts...)
			md.APIVersion, md.Kind = v1alpha1.GroupVersion.String(), "ModelDeployment"
			_, err := LoadManifests(manifestDir(md))
			if c.message == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(c.message)))
		}, modelDeploymentCases)

	DescribeTable("CapabilityPolicy through the API server",
		func(c policyCase) {
			err := k8s.Create(suiteCtx, newPolicy(ns, "policy", c.opts...))
			if c.message == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(c.message))
		}, policyCases)

	DescribeTable("CapabilityPolicy through the standalone manifest loader",
		func(c policyCase) {
			p := newPolicy(ns, "policy", c.opts...)
			p.APIVersion, p.Kind = v1alpha1.GroupVersion.String(), "CapabilityPolicy"
			_, err := LoadManifests(manifestDir(p))
			if c.message == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(c.message)))
		}, policyCases)

	DescribeTable("CapabilityPolicy through the Go validator",
		func(c policyCase) {
			err := newPolicy(ns, "policy", c.opts...).Spec.Validate()
			if c.message == "" {
				Expect(err).NotTo(HaveOccurred())
				return
			}
			Expect(err).To(MatchError(ContainSubstring(c.message)))
		}, policyCases)
})
