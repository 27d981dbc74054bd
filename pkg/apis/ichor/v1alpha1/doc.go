// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=ichor.dev/ichor/pkg/apis/ichor
// +k8s:defaulter-gen=TypeMeta
// +groupName=ichor.dev
// +k8s:openapi-model-package=dev.ichor.v1alpha1

// Package v1alpha1 is the first served version of the ichor.dev API: the
// wire form that clients, kubectl and the generated clientset speak.
package v1alpha1
