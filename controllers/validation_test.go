package controllers

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	Entry("azure-openai without endpoint", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderAzureOpenAI)},
		message: "endpoint is required for provider azure-openai"}),
	Entry("a valid azure-openai manifest", mdCase{opts: []mdOption{withProvider(v1alpha1.ProviderAzureOpenAI),
		withEndpoint("https://contoso.openai.azure.com", false)}}),
	Entry("a valid gemini manifest", mdCase{opts: []mdOption{withProvider(v1alpha1.ProviderGemini)}}),
	Entry("a valid vertex manifest", mdCase{opts: []mdOption{withProvider(v1alpha1.ProviderVertex), inRegion("europe-west4", "my-project-123")}}),
	Entry("a valid bedrock manifest", mdCase{opts: []mdOption{withProvider(v1alpha1.ProviderBedrock), inRegion("us-east-1", "")}}),
	Entry("bedrock without region", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderBedrock)},
		message: "region is required for provider bedrock"}),
	Entry("vertex without region", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderVertex), inRegion("", "my-project-123")},
		message: "region is required for provider vertex"}),
	Entry("vertex without project", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderVertex), inRegion("us-central1", "")},
		message: "project is required for provider vertex"}),
	Entry("a region on openai", mdCase{
		opts:    []mdOption{inRegion("us-east-1", "")},
		message: "region is only allowed for providers bedrock and vertex"}),
	Entry("a project on bedrock", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderBedrock), inRegion("us-east-1", "my-project-123")},
		message: "project is only allowed for provider vertex"}),
	Entry("a region that is not a region name", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderBedrock), inRegion("US East", "")},
		message: "^[a-z0-9]+(-[a-z0-9]+)*$"}),
	Entry("a project id that is not one", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderVertex), inRegion("us-central1", "Project!")},
		message: "^[a-z][a-z0-9-]{4,28}[a-z0-9]$"}),
	Entry("gemini without credentials", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderGemini), withoutCredentials()},
		message: "credentials.secretRef is required for every provider except openai-compatible"}),
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
	Entry("endpoint without a host", mdCase{
		opts:    []mdOption{withEndpoint("https:///v1", false)},
		message: "endpoint must be an absolute http(s) URL"}),

	// allowedParameters.
	Entry("a valid replicate manifest with allowedParameters", mdCase{opts: []mdOption{replicateImageModel(),
		withAllowedParameters("aspect_ratio", "num_inference_steps", "seed", "_guidance")}}),
	Entry("allowedParameters on a non-replicate provider", mdCase{
		opts:    []mdOption{withAllowedParameters("temperature")},
		message: "allowedParameters is only allowed for provider replicate"}),
	Entry("a reserved parameter name", mdCase{
		opts:    []mdOption{replicateImageModel(), withAllowedParameters("seed", "image")},
		message: "allowedParameters must not name a prompt, media, tool, model or version input"}),
	Entry("a reserved parameter name in another letter case", mdCase{
		opts:    []mdOption{replicateImageModel(), withAllowedParameters("Webhook_Events_Filter")},
		message: "allowedParameters must not name a prompt, media, tool, model or version input"}),
	Entry("the version as a parameter", mdCase{
		opts:    []mdOption{replicateImageModel(), withAllowedParameters("VERSION")},
		message: "allowedParameters must not name a prompt, media, tool, model or version input"}),
	Entry("a repeated parameter name", mdCase{
		opts:    []mdOption{replicateImageModel(), withAllowedParameters("seed", "seed")},
		message: "allowedParameters must not repeat a name"}),
	Entry("a parameter name that is not an identifier", mdCase{
		opts:    []mdOption{replicateImageModel(), withAllowedParameters("aspect-ratio")},
		message: "^[A-Za-z_][A-Za-z0-9_]{0,63}$"}),

	// Capability declarations an adapter can never honour.
	Entry("a valid openai manifest with every modality it can take", mdCase{opts: []mdOption{
		withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "json", "image", "audio", "file"},
			Output: []v1alpha1.OutputModality{"text", "json"}, Tools: true, Streaming: true, StructuredOutput: true})}}),
	Entry("a valid anthropic manifest with every modality it can take", mdCase{opts: []mdOption{
		withProvider(v1alpha1.ProviderAnthropic),
		withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "json", "image"},
			Output: []v1alpha1.OutputModality{"text", "json"}, Tools: true, Streaming: true})}}),
	Entry("openai declaring video input", mdCase{
		opts:    []mdOption{withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "video"}})},
		message: "provider openai cannot declare video in capabilities.input"}),
	Entry("openai-compatible declaring video input", mdCase{
		opts: []mdOption{withProvider(v1alpha1.ProviderOpenAICompatible), withEndpoint("https://vllm.example.com/v1", false),
			withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"video"}})},
		message: "provider openai-compatible cannot declare video in capabilities.input"}),
	Entry("azure-openai declaring video input", mdCase{
		opts: []mdOption{withProvider(v1alpha1.ProviderAzureOpenAI), withEndpoint("https://contoso.openai.azure.com", false),
			withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"video"}})},
		message: "provider azure-openai cannot declare video in capabilities.input"}),
	Entry("a valid gemini manifest with every modality it can take", mdCase{opts: []mdOption{
		withProvider(v1alpha1.ProviderGemini),
		withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "json", "image", "audio", "video", "file"},
			Output: []v1alpha1.OutputModality{"text", "json"}, Tools: true, Streaming: true})}}),
	Entry("a valid bedrock manifest with every modality it can take", mdCase{opts: []mdOption{
		withProvider(v1alpha1.ProviderBedrock), inRegion("us-west-2", ""),
		withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "json", "image", "video", "file"},
			Output: []v1alpha1.OutputModality{"text", "json"}, Tools: true, Streaming: true})}}),
	Entry("bedrock declaring audio input", mdCase{
		opts: []mdOption{withProvider(v1alpha1.ProviderBedrock), inRegion("us-west-2", ""),
			withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "audio"}})},
		message: "provider bedrock cannot declare audio in capabilities.input"}),
	Entry("vertex declaring image output", mdCase{
		opts: []mdOption{withProvider(v1alpha1.ProviderVertex), inRegion("global", "my-project-123"),
			withCapabilities(v1alpha1.Capabilities{Output: []v1alpha1.OutputModality{"image"}})},
		message: "provider vertex can declare only text and json in capabilities.output"}),
	Entry("openai declaring image output", mdCase{
		opts:    []mdOption{withCapabilities(v1alpha1.Capabilities{Output: []v1alpha1.OutputModality{"text", "image"}})},
		message: "provider openai can declare only text and json in capabilities.output"}),
	Entry("openai-compatible declaring audio output", mdCase{
		opts: []mdOption{withProvider(v1alpha1.ProviderOpenAICompatible), withEndpoint("https://vllm.example.com/v1", false),
			withCapabilities(v1alpha1.Capabilities{Output: []v1alpha1.OutputModality{"audio"}})},
		message: "provider openai-compatible can declare only text and json in capabilities.output"}),
	Entry("anthropic declaring audio input", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderAnthropic), withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"text", "audio"}})},
		message: "provider anthropic can declare only text, json and image in capabilities.input"}),
	Entry("anthropic declaring file input", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderAnthropic), withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"file"}})},
		message: "provider anthropic can declare only text, json and image in capabilities.input"}),
	Entry("anthropic declaring video input", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderAnthropic), withCapabilities(v1alpha1.Capabilities{Input: []v1alpha1.InputModality{"video"}})},
		message: "provider anthropic can declare only text, json and image in capabilities.input"}),
	Entry("anthropic declaring image output", mdCase{
		opts:    []mdOption{withProvider(v1alpha1.ProviderAnthropic), withCapabilities(v1alpha1.Capabilities{Output: []v1alpha1.OutputModality{"image"}})},
		message: "provider anthropic can declare only text and json in capabilities.output"}),
	Entry("replicate declaring tools", mdCase{
		opts:    []mdOption{replicateImageModel(), func(md *v1alpha1.ModelDeployment) { md.Spec.Capabilities.Tools = true }},
		message: "provider replicate cannot declare capabilities.tools: true"}),
	Entry("replicate declaring structured output", mdCase{
		opts:    []mdOption{replicateImageModel(), func(md *v1alpha1.ModelDeployment) { md.Spec.Capabilities.StructuredOutput = true }},
		message: "provider replicate cannot declare capabilities.structuredOutput: true"}),
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

	// Selectors: only what metav1.LabelSelectorAsSelector can evaluate is admitted.
	Entry("a valid selector with every operator", policyCase{opts: []policyOption{func(p *v1alpha1.CapabilityPolicy) {
		p.Spec.Selector = &v1alpha1.LabelSelector{
			MatchLabels: map[string]v1alpha1.LabelValue{"example.com/tier": "standard", "team": ""},
			MatchExpressions: []v1alpha1.LabelSelectorRequirement{
				{Key: "tier", Operator: v1alpha1.LabelSelectorOpIn, Values: []v1alpha1.LabelValue{"standard", "batch"}},
				{Key: "ai.example.com/stage", Operator: v1alpha1.LabelSelectorOpNotIn, Values: []v1alpha1.LabelValue{"canary"}},
				{Key: "owner", Operator: v1alpha1.LabelSelectorOpExists},
				{Key: "Deprecated_Model.v1", Operator: v1alpha1.LabelSelectorOpDoesNotExist},
			}}
	}}}),
	Entry("a lower-case operator", policyCase{
		opts:    []policyOption{selectingWhere("tier", "in", "standard")},
		message: `spec.selector.matchExpressions[0].operator: Unsupported value: "in"`}),
	Entry("In without values", policyCase{
		opts:    []policyOption{selectingWhere("tier", v1alpha1.LabelSelectorOpIn)},
		message: "values must not be empty when operator is In or NotIn"}),
	Entry("NotIn without values", policyCase{
		opts:    []policyOption{selectingWhere("tier", v1alpha1.LabelSelectorOpNotIn)},
		message: "values must not be empty when operator is In or NotIn"}),
	Entry("Exists with values", policyCase{
		opts:    []policyOption{selectingWhere("tier", v1alpha1.LabelSelectorOpExists, "standard")},
		message: "values must be empty when operator is Exists or DoesNotExist"}),
	Entry("DoesNotExist with values", policyCase{
		opts:    []policyOption{selectingWhere("tier", v1alpha1.LabelSelectorOpDoesNotExist, "standard")},
		message: "values must be empty when operator is Exists or DoesNotExist"}),
	Entry("a bad label key in matchExpressions", policyCase{
		opts:    []policyOption{selectingWhere("-tier", v1alpha1.LabelSelectorOpExists)},
		message: "must be a label key"}),
	Entry("a label key with an upper-case prefix in matchExpressions", policyCase{
		opts:    []policyOption{selectingWhere("Example.com/tier", v1alpha1.LabelSelectorOpExists)},
		message: "must be a label key"}),
	Entry("a bad label value in matchExpressions", policyCase{
		opts:    []policyOption{selectingWhere("tier", v1alpha1.LabelSelectorOpIn, "standard", "not a value")},
		message: "must be a label value"}),
	Entry("a bad label key in matchLabels", policyCase{
		opts:    []policyOption{selecting("tier/name/extra", "standard")},
		message: "each matchLabels key must be a label key"}),
	Entry("a label key name over 63 characters in matchLabels", policyCase{
		opts:    []policyOption{selecting(strings.Repeat("k", 64), "standard")},
		message: "each matchLabels key must be a label key"}),
	Entry("a label key prefix over 253 characters in matchLabels", policyCase{
		opts:    []policyOption{selecting(strings.Repeat("a.", 127)+"a/tier", "standard")},
		message: "each matchLabels key must be a label key"}),
	Entry("a bad label value in matchLabels", policyCase{
		opts:    []policyOption{selecting("tier", "standard!")},
		message: "must be a label value"}),
	Entry("a label value over 63 characters in matchLabels", policyCase{
		opts:    []policyOption{selecting("tier", strings.Repeat("v", 64))},
		message: "63"}),
}

