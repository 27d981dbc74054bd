package talossim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	configconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"ichor.dev/ichor/pkg/imageref"
)

// Bootstrap manifests: a Talos control plane renders, from its machine config, the Kubernetes objects
// a new cluster needs (Talos's ManifestController) as Manifest resources in the controlplane namespace,
// one per file ("00-kubelet-bootstrapping-token", "10-kube-proxy", …), and creates them in the cluster
// once (ManifestApplyController): an object that exists already is left alone, so a later config change
// (a new cluster.proxy.image) changes the Manifest resource and not the object, until something syncs
// the manifests — `talosctl upgrade-k8s` does, with server-side apply as field manager "talos".
//
// The simulator renders the manifests of what a simulated cluster has, with Talos's names and
// contents: the kubelets' bootstrap token and its bindings, the in-cluster kubeconfig, and kube-proxy
// (a DaemonSet that the scheduler binds to every node and the simulated kubelets run). CoreDNS, Flannel
// and the Talos API service account are not rendered: nothing here would run or serve them.

// Talos's names for the objects it applies.
const (
	manifestFieldManager  = "talos"
	inventoryAnnotation   = "config.k8s.io/owning-inventory"
	bootstrapInventoryID  = "talos-bootstrap-manifests-inventory"
	bootstrapTokenGroup   = "system:bootstrappers:nodes"
	kubeProxyManifestID   = "10-kube-proxy"
	kubeProxyName         = "kube-proxy"
	kubeconfigInClusterCM = "kubeconfig-in-cluster"
)

// renderedManifest is one Manifest resource's objects.
type renderedManifest struct {
	id      resource.ID
	objects []runtime.Object
}

// bootstrapManifests renders the bootstrap manifests of a control plane's config.
func bootstrapManifests(cfg talosconfig.Provider) ([]renderedManifest, error) {
	endpoint := clusterEndpoint(cfg)
	if cfg.Cluster() == nil || endpoint == nil {
		return nil, errors.New("machine config names no cluster")
	}

	token := cfg.Cluster().Token()

	manifests := []renderedManifest{
		{"00-kubelet-bootstrapping-token", []runtime.Object{&corev1.Secret{
			TypeMeta:   metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + token.ID(), Namespace: metav1.NamespaceSystem},
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: map[string]string{
				"token-id":                       token.ID(),
				"token-secret":                   token.Secret(),
				"usage-bootstrap-authentication": "true",
				"auth-extra-groups":              bootstrapTokenGroup,
			},
		}}},
		{"01-csr-node-bootstrap", []runtime.Object{clusterRoleBinding("system-bootstrap-node-bootstrapper", "system:node-bootstrapper",
			groupSubject(bootstrapTokenGroup), groupSubject(nodesGroup))}},
		{"01-csr-approver-role-binding", []runtime.Object{clusterRoleBinding("system-bootstrap-approve-node-client-csr",
			"system:certificates.k8s.io:certificatesigningrequests:nodeclient", groupSubject(bootstrapTokenGroup))}},
		{"01-csr-renewal-role-binding", []runtime.Object{clusterRoleBinding("system-bootstrap-node-renewal",
			"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", groupSubject(nodesGroup))}},
	}

	inCluster, err := kubeconfigInCluster(endpoint.String())
	if err != nil {
		return nil, err
	}

	manifests = append(manifests, renderedManifest{"11-kube-config-in-cluster", []runtime.Object{inCluster}})

	if proxy := cfg.K8sProxyConfig(); proxy != nil && proxy.Enabled() {
		args, err := proxyArgs(cfg, proxy)
		if err != nil {
			return nil, err
		}

		manifests = append(manifests, renderedManifest{kubeProxyManifestID, []runtime.Object{
			kubeProxyDaemonSet(proxy.Image(), args),
			&corev1.ServiceAccount{
				TypeMeta:   metav1.TypeMeta{Kind: "ServiceAccount", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: metav1.NamespaceSystem},
			},
			clusterRoleBinding(kubeProxyName, "system:node-proxier", rbacv1.Subject{
				Kind: rbacv1.ServiceAccountKind, Name: kubeProxyName, Namespace: metav1.NamespaceSystem,
			}),
		}})
	}

	return manifests, nil
}

func groupSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, Name: name, APIGroup: rbacv1.GroupName}
}

func clusterRoleBinding(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{Kind: "ClusterRoleBinding", APIVersion: rbacv1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   subjects,
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: role, APIGroup: rbacv1.GroupName},
	}
}

// kubeconfigInCluster is the kubeconfig that kube-proxy runs with: the cluster's endpoint (KubePrism is
// not simulated), authenticated by the pod's service-account token.
func kubeconfigInCluster(server string) (*corev1.ConfigMap, error) {
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		APIVersion:     "v1",
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: server, CertificateAuthority: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"service-account": {TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: "service-account"}},
		CurrentContext: "local",
	})
	if err != nil {
		return nil, err
	}

	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: kubeconfigInClusterCM, Namespace: metav1.NamespaceSystem},
		Data:       map[string]string{"kubeconfig": string(kubeconfig)},
	}, nil
}

