package ichor

import (
	"fmt"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// TalosRelease is a Talos minor release Ichor manages, with the Kubernetes
// versions it runs.
//
// TalosReleases is the one table of them: validation accepts a cluster's
// spec.talosVersion, a talos-upgrade's target and the Kubernetes versions
// from it, the README and docs/reference/talos-versions.md show it, and a
// test checks its ranges against Talos machinery's compatibility tables.
// +k8s:deepcopy-gen=false
type TalosRelease struct {
	// Minor is the release, such as v1.14.
	Minor string
	// KubernetesMin is the oldest Kubernetes it runs; KubernetesMax the
	// newest minor, every patch of which it runs.
	KubernetesMin, KubernetesMax string
	// Layout says how its machine configs are laid out, for people.
	Layout string
}

// TalosReleases are the releases Ichor manages, oldest first.
var TalosReleases = []TalosRelease{
	{Minor: "v1.13", KubernetesMin: "v1.31.0", KubernetesMax: "v1.36",
		Layout: "Kubernetes configured in the v1alpha1 document (machine.kubelet, cluster.*)"},
	{Minor: "v1.14", KubernetesMin: "v1.32.0", KubernetesMax: "v1.37",
		Layout: "Kubernetes configured in documents of its own (KubeletConfig, KubeAPIServerConfig …), the install in UnattendedInstallConfig"},
}

// TalosReleaseOf is the release of Talos version v (such as v1.14.1), or an
// error that names the releases Ichor manages.
func TalosReleaseOf(v string) (TalosRelease, error) {
	parsed, err := utilversion.ParseSemantic(v)
	if err != nil {
		return TalosRelease{}, err
	}
	minor := fmt.Sprintf("v%d.%d", parsed.Major(), parsed.Minor())
	for _, r := range TalosReleases {
		if r.Minor == minor {
			return r, nil
		}
	}
	return TalosRelease{}, fmt.Errorf("Ichor manages Talos %s; %s is not among them", ManagedTalos(), v)
}

// ManagedTalos lists the releases, "v1.13.x and v1.14.x".
func ManagedTalos() string {
	names := make([]string, len(TalosReleases))
	for i, r := range TalosReleases {
		names[i] = r.Minor + ".x"
	}
	return strings.Join(names, " and ")
}

// RunsKubernetes refuses Kubernetes version k outside the release's range.
func (r TalosRelease) RunsKubernetes(k string) error {
	v, err := utilversion.ParseSemantic(k)
	if err != nil {
		return err
	}
	minimum := utilversion.MustParseSemantic(r.KubernetesMin)
	maximum := utilversion.MustParseGeneric(r.KubernetesMax)
	if v.LessThan(minimum) || v.Major() > maximum.Major() || v.Major() == maximum.Major() && v.Minor() > maximum.Minor() {
		return fmt.Errorf("Talos %s runs Kubernetes %s to %s.x", r.Minor, r.KubernetesMin, r.KubernetesMax)
	}
	return nil
}
