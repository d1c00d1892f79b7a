package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provider selects the provider API a model is reached through.
// +kubebuilder:validation:Enum=openai;openai-compatible;azure-openai;anthropic;replicate;gemini;vertex;bedrock
type Provider string

const (
	// ProviderOpenAI is the OpenAI Chat Completions API.
	ProviderOpenAI Provider = "openai"
	// ProviderOpenAICompatible is any server speaking the Chat Completions wire format
	// (vLLM, llama.cpp server, Ollama, LocalAI); it requires an endpoint.
	ProviderOpenAICompatible Provider = "openai-compatible"
	// ProviderAnthropic is the Anthropic Messages API.
	ProviderAnthropic Provider = "anthropic"
	// ProviderReplicate is the Replicate asynchronous predictions API.
	ProviderReplicate Provider = "replicate"
	// ProviderAzureOpenAI is the Azure OpenAI v1 API of one Azure resource
	// (https://{resource}.openai.azure.com/openai/v1); it requires an endpoint.
	ProviderAzureOpenAI Provider = "azure-openai"
	// ProviderGemini is the Gemini API (generativelanguage.googleapis.com) with an API key.
	ProviderGemini Provider = "gemini"
	// ProviderVertex is Gemini on Vertex AI with a service-account key; it requires a
	// region and a project.
	ProviderVertex Provider = "vertex"
	// ProviderBedrock is the Amazon Bedrock Converse API; it requires a region.
	ProviderBedrock Provider = "bedrock"
)

// Providers lists every provider, in the order of the CRD's enum.
var Providers = []Provider{ProviderOpenAI, ProviderOpenAICompatible, ProviderAzureOpenAI,
	ProviderAnthropic, ProviderReplicate, ProviderGemini, ProviderVertex, ProviderBedrock}