var _ = Describe("CRD validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("refuses every reserved parameter name, in any letter case, on both paths", func() {
		for _, name := range v1alpha1.ReservedParameters {
			for _, spelled := range []string{name, strings.ToUpper(name)} {
				md := newMD(ns, "flux", replicateImageModel(), withAllowedParameters(v1alpha1.ParameterName(spelled)))
				err := k8s.Create(suiteCtx, md)
				Expect(err).To(MatchError(ContainSubstring("allowedParameters must not name")), spelled)
				Expect(err.Error()).To(MatchRegexp(" "+name+"[ ,]"), "the message lists %s", name)
				Expect(md.Spec.Validate()).To(MatchError(ContainSubstring("allowedParameters must not name")), spelled)
			}
		}
	})

	It("rejects a secret-bearing endpoint or model id without repeating it", func() {
		for name, md := range canaryModels() {
			md.Namespace = ns
			err := k8s.Create(suiteCtx, md)
			Expect(err).To(HaveOccurred(), name)
			Expect(err.Error()).NotTo(ContainSubstring(endpointCanary), name)
			Expect(md.Spec.Validate().Error()).NotTo(ContainSubstring(endpointCanary), name)
		}
		// Nothing was created, so nothing else (status, Events) can hold the value.
		list := &v1alpha1.ModelDeploymentList{}
		Expect(k8s.List(suiteCtx, list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(BeEmpty())
	})

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
