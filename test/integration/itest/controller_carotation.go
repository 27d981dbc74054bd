package itest

import (
	"archive/zip"
	"bytes"
	"context"
	stdx509 "crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
	"ichor.dev/ichor/pkg/secretsbundle"
	"ichor.dev/ichor/pkg/workload"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/talossim"
)

// caRotation: an admin rotates demo's Talos API and Kubernetes CAs. An
// operator may not start one; a dry run changes nothing; the rotation moves
// every node through Talos's three phases (the controller stopped and
// started again in the second) while kubectl keeps working, with a client
// certificate from the new Kubernetes CA throughout and from the old one
// until it is dropped; kubelets ask for serving certificates again, from
// the new CA. Afterwards talosctl with a talosconfig from the old CA is
// refused, one downloaded afterwards works, the bundle holds the new CAs
// and nothing of the rotation is left.
func (d *DemoCluster) CARotation(t *testing.T) {
	ctx := d.Ctx
	talosctl := d.Talosctl(t)
	oldConfig := d.DownloadReaderTalosconfig(t)
	if out, err := talosctl(oldConfig, "version"); err != nil {
		t.Fatalf("talosctl version before the rotation: %v\n%s", err, out)
	}
	kube := kubernetes.NewForConfigOrDie(CP.AdminConfig)
	bundleCA := func() []byte {
		s, err := kube.CoreV1().Secrets(d.Ns).Get(ctx, "demo-secrets", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data[secretsbundle.BundleKey]
	}
	before := bundleCA()

	// An operator may create one, not start it.
	d.CreateOperation(t, Operator, "rotate-by-operator", "clusterName: demo\ntype: ca-rotation\ncaRotation: {talos: true}")
	out, err := CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosOperation"}`),
		append(Operator, "create", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosoperations/rotate-by-operator/start", "-f", "-")...)
	if err == nil || !strings.Contains(out+err.Error(), "forbidden") || !strings.Contains(out+err.Error(), `subresource "ca-rotation"`) {
		t.Errorf("an operator started a ca-rotation: %v\n%s", err, out)
	}
	if out, err := CP.KubectlWithInput(ctx, []byte("apiVersion: ichor.dev/v1alpha1\nkind: TalosOperation\nmetadata: {name: rotate-nothing, namespace: "+d.Ns+"}\nspec: {clusterName: demo, type: ca-rotation, caRotation: {talos: false}}\n"),
		append(Admin, "create", "-f", "-")...); err == nil || !strings.Contains(out+err.Error(), "spec.caRotation: Required value: a ca-rotation replaces the Talos API CA (talos: true), the Kubernetes CA (kubernetes: true), or both") {
		t.Errorf("a ca-rotation of no CA: %v\n%s", err, out)
	}

	// There are no new credentials before a rotation completed.
	credentials := "/apis/ichor.dev/v1alpha1/namespaces/" + d.Ns + "/talosclusters/demo/credentials"
	if out, err := CP.Kubectl(ctx, append(Admin, "get", "--raw", credentials)...); err == nil ||
		!strings.Contains(out+err.Error(), "no CA rotation of TalosCluster demo has completed") {
		t.Errorf("the credentials before any rotation: %v, want a conflict saying why\n%s", err, out)
	}

	// A dry run says what each phase would do, and does nothing.
	d.CreateOperation(t, Admin, "rotate-dry", "clusterName: demo\ntype: ca-rotation\ncaRotation: {talos: true, dryRun: true}")
	d.StartOperation(t, Admin, "rotate-dry")
	op := d.WaitOperationEnds(t, "rotate-dry", v1alpha1.OperationSucceeded)
	if len(op.Status.Steps) != 3*len(d.Nodes) || !strings.Contains(op.Status.Steps[0].Message, "dry run: machine.acceptedCAs gets the new Talos API CA") {
		t.Errorf("the dry run's steps: %s", DescribeOperation(op))
	}
	if c := GetCluster(t, d.Ns, "demo"); c.Status.CARotation != nil || !bytes.Equal(bundleCA(), before) {
		t.Errorf("a dry run changed the cluster: %+v", c.Status.CARotation)
	}

	// Kubelets ask for serving certificates, which Ichor's approver
	// decides; after the rotation they ask again, from the new CA.
	MustKubectl(ctx, t, append(Admin, "-n", d.Ns, "patch", "taloscluster", "demo", "--type=merge", "-p",
		`{"spec":{"security":{"kubeletServingCertificates":{"enabled":true}}}}`)...)
	d.WaitServingCertificates(t, OldBundleCA(t, before))

	// The rotation of both CAs; the controller is stopped once in the
	// second phase. At each phase kubectl works with a kubeconfig whose
	// client certificate comes from the new Kubernetes CA, trusting both
	// (as status.kubernetesCA has them meanwhile); one from the old CA
	// works until the old CA is dropped.
	oldBundle, err := secretsbundle.Parse(before)
	if err != nil {
		t.Fatal(err)
	}
	kubeDir := t.TempDir()
	// Each phase restarts kube-apiserver, which takes the simulator longer
	// than a node's reboot (what the suite's step timeout is cut for); the
	// product's default is 15 minutes.
	rotationTune := func(o *ctrlcmd.Options) {
		d.Tune(o)
		o.OperationStepTimeout = 2 * time.Minute
	}
	d.Controller.Stop()
	d.Controller = RunController(d.Parent, rotationTune)
	defer func() {
		d.Controller.Stop()
		d.Controller = RunController(d.Parent, d.Tune)
	}()
	d.CreateOperation(t, Admin, "rotate-cas", "clusterName: demo\ntype: ca-rotation\ncaRotation: {talos: true, kubernetes: true}")
	d.StartOperation(t, Admin, "rotate-cas")
	var seen []v1alpha1.CARotationPhase
	var newKubeconfig, oldKubeconfig string
	restarted := false
	err = wait.PollUntilContextTimeout(ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		c := GetCluster(t, d.Ns, "demo")
		r := c.Status.CARotation
		if r == nil {
			return c.Status.Credentials != nil && c.Status.Credentials.Rotation == "rotate-cas", nil
		}
		if len(seen) > 0 && seen[len(seen)-1] == r.Phase {
			return false, nil
		}
		if newKubeconfig == "" {
			// The controller records the new CAs' digest in the phase
			// before it stores them: the Secret follows.
			next, err := kube.CoreV1().Secrets(d.Ns).Get(ctx, "demo-secrets-ca-next", metav1.GetOptions{})
			if apierrors.IsNotFound(err) && r.Phase == v1alpha1.CARotationAcceptNew {
				return false, nil
			}
			if err != nil {
				t.Fatalf("the new CAs' Secret in phase %s: %v", r.Phase, err)
			}
			newCA := &x509.PEMEncodedCertificateAndKey{Crt: next.Data["kubernetes.crt"], Key: next.Data["kubernetes.key"]}
			trust := append(slices.Clone(oldBundle.Certs.K8s.Crt), newCA.Crt...)
			newKubeconfig = WriteKubeconfig(t, kubeDir, "new", d.Endpoint, newCA, trust)
			oldKubeconfig = WriteKubeconfig(t, kubeDir, "old", d.Endpoint, oldBundle.Certs.K8s, trust)
		}
		seen = append(seen, r.Phase)
		if out, err := KubectlGetNodes(ctx, newKubeconfig, len(d.Nodes)); err != nil {
			t.Errorf("phase %s: kubectl with a client certificate of the new Kubernetes CA: %v\n%s", r.Phase, err, out)
		}
		if r.Phase != v1alpha1.CARotationDropOld {
			if out, err := KubectlGetNodes(ctx, oldKubeconfig, len(d.Nodes)); err != nil {
				t.Errorf("phase %s: kubectl with a client certificate of the old Kubernetes CA: %v\n%s", r.Phase, err, out)
			}
		}
		if r.Phase == v1alpha1.CARotationIssueNew && !restarted {
			d.Controller.Stop()
			d.Controller = RunController(d.Parent, rotationTune)
			restarted = true
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the rotation did not end (phases seen %v): %v", seen, err)
	}
	op = d.WaitOperationEnds(t, "rotate-cas", v1alpha1.OperationSucceeded)
	for _, s := range op.Status.Steps {
		if s.Phase != v1alpha1.OperationSucceeded || !strings.Contains(s.Message, "answering a client certificate from the new CA") ||
			!strings.Contains(s.Message, "the Kubernetes API answers a client certificate from the new CA") {
			t.Errorf("step %s: %s %s", s.Name(), s.Phase, s.Message)
		}
	}
	if len(seen) < 2 || seen[0] != v1alpha1.CARotationAcceptNew || seen[1] != v1alpha1.CARotationIssueNew || !restarted {
		t.Errorf("phases seen %v (controller restarted in IssueNew: %v)", seen, restarted)
	}
	WaitEventSaying(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, v1alpha1.EventCARotated, "rotated the Talos API and Kubernetes CAs")
	c := GetCluster(t, d.Ns, "demo")
	rotated, err := secretsbundle.Parse(bundleCA())
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.CARotation != nil || bytes.Equal(rotated.Certs.OS.Crt, oldBundle.Certs.OS.Crt) || bytes.Equal(rotated.Certs.K8s.Crt, oldBundle.Certs.K8s.Crt) ||
		c.Status.KubernetesCA != string(rotated.Certs.K8s.Crt) {
		t.Errorf("after the rotation: status %+v; the bundle and status.kubernetesCA must hold the new CAs", c.Status.CARotation)
	}
	if _, err := kube.CoreV1().Secrets(d.Ns).Get(ctx, "demo-secrets-ca-next", metav1.GetOptions{}); err == nil {
		t.Error("the new CAs' own Secret outlived the rotation")
	}
	d.WaitServingCertificates(t, rotated.Certs.K8s.Crt)
	// The old Kubernetes CA is refused; the new one works.
	if out, err := KubectlGetNodes(ctx, oldKubeconfig, len(d.Nodes)); err == nil || !strings.Contains(out, "Unauthorized") {
		t.Errorf("kubectl with a client certificate of the old Kubernetes CA after the rotation: %v, want Unauthorized\n%s", err, out)
	}
	if out, err := KubectlGetNodes(ctx, newKubeconfig, len(d.Nodes)); err != nil {
		t.Errorf("kubectl with a client certificate of the new Kubernetes CA after the rotation: %v\n%s", err, out)
	}

	// The old talosconfig no longer trusts the nodes; a new one works.
	if out, err := talosctl(oldConfig, "version"); err == nil || !strings.Contains(out, "certificate signed by unknown authority") {
		t.Errorf("talosctl with the old talosconfig after the rotation: %v, want an unknown authority\n%s", err, out)
	}
	newConfig := d.DownloadReaderTalosconfig(t)
	if out, err := talosctl(newConfig, "version"); err != nil || !strings.Contains(out, "Tag:") {
		t.Errorf("talosctl with a talosconfig downloaded after the rotation: %v\n%s", err, out)
	}
	// An operator may not take the new credentials; an admin does, once.
	if out, err := CP.Kubectl(ctx, append(Operator, "get", "--raw", credentials)...); err == nil || !strings.Contains(out+err.Error(), "Forbidden") ||
		!strings.Contains(out+err.Error(), "talosclusters/credentials") {
		t.Errorf("an operator downloaded the new admin credentials: %v\n%s", err, out)
	}
	dir := t.TempDir()
	zipped := filepath.Join(dir, "demo-credentials.zip")
	RunIchor(ctx, t, nil, "carol", "ichor:admin", "--namespace="+d.Ns, "download", "credentials", "demo", "-O", zipped).
		Ok(t, "ichor download credentials")
	archive, err := os.ReadFile(zipped)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(zipped); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v)", zipped, fi.Mode(), err)
	}
	files := UnzipFiles(t, archive)
	for _, name := range []string{"talosconfig", "kubeconfig"} {
		if files[name] == nil {
			t.Fatalf("the credentials archive has no %s (it has %d files)", name, len(files))
		}
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := talosctl(filepath.Join(dir, "talosconfig"), "etcd", "snapshot", filepath.Join(dir, "db.snapshot")); err != nil {
		t.Errorf("talosctl etcd snapshot with the new admin talosconfig: %v\n%s", err, out)
	}
	if out, err := KubectlGetNodes(ctx, filepath.Join(dir, "kubeconfig"), len(d.Nodes)); err != nil {
		t.Errorf("kubectl get nodes with the new admin kubeconfig: %v\n%s", err, out)
	}
	WaitEventSaying(ctx, t, d.Ns, "demo", corev1.EventTypeNormal, "Downloaded", "carol downloaded the new admin credentials of TalosCluster demo")
	if r := RunIchor(ctx, t, nil, "carol", "ichor:admin", "--namespace="+d.Ns, "download", "credentials", "demo", "-O", filepath.Join(dir, "again.zip")); r.Code == 0 ||
		!strings.Contains(r.Stderr, "were downloaded by carol") || !strings.Contains(r.Stderr, "served once") {
		t.Errorf("a second download of the new admin credentials: exit %d, want a conflict saying why\n%s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "again.zip")); err == nil {
		t.Error("a refused download left a file")
	}
	if c := GetCluster(t, d.Ns, "demo").Status.Credentials; c == nil || c.ServedTo != "carol" || c.Rotation != "rotate-cas" {
		t.Errorf("the cluster's record of its new credentials: %+v", c)
	}

	// The sealed copy is made again from the rotated bundle, by someone
	// who may read it (no Ichor role may), and break-glass works from it.
	home := t.TempDir()
	env := []string{"HOME=" + home, "ICHOR_PASSPHRASE=correct horse battery staple"}
	RunIchor(ctx, t, env, "carol", "ichor:admin", "--namespace="+d.Ns, "init", "demo", "--reseal").
		Fails(t, "a reseal by an Ichor admin", "which no Ichor role holds")
	RunIchor(ctx, t, env, "", "", "--namespace="+d.Ns, "init", "demo", "--reseal").Ok(t, "ichor init --reseal")
	glass := filepath.Join(home, "talosconfig")
	RunIchor(ctx, t, env, "", "", "--kubeconfig=/nonexistent", "break-glass", "talosconfig", "demo",
		"--endpoints", d.Nodes["cp-1"].Addr(), "-O", glass).Ok(t, "break-glass talosconfig from the resealed bundle")
	if out, err := talosctl(glass, "version"); err != nil || !strings.Contains(out, "Tag:") {
		t.Errorf("talosctl with a break-glass talosconfig after the rotation: %v\n%s", err, out)
	}

	// The nodes kept running through it, and the controller still manages them.
	WaitClusterFor(ctx, t, d.Ns, "demo", ClusterWait, v1alpha1.ClusterConditionReady, metav1.ConditionTrue, v1alpha1.ClusterReasonReady)
	for name := range d.Nodes {
		m := GetMachine(t, d.Ns, name)
		if !meta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.MachineConditionReady) {
			t.Errorf("%s after the rotation: %+v", name, m.Status.Conditions)
		}
	}
}

// DownloadReaderTalosconfig saves a reader talosconfig of demo, downloaded
// by an operator, and returns its path.
func (d *DemoCluster) DownloadReaderTalosconfig(t *testing.T) string {
	t.Helper()
	out, err := CP.Kubectl(d.Ctx, append(Operator, "get", "--raw", "/apis/ichor.dev/v1alpha1/namespaces/"+d.Ns+"/talosclusters/demo/talosconfig-reader")...)
	if err != nil {
		t.Fatalf("download a reader talosconfig: %v", err)
	}
	file := filepath.Join(t.TempDir(), "talosconfig")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// Talosctl runs the official talosctl against cp-1 with a talosconfig.
func (d *DemoCluster) Talosctl(t *testing.T) func(talosconfig string, args ...string) (string, error) {
	return TalosctlOn(d.Ctx, t, d.Nodes["cp-1"])
}

// TalosctlOn runs the official talosctl of node's version against it with a talosconfig,
// in the talosconfig's directory (its HOME), and returns what it printed.
func TalosctlOn(ctx context.Context, t *testing.T, node *talossim.Node) func(talosconfig string, args ...string) (string, error) {
	bin, err := proc.TalosctlBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return func(talosconfig string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		dir := filepath.Dir(talosconfig)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, proc.TalosctlOf(node.Version())), append([]string{"--talosconfig", talosconfig, "--nodes", HostOf(node)}, args...)...)
		cmd.Dir, cmd.Env = dir, []string{"HOME=" + dir}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String() + stderr.String(), err
	}
}

// GetCluster reads TalosCluster name.
func GetCluster(t *testing.T, ns, name string) *v1alpha1.TalosCluster {
	t.Helper()
	c, err := APIClient(t).IchorV1alpha1().TalosClusters(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// UnzipFiles reads a zip archive's files by name.
func UnzipFiles(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("not a zip archive: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[f.Name] = b
	}
	return out
}

// WriteKubeconfig writes a kubeconfig for endpoint into dir, trusting the
// PEM CAs trust, with a system:masters client certificate from signer.
func WriteKubeconfig(t *testing.T, dir, name, endpoint string, signer *x509.PEMEncodedCertificateAndKey, trust []byte) string {
	t.Helper()
	rc, err := workload.ClientConfig(&secrets.Bundle{Certs: &secrets.Certs{K8s: signer}}, endpoint,
		workload.Identity{User: "rotation-test-" + name, Groups: []string{workload.MastersGroup}}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["demo"] = &clientcmdapi.Cluster{Server: endpoint, CertificateAuthorityData: trust}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: name}
	cfg.CurrentContext = name
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// KubectlGetNodes runs the real kubectl get nodes with kubeconfig, retrying
// for a while a kube-apiserver that restarts (a CA rotation restarts it),
// and wants want Nodes.
func KubectlGetNodes(ctx context.Context, kubeconfig string, want int) (string, error) {
	var out []byte
	var err error
	for deadline := time.Now().Add(45 * time.Second); ; {
		cmd := exec.CommandContext(ctx, filepath.Join(CP.BinDir, "kubectl"), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name")
		cmd.Env = []string{"HOME=" + filepath.Dir(kubeconfig)}
		out, err = cmd.CombinedOutput()
		if err == nil && strings.Count(string(out), "node/") != want {
			err = fmt.Errorf("%d Nodes, want %d", strings.Count(string(out), "node/"), want)
		}
		if err == nil || strings.Contains(string(out), "Unauthorized") || time.Now().After(deadline) {
			return string(out), err
		}
		select {
		case <-ctx.Done():
			return string(out), ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// OldBundleCA is the Kubernetes CA certificate of a bundle's YAML.
func OldBundleCA(t *testing.T, bundle []byte) []byte {
	t.Helper()
	b, err := secretsbundle.Parse(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return b.Certs.K8s.Crt
}

// WaitServingCertificates waits until every node of demo holds an issued
// kubelet serving certificate from the Kubernetes CA ca, approved (by
// Ichor's approver, the only one of the demo cluster).
func (d *DemoCluster) WaitServingCertificates(t *testing.T, ca []byte) {
	t.Helper()
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	var have map[string]bool
	err := wait.PollUntilContextTimeout(d.Ctx, ControllerPoll, ClusterWait, true, func(ctx context.Context) (bool, error) {
		rc, err := d.Kube.WaitReady(ctx, d.Endpoint)
		if err != nil {
			return false, nil //nolint:nilerr // restarting
		}
		csrs, err := kubernetes.NewForConfigOrDie(rc).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // restarting
		}
		have = map[string]bool{}
		for _, csr := range csrs.Items {
			if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || len(csr.Status.Certificate) == 0 {
				continue
			}
			block, _ := pem.Decode(csr.Status.Certificate)
			if block == nil {
				continue
			}
			cert, err := stdx509.ParseCertificate(block.Bytes)
			if err != nil {
				continue
			}
			if _, err := cert.Verify(stdx509.VerifyOptions{Roots: pool, KeyUsages: []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}}); err == nil {
				have[strings.TrimPrefix(csr.Spec.Username, "system:node:")] = true
			}
		}
		return len(have) == len(d.Nodes), nil
	})
	if err != nil {
		t.Fatalf("kubelet serving certificates of the CA: %d of %d nodes have one (%v): %v", len(have), len(d.Nodes), have, err)
	}
}
