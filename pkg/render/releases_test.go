package render

import (
	"fmt"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos113"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos114"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestTalosReleasesMatchMachinery keeps the API's table of managed releases
// to the Kubernetes ranges Talos machinery publishes for each, and every
// release renderable.
func TestTalosReleasesMatchMachinery(t *testing.T) {
	machinery := map[string][2]semver.Version{
		"v1.13": {talos113.MinimumKubernetesVersion, talos113.MaximumKubernetesVersion},
		"v1.14": {talos114.MinimumKubernetesVersion, talos114.MaximumKubernetesVersion},
	}
	if len(ichor.TalosReleases) != len(machinery) {
		t.Fatalf("the table has %d releases, this test knows %d: add the release's machinery ranges here", len(ichor.TalosReleases), len(machinery))
	}
	for _, r := range ichor.TalosReleases {
		m, ok := machinery[r.Minor]
		if !ok {
			t.Errorf("%s: no machinery range known to this test", r.Minor)
			continue
		}
		if want := "v" + m[0].String(); r.KubernetesMin != want {
			t.Errorf("%s: KubernetesMin %s, machinery says %s", r.Minor, r.KubernetesMin, want)
		}
		if want := fmt.Sprintf("v%d.%d", m[1].Major, m[1].Minor); r.KubernetesMax != want {
			t.Errorf("%s: KubernetesMax %s, machinery says %s", r.Minor, r.KubernetesMax, want)
		}
		// The edges of the range render, and one step past them does not.
		for _, k := range []struct {
			version string
			runs    bool
		}{
			{r.KubernetesMin, true},
			{r.KubernetesMax + ".9", true},
			{fmt.Sprintf("v%d.%d.0", m[0].Major, m[0].Minor-1), false},
			{fmt.Sprintf("v%d.%d.0", m[1].Major, m[1].Minor+1), false},
		} {
			err := SupportsKubernetes(r.Minor+".0", k.version)
			if (err == nil) != k.runs {
				t.Errorf("Talos %s.0 with Kubernetes %s: render says %v, want runs=%t", r.Minor, k.version, err, k.runs)
			}
			if apiErr := r.RunsKubernetes(k.version); (apiErr == nil) != k.runs {
				t.Errorf("Talos %s with Kubernetes %s: the table says %v, want runs=%t", r.Minor, k.version, apiErr, k.runs)
			}
		}
	}
}
