package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A CapabilityPolicy's selector has the JSON shape of a Kubernetes label selector, so
// manifests written for metav1.LabelSelector keep working, but every part is bounded and
// checked at admission: a selector the controller could not evaluate is refused by the
// API server instead of silently selecting nothing (spec/capabilitypolicies.md, "Fail
// closed").

// LabelSelectorOperator relates a label key to a set of values.
// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
type LabelSelectorOperator string

const (
	// LabelSelectorOpIn selects objects whose label key has one of the values.
	LabelSelectorOpIn LabelSelectorOperator = "In"
	// LabelSelectorOpNotIn selects objects without the label key or whose value is none
	// of the values.
	LabelSelectorOpNotIn LabelSelectorOperator = "NotIn"
	// LabelSelectorOpExists selects objects that have the label key, whatever its value.
	LabelSelectorOpExists LabelSelectorOperator = "Exists"
	// LabelSelectorOpDoesNotExist selects objects that do not have the label key.
	LabelSelectorOpDoesNotExist LabelSelectorOperator = "DoesNotExist"
)

// Label syntax (Kubernetes label keys and values), written without backslashes so the
// same text serves the CEL rules below and the Go validator.
const (
	// labelKeyRegex: an optional DNS-subdomain prefix and "/", then a name of 1..63
	// letters, digits, '-', '_' or '.', starting and ending with a letter or digit. The
	// prefix length (≤ 253) is checked separately.
	labelKeyRegex = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	// labelValueRegex: empty, or 1..63 letters, digits, '-', '_' or '.', starting and
	// ending with a letter or digit.
	labelValueRegex = `^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`
)

// Messages of the selector rules: the CEL rules below repeat them verbatim.
const (
	msgLabelKey        = "must be a label key: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of 1..63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
	msgLabelValue      = "must be a label value: empty, or 1..63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
	msgMatchLabelsKey  = "each matchLabels key " + msgLabelKey
	msgValuesRequired  = "values must not be empty when operator is In or NotIn"
	msgValuesForbidden = "values must be empty when operator is Exists or DoesNotExist"
)

// LabelKey is a Kubernetes label key, such as "tier" or "example.com/tier".
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=317
// +kubebuilder:validation:XValidation:rule="self.indexOf('/') <= 253 && self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')",message="must be a label key: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of 1..63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
type LabelKey string

// LabelValue is a Kubernetes label value: empty, or up to 63 characters.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$')",message="must be a label value: empty, or 1..63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
type LabelValue string

// LabelSelectorRequirement is one condition on a label: a key, an operator and, for In
// and NotIn, the values.
// +kubebuilder:validation:XValidation:rule="!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",message="values must not be empty when operator is In or NotIn"
// +kubebuilder:validation:XValidation:rule="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",message="values must be empty when operator is Exists or DoesNotExist"
type LabelSelectorRequirement struct {
	// key is the label key the requirement applies to, for example "tier" or
	// "example.com/tier".
	// +required
	Key LabelKey `json:"key"`

	// operator is In, NotIn, Exists or DoesNotExist (case-sensitive).
	// +required
	Operator LabelSelectorOperator `json:"operator"`

	// values are the label values In and NotIn compare with (1..32 values); Exists and
	// DoesNotExist take none.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Values []LabelValue `json:"values,omitempty"`
}

// LabelSelector selects objects by their labels: every matchLabels entry and every
// matchExpressions requirement must hold. It has the JSON shape of a Kubernetes label
// selector. It is replaced as a whole by server-side apply, like a Kubernetes selector.
// +structType=atomic
type LabelSelector struct {
	// matchLabels selects objects that carry every one of these labels (key: value), at
	// most 16 entries. Keys are label keys and values label values.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 317 && k.indexOf('/') <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="each matchLabels key must be a label key: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of 1..63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`

	// matchExpressions lists label requirements, at most 16, that must all hold.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// AsLabelSelector returns s as a Kubernetes label selector, for
// metav1.LabelSelectorAsSelector. A nil s gives nil.
func (s *LabelSelector) AsLabelSelector() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{}
	if s.MatchLabels != nil {
		out.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			out.MatchLabels[k] = string(v)
		}
	}
	for _, r := range s.MatchExpressions {
		req := metav1.LabelSelectorRequirement{Key: string(r.Key), Operator: metav1.LabelSelectorOperator(r.Operator)}
		for _, v := range r.Values {
			req.Values = append(req.Values, string(v))
		}
		out.MatchExpressions = append(out.MatchExpressions, req)
	}
	return out
}
