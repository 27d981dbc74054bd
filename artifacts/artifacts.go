// Package artifacts holds the manifests that install Ichor, rendered from
// the Helm chart charts/ichor (make manifests), and the management
// kube-apiserver's own configuration; Go code that must agree with them
// reads them from here.
package artifacts

import (
	_ "embed"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

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

//go:embed installation.yaml
var installationConfigMap []byte

// Installation is the IchorInstallation singleton as an installation starts
// it: installation.yaml's ConfigMap, which ichor-apiserver creates it from
// (--bootstrap-installation-file).
var Installation = mustConfigMapFile(installationConfigMap, "installation.yaml")

// AuthenticationConfig is kube-apiserver/authentication-config.yaml: the
// management cluster's kube-apiserver's JWT issuers.
//
//go:embed kube-apiserver/authentication-config.yaml
var AuthenticationConfig []byte

// mustConfigMapFile is the file key of the ConfigMap in manifest.
func mustConfigMapFile(manifest []byte, key string) []byte {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(manifest, &cm); err != nil {
		panic(fmt.Sprintf("artifacts: %v", err))
	}
	data, ok := cm.Data[key]
	if !ok {
		panic(fmt.Sprintf("artifacts: ConfigMap %s has no %s", cm.Name, key))
	}
	return []byte(data)
}