// ParameterName names one input parameter of a model, as the provider's model schema
// spells it (for example "aspect_ratio").
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]{0,63}$`
type ParameterName string

// CredentialLabel is the label by which a Secret opts in to being a model credential: in
// a cluster, a ModelDeployment may use a Secret only when it carries this label with the
// value CredentialLabelValue. Whoever may write a ModelDeployment chooses its endpoint,
// so without the opt-in that permission would read any Secret of the namespace.
// Standalone manifests are written by the operator and need no label.
const CredentialLabel = "ai.switchboard.dev/credential"

// CredentialLabelValue is the value of CredentialLabel that opts a Secret in.
const CredentialLabelValue = "true"

// SecretKeyReference names one key of a Secret in the same namespace.
type SecretKeyReference struct {
	// name is the name of the Secret, in the ModelDeployment's namespace. In a cluster
	// the Secret must be labelled ai.switchboard.dev/credential: "true"; any other
	// Secret is not used (CredentialsResolved=False, reason SecretNotEligible).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key is the key within the Secret's data whose value is the credential.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// Credentials says where the model's credential is kept.
type Credentials struct {
	// secretRef references the Secret key holding the provider credential (an API key or
	// token). In a cluster only a Secret labelled ai.switchboard.dev/credential: "true"
	// is used. The value is read by the runtime only; it never appears in status, events
	// or logs.
	// +required
	SecretRef SecretKeyReference `json:"secretRef"`
}

// Routing places a model among the other eligible models.
type Routing struct {
	// priority orders eligible models: higher first. Default 0.
	// +optional
	// +kubebuilder:default=0
	Priority int32 `json:"priority,omitempty"`

	// weight is the relative share of requests among eligible models of equal priority,
	// 1..10000. Default 100.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Weight int32 `json:"weight,omitempty"`
}

// ModelDeploymentSpec is one configured model: how to reach it and what it can do.
// The endpoint rules sit on the spec, not on the endpoint string: the API server repeats
// a string's value in the error of a rule on that string, and an endpoint may carry a
// secret. On an object it omits the value; fieldPath still names spec.endpoint.
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || size(self.endpoint) == 0 || (isURL(self.endpoint) && (self.endpoint.startsWith('https://') || self.endpoint.startsWith('http://')) && size(url(self.endpoint).getHost()) > 0)",message="endpoint must be an absolute http(s) URL",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || (!self.endpoint.contains('@') && !self.endpoint.contains('?') && !self.endpoint.contains('#'))",message="endpoint must not carry user info, a query or a fragment",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="!(self.provider in ['openai-compatible', 'azure-openai']) || (has(self.endpoint) && size(self.endpoint) > 0)",messageExpression="'endpoint is required for provider ' + self.provider"
// +kubebuilder:validation:XValidation:rule="!(self.provider in ['bedrock', 'vertex']) || (has(self.region) && size(self.region) > 0)",messageExpression="'region is required for provider ' + self.provider"
// +kubebuilder:validation:XValidation:rule="self.provider in ['bedrock', 'vertex'] || !has(self.region)",message="region is only allowed for providers bedrock and vertex"
// +kubebuilder:validation:XValidation:rule="self.provider != 'vertex' || (has(self.project) && size(self.project) > 0)",message="project is required for provider vertex"
// +kubebuilder:validation:XValidation:rule="self.provider == 'vertex' || !has(self.project)",message="project is only allowed for provider vertex"
// +kubebuilder:validation:XValidation:rule="self.provider == 'openai-compatible' || has(self.credentials)",message="credentials.secretRef is required for every provider except openai-compatible"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint) || size(self.endpoint) == 0 || self.endpoint.startsWith('https://') || (has(self.allowInsecureEndpoint) && self.allowInsecureEndpoint)",message="endpoint must use https unless allowInsecureEndpoint is true"
// +kubebuilder:validation:XValidation:rule="self.provider != 'replicate' || (has(self.capabilities) && has(self.capabilities.input) && has(self.capabilities.output))",message="provider replicate must declare capabilities.input and capabilities.output"
// +kubebuilder:validation:XValidation:rule="self.provider != 'replicate' || !has(self.capabilities) || !has(self.capabilities.streaming) || !self.capabilities.streaming",message="provider replicate cannot declare capabilities.streaming: true"
// +kubebuilder:validation:XValidation:rule="self.provider != 'replicate' || !has(self.capabilities) || !has(self.capabilities.tools) || !self.capabilities.tools",message="provider replicate cannot declare capabilities.tools: true"
// +kubebuilder:validation:XValidation:rule="self.provider != 'replicate' || !has(self.capabilities) || !has(self.capabilities.structuredOutput) || !self.capabilities.structuredOutput",message="provider replicate cannot declare capabilities.structuredOutput: true"
// +kubebuilder:validation:XValidation:rule="!(self.provider in ['openai', 'openai-compatible', 'azure-openai']) || !has(self.capabilities) || !has(self.capabilities.input) || !self.capabilities.input.exists(m, m == 'video')",messageExpression="'provider ' + self.provider + ' cannot declare video in capabilities.input'"
// +kubebuilder:validation:XValidation:rule="self.provider != 'bedrock' || !has(self.capabilities) || !has(self.capabilities.input) || !self.capabilities.input.exists(m, m == 'audio')",message="provider bedrock cannot declare audio in capabilities.input"
// +kubebuilder:validation:XValidation:rule="self.provider != 'anthropic' || !has(self.capabilities) || !has(self.capabilities.input) || self.capabilities.input.all(m, m in ['text', 'json', 'image'])",message="provider anthropic can declare only text, json and image in capabilities.input"
// +kubebuilder:validation:XValidation:rule="self.provider == 'replicate' || !has(self.capabilities) || !has(self.capabilities.output) || self.capabilities.output.all(m, m in ['text', 'json'])",messageExpression="'provider ' + self.provider + ' can declare only text and json in capabilities.output'"
// +kubebuilder:validation:XValidation:rule="self.provider == 'replicate' || !has(self.allowedParameters) || size(self.allowedParameters) == 0",message="allowedParameters is only allowed for provider replicate"
type ModelDeploymentSpec struct {
	// provider is the provider API the model is reached through: openai,
	// openai-compatible, azure-openai, anthropic, replicate, gemini, vertex or bedrock.
	// +required
	Provider Provider `json:"provider"`

	// region is the cloud region the model is called in, for example "us-east-1"
	// (bedrock) or "europe-west4" or "global" (vertex). Required for bedrock and vertex,
	// refused for every other provider.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+(-[a-z0-9]+)*$`
	Region string `json:"region,omitempty"`

	// project is the Google Cloud project id the Vertex AI model is called in. Required
	// for vertex, refused for every other provider.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`
	Project string `json:"project,omitempty"`

	// model is the provider's model id, for example "gpt-4o-mini",
	// "black-forest-labs/flux-schnell" or, pinned to a version on replicate,
	// "owner/name:version". Only this field (with endpoint) chooses what runs; no request
	// can change it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Model string `json:"model"`

	// endpoint is the provider's base URL. Empty means the provider's public default
	// (for bedrock and vertex, the region's); required for openai-compatible and for
	// azure-openai (the resource's URL, https://{resource}.openai.azure.com). It must be an absolute http(s) URL with a host, use
	// https unless allowInsecureEndpoint is true, and must not carry user info, a query
	// or a fragment. Validation messages never repeat its value.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Endpoint string `json:"endpoint,omitempty"`

	// allowInsecureEndpoint permits a plain-http endpoint (for in-cluster or local model
	// servers). Default false.
	// +optional
	AllowInsecureEndpoint bool `json:"allowInsecureEndpoint,omitempty"`

	// credentials references the Secret holding the provider credential. Required for
	// every provider except openai-compatible (local servers may need none). The value
	// is an API key, except for vertex (a service-account key, the JSON file Google
	// Cloud issues) and bedrock (a Bedrock API key, or AWS access keys as the JSON that
	// "aws configure export-credentials --format process" prints).
	// +optional
	Credentials *Credentials `json:"credentials,omitempty"`

	// abilities lists the ability names this model serves (1..32, unique). A request is
	// only routed to models serving its ability.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="abilities must not repeat a name"
	Abilities []AbilityName `json:"abilities"`

	// capabilities declares what this configured model accepts and produces. Declared,
	// not verified: platform teams state what the model really supports.
	// +optional
	Capabilities *Capabilities `json:"capabilities,omitempty"`

	// allowedParameters lists the model input parameter names callers may set through
	// the replicate.input request extension (an object of name to scalar value), for
	// example aspect_ratio, num_inference_steps or seed: 0..64 unique names matching
	// ^[A-Za-z_][A-Za-z0-9_]{0,63}$. Omitted or empty: callers may set none. Only for
	// provider replicate. Names of prompt, media, tool, model, version, webhook or
	// streaming inputs are refused in any letter case, so no caller can reach an input
	// the declared capabilities do not cover.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="allowedParameters must not repeat a name"
	// +kubebuilder:validation:XValidation:rule="self.all(x, !(x.lowerAscii() in ['prompt', 'system_prompt', 'messages', 'image', 'images', 'input_image', 'mask', 'audio', 'input_audio', 'video', 'input_video', 'file', 'files', 'model', 'version', 'tools', 'tool_choice', 'functions', 'function_call', 'webhook', 'webhook_events_filter', 'stream']))",message="allowedParameters must not name a prompt, media, tool, model or version input: prompt, system_prompt, messages, image, images, input_image, mask, audio, input_audio, video, input_video, file, files, model, version, tools, tool_choice, functions, function_call, webhook, webhook_events_filter and stream are reserved in any letter case"
	AllowedParameters []ParameterName `json:"allowedParameters,omitempty"`

	// routing sets the model's priority and weight among eligible models.
	// +optional
	Routing *Routing `json:"routing,omitempty"`

	// attemptTimeout bounds one attempt on this model (1s..1h). It never extends the
	// execution's deadline.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="attemptTimeout must be between 1s and 1h"
	AttemptTimeout *metav1.Duration `json:"attemptTimeout,omitempty"`

	// suspend removes the model from routing while keeping the object. Default false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// pricing is what the model costs, per 1,000,000 units in one currency. Prices are
	// decimal strings such as "2.50", with no sign or exponent and at most 6 decimals:
	// money is counted in integer micro-units, never in floating point. Needed by every
	// Budget with a cost limit that governs the model; usage events then carry a
	// derived cost. Omitted: the model has no known price, and a Budget with a cost
	// limit that governs it is Ready=False, NoPricing and keeps it out of routing for
	// the Budget's subjects.
	// +optional
	Pricing *Pricing `json:"pricing,omitempty"`

	// limits bounds what one execution may ask of the model: limits.maxOutputTokens is
	// the output cap sent to the provider, which a caller may only lower.
	// +optional
	Limits *DeploymentLimits `json:"limits,omitempty"`
}

