// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=ichor.dev/ichor/pkg/apis/ichor
// +k8s:defaulter-gen=TypeMeta
// +groupName=ichor.dev
// +k8s:openapi-model-package=dev.ichor.ichor.pkg.apis.ichor.v1alpha1

// Package v1alpha1 is the first served version of the ichor.dev API: the
// wire form that clients, kubectl and the generated clientset speak.
//
// The OpenAPI model package is the package's Go path made REST-friendly, as
// Kubernetes' own (io.k8s.api.core.v1): the apply-configuration generator
// finds kinds by that name, and the schema it generates (read by Extract and
// by the fake clientset's server-side apply) must hold them by their model
// names.
package v1alpha1
