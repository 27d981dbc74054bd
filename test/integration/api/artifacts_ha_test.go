package api

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/test/integration/itest"
)

// TestArtifactsHA: artifacts/ha (the chart with ci/ha-values.yaml) is every
// object of artifacts/ in the shape the HA tests run: two ichor-apiservers on an external
// etcd (deployment.yaml's flags, the embedded etcd's swapped for the
// external one's, and no volume for it), one kept through drains, spread
// over nodes, and two ichor-controllers electing a leader; kube-apiserver
// takes it all (server-side dry run).
func TestArtifactsHA(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), itest.KubectlTimeout)
	defer cancel()
	base := itest.ArtifactObjects(t, ".")
	ha := itest.ArtifactObjects(t, "ha")
	for key := range base {
		if _, ok := ha[key]; !ok && key != "PersistentVolumeClaim ichor-system/ichor-etcd" {
			t.Errorf("artifacts/ha lacks %s", key)
		}
	}

	if _, ok := ha["PersistentVolumeClaim ichor-system/ichor-etcd"]; ok {
		t.Error("the HA shape keeps the embedded etcd's volume claim")
	}
	was, api := itest.DeploymentOf(t, base, "ichor-apiserver"), itest.DeploymentOf(t, ha, "ichor-apiserver")
	if api.Spec.Replicas == nil || *api.Spec.Replicas != 2 || api.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("ichor-apiserver: replicas %v, strategy %s", api.Spec.Replicas, api.Spec.Strategy.Type)
	}
	if a := api.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
		t.Error("ichor-apiserver's replicas are not spread over nodes")
	}
	flags := func(args []string) (kept []string, etcd map[string]bool) {
		etcd = map[string]bool{}
		for _, a := range args {
			name, _, _ := strings.Cut(a, "=")
			switch {
			case strings.HasPrefix(name, "--embedded-etcd-"), strings.HasPrefix(name, "--etcd-"):
				etcd[name] = true
			default:
				kept = append(kept, a)
			}
		}
		return kept, etcd
	}
	wasKept, _ := flags(was.Spec.Template.Spec.Containers[0].Args)
	haKept, haEtcd := flags(api.Spec.Template.Spec.Containers[0].Args)
	if !slices.Equal(wasKept, haKept) {
		t.Errorf("ichor-apiserver's flags besides etcd's differ:\n  deployment.yaml %v\n  ha              %v", wasKept, haKept)
	}
	for _, f := range []string{"--etcd-servers", "--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"} {
		if !haEtcd[f] {
			t.Errorf("the HA ichor-apiserver lacks %s", f)
		}
	}
	for name := range haEtcd {
		if strings.HasPrefix(name, "--embedded-etcd-") {
			t.Errorf("the HA ichor-apiserver keeps %s", name)
		}
	}
	for _, v := range api.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Errorf("the HA ichor-apiserver mounts volume claim %s", v.PersistentVolumeClaim.ClaimName)
		}
	}
	var pdb policyv1.PodDisruptionBudget
	if err := yaml.UnmarshalStrict(ha["PodDisruptionBudget ichor-system/ichor-apiserver"], &pdb); err != nil || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("ichor-apiserver's PodDisruptionBudget: %+v, %v", pdb.Spec, err)
	}
	ctrl := itest.DeploymentOf(t, ha, "ichor-controller")
	if ctrl.Spec.Replicas == nil || *ctrl.Spec.Replicas != 2 || !slices.Contains(ctrl.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
		t.Errorf("ichor-controller: replicas %v, args %v", ctrl.Spec.Replicas, ctrl.Spec.Template.Spec.Containers[0].Args)
	}

	var all bytes.Buffer
	for key, doc := range ha {
		if key == "Service ichor-system/ichor-apiserver" {
			continue // the harness's own stands for it (as in TestArtifactsServerDryRun)
		}
		all.WriteString("---\n")
		all.Write(doc)
	}
	if _, stderr, err := itest.RunKubectl(ctx, t, all.Bytes(), "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply --dry-run=server of artifacts/ha: %v\n%s", err, stderr)
	}
}
