// Package v1alpha1 contains the Switchboard API types of group ai.switchboard.dev:
// ModelDeployment (one configured model), CapabilityPolicy (restrictions on the models of
// a namespace) and Budget (limits on what the executions of a namespace's models may cost
// or use per calendar window).
//
// +kubebuilder:object:generate=true
// +groupName=ai.switchboard.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "ai.switchboard.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ModelDeployment{}, &ModelDeploymentList{},
		&CapabilityPolicy{}, &CapabilityPolicyList{},
		&Budget{}, &BudgetList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
