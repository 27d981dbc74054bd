package artifacts

import (
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestInstallationNamesEveryManagementAudience: the installation an
// installation starts with declares exactly the audiences the management
// kube-apiserver's authentication configuration accepts, so that admission
// keeps every one of them out of managed clusters' trust.
func TestInstallationNamesEveryManagementAudience(t *testing.T) {
	var in v1alpha1.IchorInstallation
	if err := yaml.UnmarshalStrict(Installation, &in); err != nil {
		t.Fatal(err)
	}
	if in.Name != v1alpha1.InstallationName {
		t.Errorf("installation.yaml names %q, want the singleton %q", in.Name, v1alpha1.InstallationName)
	}
	var authn struct {
		JWT []struct {
			Issuer struct {
				Audiences []string `json:"audiences"`
			} `json:"issuer"`
		} `json:"jwt"`
	}
	if err := yaml.Unmarshal(AuthenticationConfig, &authn); err != nil {
		t.Fatal(err)
	}
	var accepted []string
	for _, j := range authn.JWT {
		accepted = append(accepted, j.Issuer.Audiences...)
	}
	slices.Sort(accepted)
	declared := slices.Sorted(slices.Values(in.Spec.Settings.ManagementAudiences))
	if !slices.Equal(slices.Compact(accepted), declared) {
		t.Errorf("kube-apiserver accepts the audiences %v; the installation declares %v", slices.Compact(accepted), declared)
	}
}
