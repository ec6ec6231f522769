// Package v1alpha1 holds trainyard's API: the execution Targets a hub can
// dispatch to and the Dispatch records that bind one admitted Kueue Workload to
// one Target.
//
// +kubebuilder:object:generate=true
// +groupName=trainyard.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of trainyard's objects.
	GroupVersion = schema.GroupVersion{Group: "trainyard.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this group with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
