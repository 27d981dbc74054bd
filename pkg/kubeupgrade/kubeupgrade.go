// Package kubeupgrade knows what Kubernetes allows when a cluster moves from
// one version to another: the path (one minor version at a time, never
// down, as kubeadm and talosctl upgrade-k8s allow) and the API resources a
// version no longer serves, whose objects would be lost.
package kubeupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"ichor.dev/ichor/pkg/imageref"
)

// CheckPath refuses what Kubernetes refuses between two versions: going
// down, or up by more than one minor version.
func CheckPath(from, to string) error {
	f, err := semver.ParseTolerant(from)
	if err != nil {
		return fmt.Errorf("the cluster's Kubernetes version %q: %w", from, err)
	}
	t, err := semver.ParseTolerant(to)
	if err != nil {
		return fmt.Errorf("the target Kubernetes version %q: %w", to, err)
	}
	switch {
	case t.LT(f):
		return fmt.Errorf("Kubernetes %s is older than the cluster's %s: Kubernetes does not downgrade", to, from)
	case t.Major != f.Major || t.Minor > f.Minor+1:
		return fmt.Errorf("Kubernetes upgrades one minor version at a time: from %d.%d go to %d.%d first", f.Major, f.Minor, f.Major, f.Minor+1)
	}
	return nil
}

// removal is an API resource that a Kubernetes minor stops serving with
// no other version of it left (the Kubernetes deprecation guide and
// release notes): its objects are gone once that minor's API servers run.
// A resource whose older version goes while a newer one stays (FlowSchemas
// through flowcontrol v1beta3 in 1.32) keeps its objects, readable through
// any served version, so it is not one.
type removal struct {
	// in is the minor version that stopped serving it.
	in       semver.Version
	resource schema.GroupVersionResource
}

// removals are the removals in the minors Talos runs (1.31 on).
var removals = []removal{
	{semver.MustParse("1.32.0"), schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1alpha3", Resource: "podschedulingcontexts"}},
}

// Removed are the API resources that Kubernetes stops serving somewhere
// after from, up to and including to.
func Removed(from, to string) []schema.GroupVersionResource {
	f, err1 := semver.ParseTolerant(from)
	t, err2 := semver.ParseTolerant(to)
	if err1 != nil || err2 != nil {
		return nil
	}
	var out []schema.GroupVersionResource
	for _, r := range removals {
		if minor(f).LT(r.in) && !minor(t).LT(r.in) {
			out = append(out, r.resource)
		}
	}
	return out
}

func minor(v semver.Version) semver.Version { return semver.Version{Major: v.Major, Minor: v.Minor} }

// ReadRules are what reading the objects of every tabled removal takes:
// list, and nothing else, on those resources.
func ReadRules() []rbacv1.PolicyRule {
	byGroup := map[string][]string{}
	for _, r := range removals {
		if !slices.Contains(byGroup[r.resource.Group], r.resource.Resource) {
			byGroup[r.resource.Group] = append(byGroup[r.resource.Group], r.resource.Resource)
		}
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	rules := make([]rbacv1.PolicyRule, 0, len(groups))
	for _, g := range groups {
		resources := byGroup[g]
		slices.Sort(resources)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: resources, Verbs: []string{"list"}})
	}
	return rules
}

// StillUsed names the removed resources of the path from → to that the
// cluster still serves and holds objects of: those objects would be gone
// once the new API servers run. Delete or migrate them first.
func StillUsed(ctx context.Context, d discovery.DiscoveryInterface, from, to string) ([]string, error) {
	var used []string
	for _, gvr := range Removed(from, to) {
		served, err := serves(d, gvr)
		if err != nil || !served {
			if err != nil {
				return nil, err
			}
			continue
		}
		n, err := count(ctx, d, gvr)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			used = append(used, fmt.Sprintf("%s.%s.%s", gvr.Resource, gvr.Version, gvr.Group))
		}
	}
	return used, nil
}

func serves(d discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gvr.GroupVersion(), err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == gvr.Resource }), nil
}

// count lists one object of gvr (through the discovery client's REST
// client, which speaks to any group) and says whether there are any.
func count(ctx context.Context, d discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (int, error) {
	raw, err := d.RESTClient().Get().AbsPath("/apis", gvr.Group, gvr.Version, gvr.Resource).Param("limit", "1").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", gvr, err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("list %s: %w", gvr, err)
	}
	return len(list.Items), nil
}

// componentApps are the k8s-app labels of the pods whose image tags say
// which Kubernetes version runs (talosctl upgrade-k8s reads the same).
var componentApps = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// LowestRunning is the lowest Kubernetes version the cluster runs: of its
// control-plane static pods and kube-proxy (by their image tags) and of its
// kubelets (as their Nodes report); "" when none tells.
func LowestRunning(pods []corev1.Pod, nodes []corev1.Node) string {
	var lowest *semver.Version
	consider := func(v string) {
		parsed, err := semver.ParseTolerant(v)
		if err != nil {
			return
		}
		if lowest == nil || parsed.LT(*lowest) {
			lowest = &parsed
		}
	}
	for i := range pods {
		app := pods[i].Labels["k8s-app"]
		if !slices.Contains(componentApps, app) {
			continue
		}
		for _, c := range pods[i].Spec.Containers {
			if c.Name == app {
				consider(imageref.Tag(c.Image))
			}
		}
	}
	for i := range nodes {
		consider(nodes[i].Status.NodeInfo.KubeletVersion)
	}
	if lowest == nil {
		return ""
	}
	return "v" + lowest.String()
}
