// Package artifacts holds the manifests that install Ichor; Go code that
// must agree with them reads them from here.
package artifacts

import _ "embed"

// Roles is roles.yaml: Ichor's user roles and the rules they aggregate.
//
//go:embed roles.yaml
var Roles []byte

// AuditPolicy is audit-policy.yaml: ichor-apiserver's audit policy, in a ConfigMap.
//
//go:embed audit-policy.yaml
var AuditPolicy []byte

// KubeAPIServerAuditPolicy is kube-apiserver/audit-policy.yaml: the rules the
// management cluster's kube-apiserver needs first in its audit policy.
//
//go:embed kube-apiserver/audit-policy.yaml
var KubeAPIServerAuditPolicy []byte

// Installation is installation/ichor.yaml: the IchorInstallation singleton
// as an installation starts it.
//
//go:embed installation/ichor.yaml
var Installation []byte

// AuthenticationConfig is kube-apiserver/authentication-config.yaml: the
// management cluster's kube-apiserver's JWT issuers.
//
//go:embed kube-apiserver/authentication-config.yaml
var AuthenticationConfig []byte
