package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the project's API group.
const GroupName = "fencing.bmcfence.io"

// SchemeGroupVersion is the group and version of every type here.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme (the typed clients use it).
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&BMCFenceRemediation{}, &BMCFenceRemediationList{},
		&BMCFenceRemediationTemplate{}, &BMCFenceRemediationTemplateList{},
		&BMCFenceRequest{}, &BMCFenceRequestList{},
		&BMCFenceRecord{}, &BMCFenceRecordList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
