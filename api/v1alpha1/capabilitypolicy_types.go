package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ToolsPolicy allows or disables tool calling.
// +kubebuilder:validation:Enum=Allowed;Disabled
type ToolsPolicy string

const (
	// ToolsAllowed leaves tool calling as each model declares it.
	ToolsAllowed ToolsPolicy = "Allowed"
	// ToolsDisabled turns tool calling off for every selected model, whatever a request
	// carries.
	ToolsDisabled ToolsPolicy = "Disabled"
)

// ExtensionPattern matches request extension keys: an exact key ("openai.seed") or a
// prefix ending in "*" ("openai.*").
// +kubebuilder:validation:MinLength=2
// +kubebuilder:validation:MaxLength=128
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]*\.(\*|[a-z][a-z0-9_.-]*\*?)$`
type ExtensionPattern string

// CapabilityPolicySpec restricts what the selected models may do.
type CapabilityPolicySpec struct {
	// selector selects the ModelDeployments of this namespace the policy governs, by
	// label (matchLabels and matchExpressions, as in a Kubernetes label selector). Empty
	// or omitted selects all of them. A selector that cannot be evaluated is rejected; if
	// one exists anyway, the policy governs every ModelDeployment of its namespace and
	// keeps them out of routing until it is fixed (policies fail closed).
	// +optional
	Selector *LabelSelector `json:"selector,omitempty"`

	// tools is Allowed (default) or Disabled. Disabled turns tool calling off for every
	// selected model; no request part, extension or routing hint can turn it back on.
	// +optional
	// +kubebuilder:default=Allowed
	Tools ToolsPolicy `json:"tools,omitempty"`

	// allowedInputs caps the input modalities of selected models. Omitted: no cap.
	// +optional
	// +kubebuilder:validation:MaxItems=6
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="allowedInputs must not repeat a modality"
	AllowedInputs []InputModality `json:"allowedInputs,omitempty"`

	// allowedOutputs caps the output modalities of selected models. Omitted: no cap.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="allowedOutputs must not repeat a modality"
	AllowedOutputs []OutputModality `json:"allowedOutputs,omitempty"`

	// allowedExtensions lists the request extension keys selected models may receive, as
	// exact keys or prefixes ending in "*". Omitted: all documented keys. A request
	// carrying any other key is not routed to these models.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="allowedExtensions must not repeat a pattern"
	AllowedExtensions []ExtensionPattern `json:"allowedExtensions,omitempty"`

	// maxDeadlineMs caps a request's deadline_ms (1..3600000) on selected models.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600000
	MaxDeadlineMs *int64 `json:"maxDeadlineMs,omitempty"`

	// maxAttempts caps a request's routing.max_attempts (1..5) on selected models.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// CapabilityPolicyStatus is the observed state of a CapabilityPolicy.
type CapabilityPolicyStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// matchedDeployments counts the ModelDeployments the policy governs: those it
	// selects, or every one of its namespace while the policy is invalid.
	// +optional
	MatchedDeployments int32 `json:"matchedDeployments"`

	// conditions holds Ready: True/Enforced while the policy is applied; False/
	// InvalidSelector or False/InvalidSpec while it is invalid (and keeps the models of
	// its namespace out of routing).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CapabilityPolicy restricts what the models of its namespace may do, for example: no
// tool calling. Several policies may select one model; the most restrictive combination
// applies.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cpol,categories=switchboard
// +kubebuilder:printcolumn:name="Tools",type=string,JSONPath=`.spec.tools`
// +kubebuilder:printcolumn:name="Matched",type=integer,JSONPath=`.status.matchedDeployments`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CapabilityPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the restriction the policy applies.
	// +required
	Spec CapabilityPolicySpec `json:"spec"`

	// status is the observed state, written by the controller.
	// +optional
	Status CapabilityPolicyStatus `json:"status,omitempty"`
}

// CapabilityPolicyList is a list of CapabilityPolicies.
// +kubebuilder:object:root=true
type CapabilityPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapabilityPolicy `json:"items"`
}
