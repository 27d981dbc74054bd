// +k8s:deepcopy-gen=package
// +groupName=ichor.dev

// Package ichor holds the internal form of the ichor.dev API: the types that
// validation, strategies and storage work on, converted to and from every
// served version.
package ichor