// ModelDeploymentStatus is the observed state of a ModelDeployment.
type ModelDeploymentStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are CredentialsResolved, Routable and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// effectiveCapabilities are the declared capabilities (with the provider's defaults)
	// narrowed by every CapabilityPolicy that selects the model. Routing uses these.
	// +optional
	EffectiveCapabilities *EffectiveCapabilities `json:"effectiveCapabilities,omitempty"`

	// inputs is effectiveCapabilities.input joined with commas, for display.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Inputs string `json:"inputs,omitempty"`

	// policies names the CapabilityPolicies that select the model, sorted.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	Policies []string `json:"policies,omitempty"`

	// credentialsVersion is a short hash of the referenced Secret's identity and
	// revision: its uid and resourceVersion in a cluster; in standalone mode its
	// namespace/name and a counter that increases whenever the Secret changes between
	// reloads. It changes when the Secret is rotated; it never derives from the Secret's
	// content.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CredentialsVersion string `json:"credentialsVersion,omitempty"`
}

// ModelDeployment is one configured model: provider, model id, endpoint, the capabilities
// this model really has, and a reference to its credential Secret. Optionally its
// pricing and output cap, which Budgets need; kubectl get md -o wide shows them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=md,categories=switchboard
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model`
// +kubebuilder:printcolumn:name="Inputs",type=string,JSONPath=`.status.inputs`
// +kubebuilder:printcolumn:name="Tools",type=boolean,JSONPath=`.status.effectiveCapabilities.tools`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Currency",type=string,JSONPath=`.spec.pricing.currency`,priority=1
// +kubebuilder:printcolumn:name="In/1M",type=string,JSONPath=`.spec.pricing.inputTokens`,priority=1
// +kubebuilder:printcolumn:name="Out/1M",type=string,JSONPath=`.spec.pricing.outputTokens`,priority=1
// +kubebuilder:printcolumn:name="Max-Out",type=integer,JSONPath=`.spec.limits.maxOutputTokens`,priority=1
type ModelDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired configuration of the model.
	// +required
	Spec ModelDeploymentSpec `json:"spec"`

	// status is the observed state, written by the controller.
	// +optional
	Status ModelDeploymentStatus `json:"status,omitempty"`
}

// ModelDeploymentList is a list of ModelDeployments.
// +kubebuilder:object:root=true
type ModelDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelDeployment `json:"items"`
}
