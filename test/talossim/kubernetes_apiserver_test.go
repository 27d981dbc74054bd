package talossim

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestAPIServerFollowsConfig: a no-reboot apply of cluster.apiServer extraArgs restarts the cluster's
// kube-apiserver with them, and the control plane's kube-apiserver mirror pod at the new config
// version shows up only once the restarted process serves: a NodePort outside the default range is
// refused before and accepted as soon as that pod is there.
func TestAPIServerFollowsConfig(t *testing.T) {
	t.Parallel()

	ctx, cl, _, admin, kube := bootstrappedControlPlane(t, "127.0.2.44")

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "high-port", Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
			{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 40050},
		}},
	}
	if _, err := kube.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc.DeepCopy(), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("NodePort 40050 with the default range: %v, want Invalid", err)
	}

	changed := patch(t, cl.cp, `cluster:
  apiServer:
    extraArgs:
      service-node-port-range: 40000-40100
`)
	if _, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: changed, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatalf("apply: %v", err)
	}

	r, err := safe.StateGetByID[*k8s.APIServerConfig](ctx, admin.COSI, k8s.APIServerConfigID)
	if err != nil {
		t.Fatal(err)
	}

	version := r.Metadata().Version().String()

	pollUntil(t, ctx, "the kube-apiserver mirror pod at config version "+version, func() (bool, error) {
		p, err := kube.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "kube-apiserver-cp-1", metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // restarting
		}

		return p.Annotations[constants.AnnotationStaticPodConfigVersion] == version && podReady(p), nil
	})

	if _, err := kube.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("NodePort 40050 once the mirror pod runs the new range: %v", err)
	}
}

// TestAPIServerSpecFlags: extra args override the simulator's flags but for its plumbing, and a path
// inside an extraVolume is read from the simulated host, where the trusted roots are written.
func TestAPIServerSpecFlags(t *testing.T) {
	t.Parallel()

	s := apiServerSpec{
		args: map[string][]string{
			"oidc-ca-file":       {"/etc/ssl/certs/ca-certificates.crt"},
			"authorization-mode": {"Node,RBAC,Webhook"},
			"etcd-servers":       {"https://10.0.0.1:2379"},
			"audit-policy-file":  {"/etc/kubernetes/audit.yaml"},
		},
		mounts: map[string]string{"/etc/ssl/certs": "/etc/ssl/certs"},
		roots:  "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----",
	}
	host := t.TempDir()

	got := s.flags([]string{"--etcd-servers=https://127.0.0.1:1", "--authorization-mode=Node,RBAC", "--profiling=false"}, host)
	want := []string{
		"--etcd-servers=https://127.0.0.1:1", "--profiling=false",
		"--audit-policy-file=/etc/kubernetes/audit.yaml",
		"--authorization-mode=Node,RBAC,Webhook",
		"--oidc-ca-file=" + filepath.Join(host, "/etc/ssl/certs/ca-certificates.crt"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("flags\n got %q\nwant %q", got, want)
	}

	if err := s.writeHost(host); err != nil {
		t.Fatal(err)
	}

	if b, err := os.ReadFile(filepath.Join(host, hostTrustedRoots)); err != nil || string(b) != s.roots {
		t.Errorf("host trust bundle %q, %v", b, err)
	}

	if got, want := apiServerSpecOf(nil).hostPath(host, "/system/secrets/kubernetes/kube-apiserver/ca.crt"),
		filepath.Join(host, "/system/secrets/kubernetes/kube-apiserver/ca.crt"); got != want {
		t.Errorf("Talos's own secrets mount: %s, want %s", got, want)
	}

	other := s
	other.roots = ""
	if other.key() == s.key() {
		t.Error("a change of the trusted roots alone does not change the spec")
	}
}