// proxyArgs are kube-proxy's flags as Talos builds them: its defaults (nftables mode from Kubernetes
// 1.31 on), merged with cluster.proxy.extraArgs, which may not set the kubeconfig; sorted by flag.
func proxyArgs(cfg talosconfig.Provider, proxy configconfig.K8sProxyConfig) ([]string, error) {
	mode := proxy.Mode()
	if mode == "" {
		mode = "iptables"
		if v, err := semver.ParseTolerant(imageref.Tag(proxy.Image())); err == nil && v.GTE(semver.MustParse("1.31.0")) {
			mode = "nftables"
		}
	}

	args := map[string][]string{
		"cluster-cidr":           {strings.Join(prefixStrings(k8sNetwork(cfg).PodCIDRs()), ",")},
		"hostname-override":      {"$(NODE_NAME)"},
		"kubeconfig":             {"/etc/kubernetes/kubeconfig"},
		"proxy-mode":             {mode},
		"conntrack-max-per-core": {"0"},
	}

	for k, v := range proxy.ExtraArgs() {
		if k == "kubeconfig" {
			return nil, fmt.Errorf("extra arg %q is not allowed", k)
		}

		args[k] = v
	}

	var out []string

	for _, k := range slices.Sorted(maps.Keys(args)) {
		for _, v := range args[k] {
			out = append(out, fmt.Sprintf("--%s=%s", k, v))
		}
	}

	return out, nil
}

// kubeProxyDaemonSet is Talos's kube-proxy DaemonSet.
func kubeProxyDaemonSet(image string, args []string) *appsv1.DaemonSet {
	labels := map[string]string{"tier": "node", "k8s-app": kubeProxyName}
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}

	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{Kind: "DaemonSet", APIVersion: appsv1.SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:    kubeProxyName,
						Image:   image,
						Command: append([]string{"/usr/local/bin/kube-proxy"}, args...),
						Env: []corev1.EnvVar{
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
							{Name: "ssl-certs-host", MountPath: "/etc/ssl/certs", ReadOnly: true},
							{Name: "kubeconfig", MountPath: "/etc/kubernetes", ReadOnly: true},
						},
					}},
					HostNetwork:        true,
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: kubeProxyName,
					Tolerations: []corev1.Toleration{
						{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
						{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
					},
					Volumes: []corev1.Volume{
						hostPath("lib-modules", "/usr/lib/modules"),
						hostPath("ssl-certs-host", "/etc/ssl/certs"),
						{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: kubeconfigInClusterCM},
						}}},
					},
				},
			},
		},
	}
}

// manifestResources are the Manifest resources of a control plane's config.
func manifestResources(cfg talosconfig.Provider) ([]*k8s.Manifest, error) {
	rendered, err := bootstrapManifests(cfg)
	if err != nil {
		return nil, err
	}

	out := make([]*k8s.Manifest, 0, len(rendered))

	for _, m := range rendered {
		r := k8s.NewManifest(k8s.ControlPlaneNamespaceName, m.id)

		for _, obj := range m.objects {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				return nil, fmt.Errorf("manifest %s: %w", m.id, err)
			}

			r.TypedSpec().Items = append(r.TypedSpec().Items, k8s.SingleManifest{Object: u})
		}

		out = append(out, r)
	}

	return out, nil
}

// publishManifests puts the bootstrap manifests of a running control plane, and removes any other
// (from a worker, or one its config no longer renders).
func publishManifests(ctx context.Context, st state.State, v nodeView) error {
	want := map[resource.ID]bool{}

	if v.kubelet != nil && v.kubelet.controlPlane {
		manifests, err := manifestResources(v.active)
		if err != nil {
			return err
		}

		for _, m := range manifests {
			want[m.Metadata().ID()] = true

			if err := putResource(ctx, st, m); err != nil {
				return err
			}
		}
	}

	list, err := st.List(ctx, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ManifestType, "", resource.VersionUndefined))
	if err != nil {
		return err
	}

	for _, r := range list.Items {
		if !want[r.Metadata().ID()] {
			if err := removeResource(ctx, st, r.Metadata()); err != nil {
				return err
			}
		}
	}

	return nil
}

// applyBootstrapManifests creates the objects of cfg's bootstrap manifests that do not exist yet, as
// Talos's ManifestApplyController does: server-side apply as "talos", marked with Talos's inventory.
func applyBootstrapManifests(ctx context.Context, admin *rest.Config, cfg talosconfig.Provider) error {
	rendered, err := bootstrapManifests(cfg)
	if err != nil {
		return err
	}

	dc, err := discovery.NewDiscoveryClientForConfig(admin)
	if err != nil {
		return err
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		return err
	}

	for _, m := range rendered {
		for _, obj := range m.objects {
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				return err
			}

			u := &unstructured.Unstructured{Object: raw}
			gvk := u.GroupVersionKind()

			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("manifest %s: %s: %w", m.id, gvk.Kind, err)
			}

			var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
			if u.GetNamespace() != "" {
				ri = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
			}

			if _, err = ri.Get(ctx, u.GetName(), metav1.GetOptions{}); err == nil {
				continue
			} else if !apierrors.IsNotFound(err) {
				return err
			}

			u.SetAnnotations(map[string]string{inventoryAnnotation: bootstrapInventoryID})

			if _, err = ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: manifestFieldManager}); err != nil {
				return fmt.Errorf("manifest %s: creating %s %s: %w", m.id, gvk.Kind, u.GetName(), err)
			}
		}
	}

	return nil
}
