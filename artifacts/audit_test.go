package artifacts

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

// TestKubeAPIServerAuditRulesMatch: the management kube-apiserver's rules
// keep at Metadata level exactly the Ichor requests that ichor-apiserver's
// own policy does, and before any other rule, so that no credential an
// Ichor request carries reaches either audit log.
func TestKubeAPIServerAuditRulesMatch(t *testing.T) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(AuditPolicy, &cm); err != nil {
		t.Fatal(err)
	}
	var ours, kube auditv1.Policy
	if err := yaml.UnmarshalStrict([]byte(cm.Data["policy.yaml"]), &ours); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(KubeAPIServerAuditPolicy, &kube); err != nil {
		t.Fatal(err)
	}
	first := func(p auditv1.Policy) []string {
		t.Helper()
		if len(p.Rules) == 0 || p.Rules[0].Level != auditv1.LevelMetadata || len(p.Rules[0].Resources) != 1 ||
			p.Rules[0].Resources[0].Group != "ichor.dev" || len(p.Rules[0].Verbs) != 0 || len(p.Rules[0].Users) != 0 {
			t.Fatalf("the first rule is not ichor.dev's credential-carrying resources at Metadata: %+v", p.Rules)
		}
		return slices.Sorted(slices.Values(p.Rules[0].Resources[0].Resources))
	}
	if a, b := first(ours), first(kube); !slices.Equal(a, b) {
		t.Errorf("ichor-apiserver keeps %v at Metadata, kube-apiserver's rules %v", a, b)
	}
}
