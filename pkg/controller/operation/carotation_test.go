package operation

import (
	"bytes"
	"context"
	stdx509 "crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/bundlestore"
	"ichor.dev/ichor/pkg/events/eventstest"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// The Talos API CA rotation against fake nodes whose trust is that of the
// config they run, and a stand-in for machineconfig that gives each node
// the config of the secrets in force after every reconcile.

func caRotation(name string, dry bool) *v1alpha1.TalosOperation {
	return started(name, v1alpha1.TalosOperationSpec{ClusterName: "demo", Type: v1alpha1.OperationCARotation,
		CARotation: &v1alpha1.CARotationParameters{Talos: ptr.To(true), DryRun: dry}})
}

// followTrust gives the fixture's nodes the Talos API trust in force now,
// and again after each reconcile but to those in lagging, as machineconfig
// would roll it out.
func (f *fixture) followTrust(lagging ...string) {
	follow := func(lagging []string) {
		in, err := bundlestore.Load(context.Background(), f.client, f.cluster())
		if err != nil {
			f.t.Fatalf("the secrets in force: %v", err)
		}
		for _, name := range f.names {
			if !slices.Contains(lagging, name) {
				f.node(name).Config = trustConfig(in, strings.HasPrefix(name, "cp-"))
			}
		}
	}
	follow(nil)
	f.react = func() { follow(lagging) }
}

// trustConfig is a config carrying in's Talos API trust, machine.ca with
// its key on a control plane.
func trustConfig(in *secretsbundle.Secrets, controlPlane bool) []byte {
	b64 := func(p []byte) string { return base64.StdEncoding.EncodeToString(p) }
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "version: v1alpha1\nmachine:\n  type: worker\n  ca:\n    crt: %s\n", b64(in.Certs.OS.Crt))
	if controlPlane {
		fmt.Fprintf(&cfg, "    key: %s\n", b64(in.Certs.OS.Key))
	}
	if len(in.TalosAccepted) > 0 {
		cfg.WriteString("  acceptedCAs:\n")
		for _, crt := range in.TalosAccepted {
			fmt.Fprintf(&cfg, "    - crt: %s\n", b64(crt))
		}
	}
	fmt.Fprintf(&cfg, "cluster:\n  ca:\n    crt: %s\n", b64(in.Certs.K8s.Crt))
	if controlPlane {
		fmt.Fprintf(&cfg, "    key: %s\n", b64(in.Certs.K8s.Key))
	}
	if len(in.KubernetesAccepted) > 0 {
		cfg.WriteString("  acceptedCAs:\n")
		for _, crt := range in.KubernetesAccepted {
			fmt.Fprintf(&cfg, "    - crt: %s\n", b64(crt))
		}
	}
	return []byte(cfg.String())
}

func (f *fixture) cluster() *v1alpha1.TalosCluster {
	f.t.Helper()
	var c v1alpha1.TalosCluster
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo"}, &c); err != nil {
		f.t.Fatal(err)
	}
	return &c
}

// bundleCA is the Talos API CA certificate of the bundle's Secret.
func (f *fixture) bundleCA() []byte {
	f.t.Helper()
	c := f.cluster()
	b, err := bundlestore.Load(context.Background(), f.client, &v1alpha1.TalosCluster{
		ObjectMeta: c.ObjectMeta, Spec: c.Spec, Status: v1alpha1.TalosClusterStatus{SecretsDigest: c.Status.SecretsDigest},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return b.Certs.OS.Crt
}

func (f *fixture) rotationSecret() *corev1.Secret {
	var s corev1.Secret
	if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: secretsbundle.RotationSecretName(f.cluster())}, &s); err != nil {
		return nil
	}
	return &s
}

// TestCARotationSurvivesACrashAtEveryWrite rotates the Talos API CA with
// the controller stopping before each of its status writes in turn: every
// node ends on the new CA alone, the bundle holds it, and nothing of the
// rotation is left.
func TestCARotationSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, caRotation("rotate", false))
			f.followTrust()
			old := f.bundleCA()
			f.failWrite = fail
			var seen []v1alpha1.CARotationPhase
			follow := f.react
			f.react = func() {
				follow()
				if r := f.cluster().Status.CARotation; r != nil && (len(seen) == 0 || seen[len(seen)-1] != r.Phase) {
					seen = append(seen, r.Phase)
				}
			}
			op := f.run("rotate")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			if got := fmt.Sprint(seen); got != "[AcceptNew IssueNew DropOld]" {
				t.Errorf("phases %s", got)
			}
			if len(op.Status.Steps) != 3*len(machineNames) {
				t.Errorf("%d steps, want %d", len(op.Status.Steps), 3*len(machineNames))
			}
			now := f.bundleCA()
			if bytes.Equal(now, old) {
				t.Fatal("the bundle still holds the old CA")
			}
			for _, name := range machineNames {
				cfg := string(f.node(name).Config)
				if !strings.Contains(cfg, base64.StdEncoding.EncodeToString(now)) || strings.Contains(cfg, "acceptedCAs") {
					t.Errorf("%s runs %s", name, cfg)
				}
			}
			if c := f.cluster(); c.Status.CARotation != nil || f.rotationSecret() != nil {
				t.Errorf("the rotation is left behind: %+v, Secret %v", c.Status.CARotation, f.rotationSecret() != nil)
			}
			if c := f.cluster().Status.Credentials; c == nil || c.Rotation != "rotate" || c.ServedAt != nil {
				t.Errorf("the new credentials are not on offer: %+v", c)
			}
		})
	}
	// One write starts the operation, one records each step (with the
	// previous one's end), one ends it.
	if total != 3*len(machineNames)+2 {
		t.Fatalf("%d status writes, want %d: the crash points were not all exercised", total, 3*len(machineNames)+2)
	}
}

// TestCARotationStopsAtANodeThatDoesNotTakeThePhase: a node that does not
// run the first phase's trust stops the rotation before the second phase;
// every node still trusts both CAs, and a new ca-rotation takes the
// rotation over, with the same new CA, once the node follows.
func TestCARotationStopsAtANodeThatDoesNotTakeThePhase(t *testing.T) {
	f := newFixture(t, caRotation("rotate", false))
	f.r.Options.StepTimeout = 5 * time.Second
	f.followTrust("cp-3")
	old := f.bundleCA()
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationFailed {
		t.Fatalf("ended %s, want Failed", op.Status.Phase)
	}
	for _, s := range op.Status.Steps {
		if s.Action != v1alpha1.ActionAcceptNewCA && s.Phase != v1alpha1.OperationPending {
			t.Errorf("step %s %s ran: %s", s.Name(), s.Phase, s.Message)
		}
	}
	c := f.cluster()
	if c.Status.CARotation == nil || c.Status.CARotation.Phase != v1alpha1.CARotationAcceptNew || !bytes.Equal(f.bundleCA(), old) {
		t.Fatalf("the cluster left phase AcceptNew: %+v", c.Status.CARotation)
	}
	secret := f.rotationSecret()
	if secret == nil {
		t.Fatal("the new CA's Secret is gone")
	}
	next := secret.Data["talos.crt"]
	for _, name := range machineNames {
		if name == "cp-3" {
			continue
		}
		cfg := string(f.node(name).Config)
		if !strings.Contains(cfg, base64.StdEncoding.EncodeToString(old)) || !strings.Contains(cfg, base64.StdEncoding.EncodeToString(next)) {
			t.Errorf("%s does not trust both CAs: %s", name, cfg)
		}
	}

	// cp-3 follows now; a second rotation takes over.
	again := caRotation("rotate-again", false)
	if err := f.client.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	f.followTrust()
	op = f.run("rotate-again")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("the second rotation ended %s: %+v", op.Status.Phase, op.Status)
	}
	if got := f.bundleCA(); !bytes.Equal(got, next) {
		t.Error("the second rotation did not finish with the first one's new CA")
	}
}

// TestCARotationDryRun says what each phase would change and changes
// nothing: no CA, no phase, no node.
func TestCARotationDryRun(t *testing.T) {
	f := newFixture(t, caRotation("rotate", true))
	f.followTrust()
	old := f.bundleCA()
	configs := map[string]string{}
	for _, name := range machineNames {
		configs[name] = string(f.node(name).Config)
	}
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	for _, s := range op.Status.Steps {
		if !strings.HasPrefix(s.Message, "dry run: ") {
			t.Errorf("step %s: %q", s.Name(), s.Message)
		}
	}
	if c := f.cluster(); c.Status.CARotation != nil || f.rotationSecret() != nil || !bytes.Equal(f.bundleCA(), old) {
		t.Errorf("a dry run changed the cluster: %+v", c.Status.CARotation)
	}
	for _, name := range machineNames {
		if string(f.node(name).Config) != configs[name] {
			t.Errorf("a dry run changed %s's config", name)
		}
	}
}

// bundleKubernetesCA is the Kubernetes CA certificate of the bundle's Secret.
func (f *fixture) bundleKubernetesCA() []byte {
	f.t.Helper()
	c := f.cluster()
	b, err := bundlestore.Load(context.Background(), f.client, &v1alpha1.TalosCluster{
		ObjectMeta: c.ObjectMeta, Spec: c.Spec, Status: v1alpha1.TalosClusterStatus{SecretsDigest: c.Status.SecretsDigest},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return b.Certs.K8s.Crt
}

// TestCARotationOfBothCAsSurvivesACrashAtEveryWrite rotates the Talos API
// CA and the Kubernetes CA together with the controller stopping before
// each of its status writes in turn: every node ends on the new CAs
// alone, the bundle holds both, status.kubernetesCA shows the new one, and
// nothing of the rotation is left.
func TestCARotationOfBothCAsSurvivesACrashAtEveryWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			op := caRotation("rotate", false)
			op.Spec.CARotation.Kubernetes = ptr.To(true)
			f := newFixture(t, op)
			f.followTrust()
			follow := f.react
			f.react = func() {
				follow()
				f.rebootstrapKubelets()
			}
			oldTalos, oldKube := f.bundleCA(), f.bundleKubernetesCA()
			f.failWrite = fail
			op = f.run("rotate")
			if fail == 0 {
				total = f.writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
			}
			newTalos, newKube := f.bundleCA(), f.bundleKubernetesCA()
			if bytes.Equal(newTalos, oldTalos) || bytes.Equal(newKube, oldKube) {
				t.Fatal("the bundle still holds an old CA")
			}
			for _, name := range machineNames {
				cfg := string(f.node(name).Config)
				if !strings.Contains(cfg, base64.StdEncoding.EncodeToString(newKube)) || strings.Contains(cfg, base64.StdEncoding.EncodeToString(oldKube)) ||
					strings.Contains(cfg, "acceptedCAs") {
					t.Errorf("%s runs %s", name, cfg)
				}
			}
			c := f.cluster()
			if c.Status.CARotation != nil || f.rotationSecret() != nil || c.Status.KubernetesCA != string(newKube) {
				t.Errorf("the rotation is left behind: %+v, Secret %v, status.kubernetesCA new: %v", c.Status.CARotation, f.rotationSecret() != nil,
					c.Status.KubernetesCA == string(newKube))
			}
			for _, s := range op.Status.Steps {
				if !strings.Contains(s.Message, "Talos API") || !strings.Contains(s.Message, "Kubernetes API answers a client certificate from the new CA") {
					t.Errorf("step %s: %q", s.Name(), s.Message)
				}
			}
		})
	}
	if total != 3*len(machineNames)+2 {
		t.Fatalf("%d status writes, want %d: the crash points were not all exercised", total, 3*len(machineNames)+2)
	}
}

// TestCARotationWaitsForEachKubeletToReportWithItsNewCertificate: in
// DropOld a kubelet whose client certificate from the new Kubernetes CA was
// issued but that has not reported with it since holds its step (and so
// the rotation, whose end disables the bootstrap token the kubelet fetches
// its certificate with) until it reports.
func TestCARotationWaitsForEachKubeletToReportWithItsNewCertificate(t *testing.T) {
	op := caRotation("rotate", false)
	op.Spec.CARotation.Kubernetes = ptr.To(true)
	f := newFixture(t, op)
	f.followTrust()
	heartbeat := func(name string, at time.Time) {
		node, err := f.kube.CoreV1().Nodes().Get(context.Background(), "node-"+name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(at)
		if _, err := f.kube.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat("cp-2", now.Add(-time.Minute))
	follow := f.react
	var held int
	f.react = func() {
		follow()
		f.rebootstrapKubelets()
		for _, s := range f.get("rotate").Status.Steps {
			if s.Machine != "cp-2" || s.Action != v1alpha1.ActionDropOldCA || !strings.Contains(s.Message, "has not reported with it yet") {
				continue
			}
			if held++; held == 3 {
				heartbeat("cp-2", f.clock)
			}
			if c := f.cluster(); c.Status.CARotation == nil || c.Status.CARotation.Phase != v1alpha1.CARotationDropOld {
				t.Errorf("the rotation left DropOld while cp-2's kubelet has not reported: %+v", c.Status.CARotation)
			}
		}
	}
	op = f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status)
	}
	if held < 3 {
		t.Fatalf("cp-2's DropOld step was held %d times, want it held until its kubelet reported", held)
	}
	for _, s := range op.Status.Steps {
		if s.Action == v1alpha1.ActionDropOldCA && !strings.Contains(s.Message, "its kubelet holding a client certificate from the new CA") {
			t.Errorf("step %s: %q", s.Name(), s.Message)
		}
	}
}

// TestCARotationTakeoverRotatesTheSameCAs: a ca-rotation may not take over
// a failed rotation of other CAs; it is refused before any step, naming
// what the cluster is in.
func TestCARotationTakeoverRotatesTheSameCAs(t *testing.T) {
	f := newFixture(t, caRotation("rotate", false))
	f.r.Options.StepTimeout = 5 * time.Second
	f.followTrust("cp-3")
	if op := f.run("rotate"); op.Status.Phase != v1alpha1.OperationFailed {
		t.Fatalf("ended %s, want Failed", op.Status.Phase)
	}
	both := caRotation("rotate-both", false)
	both.Spec.CARotation.Kubernetes = ptr.To(true)
	if err := f.client.Create(context.Background(), both); err != nil {
		t.Fatal(err)
	}
	op := f.run("rotate-both")
	if op.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(fmt.Sprint(op.Status.Conditions), "must rotate the same CAs") {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status.Conditions)
	}
}

// rebootstrapKubelets plays the kubelets of a cluster whose Kubernetes CA
// rotation dropped the old CA: each bootstraps a client certificate from
// the CA in force, a CSR the controller manager signs.
func (f *fixture) rebootstrapKubelets() {
	c := f.cluster()
	if r := c.Status.CARotation; r == nil || r.Phase != v1alpha1.CARotationDropOld {
		return
	}
	in, err := bundlestore.Load(context.Background(), f.client, c)
	if err != nil {
		f.t.Fatal(err)
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(in.Certs.K8s)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, name := range f.names {
		csrName := "kubelet-client-" + name
		if _, err := f.kube.CertificatesV1().CertificateSigningRequests().Get(context.Background(), csrName, metav1.GetOptions{}); err == nil {
			continue
		}
		kp, err := x509.NewKeyPair(ca, x509.CommonName("system:node:node-"+name), x509.Organization("system:nodes"),
			x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
		if err != nil {
			f.t.Fatal(err)
		}
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: csrName, CreationTimestamp: metav1.NewTime(f.clock)},
			Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName},
			Status:     certificatesv1.CertificateSigningRequestStatus{Certificate: kp.CrtPEM},
		}
		if _, err := f.kube.CertificatesV1().CertificateSigningRequests().Create(context.Background(), csr, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// TestCARotationSurvivesACrashAtEverySecretWrite rotates the Talos API CA
// with the controller stopping before each write of a Secret or of the
// cluster's status in turn — recording the new CAs' digest, storing them,
// recording the bundle's new digest, writing the bundle, ending the
// rotation, deleting the new CAs' Secret: each is resumed, none repeated
// with other CAs once they were stored, and the bundle ends holding the
// new CA under its recorded digest.
func TestCARotationSurvivesACrashAtEverySecretWrite(t *testing.T) {
	total := 0
	for fail := 0; fail == 0 || fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d lost", fail), func(t *testing.T) {
			f := newFixture(t, caRotation("rotate", false))
			f.followTrust()
			old := f.bundleCA()
			writes := 0
			var lost string
			f.beforeWrite = func(what string) error {
				if writes++; writes == fail {
					lost = what
					return errors.New("injected: the controller stopped before it could " + what)
				}
				return nil
			}
			stored := map[string]bool{}
			follow := f.react
			f.react = func() {
				follow()
				if s := f.rotationSecret(); s != nil {
					stored[string(s.Data["talos.crt"])] = true
				}
			}
			op := f.run("rotate")
			if fail == 0 {
				total = writes
			}
			if op.Status.Phase != v1alpha1.OperationSucceeded {
				t.Fatalf("lost %q: ended %s: %+v", lost, op.Status.Phase, op.Status)
			}
			now := f.bundleCA()
			if bytes.Equal(now, old) || !stored[string(now)] || len(stored) != 1 {
				t.Errorf("lost %q: the bundle's CA is new %v, was stored %v; %d new CAs were stored", lost, !bytes.Equal(now, old), stored[string(now)], len(stored))
			}
			c := f.cluster()
			var s corev1.Secret
			if err := f.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "demo-secrets"}, &s); err != nil {
				t.Fatal(err)
			}
			if c.Status.SecretsDigest != secretsbundle.Digest(s.Data[secretsbundle.BundleKey]) {
				t.Errorf("lost %q: status.secretsDigest is not the stored bundle's", lost)
			}
			if c.Status.CARotation != nil || f.rotationSecret() != nil {
				t.Errorf("lost %q: the rotation is left behind: %+v, Secret %v", lost, c.Status.CARotation, f.rotationSecret() != nil)
			}
		})
	}
	if total < 6 {
		t.Fatalf("%d writes: the crash points were not all exercised", total)
	}
}

// plantedCAs is a Secret of new CAs someone who may create Secrets makes
// in the place of a rotation's, as the controller makes its own, and with
// the operation's UID, which anyone who may read operations knows.
func plantedCAs(t *testing.T) *corev1.Secret {
	t.Helper()
	ca, err := secrets.NewTalosCA(now)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-secrets-ca-next", Namespace: ns,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "ichor-controller", "ichor.dev/cluster": "demo"},
			Annotations: map[string]string{"ichor.dev/ca-rotation": "uid-rotate"}},
		Type: v1alpha1.SecretTypeCARotation,
		Data: map[string][]byte{"talos.crt": ca.CrtPEM, "talos.key": ca.KeyPEM},
	}
}

// followTrustWhileItLoads is followTrust for a cluster whose secrets may
// be refused: nodes keep their config then. It fails the test if a node is
// ever given the CA of bad.
func (f *fixture) followTrustWhileItLoads(bad *corev1.Secret) {
	planted := base64.StdEncoding.EncodeToString(bad.Data["talos.crt"])
	f.react = func() {
		if in, err := bundlestore.Load(context.Background(), f.client, f.cluster()); err == nil {
			for _, name := range f.names {
				f.node(name).Config = trustConfig(in, strings.HasPrefix(name, "cp-"))
			}
		}
		for _, name := range f.names {
			if strings.Contains(string(f.node(name).Config), planted) {
				f.t.Fatalf("%s was given the planted CA", name)
			}
		}
	}
	f.react()
}

// warnedCluster reports whether a Warning Event with reason was recorded.
func (f *fixture) warnedCluster(reason string) bool {
	for {
		select {
		case e := <-f.r.Recorder.(*eventstest.Recorder).Events:
			if strings.HasPrefix(e, corev1.EventTypeWarning+" "+reason+" ") {
				return true
			}
		default:
			return false
		}
	}
}

// TestCARotationRefusesPlantedCAs: new CAs planted before a rotation
// starts, looking as the controller's own, are neither used nor deleted:
// the rotation stops before any phase, saying why, and the bundle and
// every node keep their CA.
func TestCARotationRefusesPlantedCAs(t *testing.T) {
	f := newFixture(t, caRotation("rotate", false))
	bad := plantedCAs(t)
	if err := f.client.Create(context.Background(), bad.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	f.followTrustWhileItLoads(bad)
	old := f.bundleCA()
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(fmt.Sprint(op.Status.Conditions), "Secret ns/demo-secrets-ca-next exists but does not hold new CAs of a rotation of this cluster") {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status.Conditions)
	}
	if !f.warnedCluster(v1alpha1.ClusterReasonSecretConflict) {
		t.Error("no Warning Event says why")
	}
	if c := f.cluster(); c.Status.CARotation != nil || !bytes.Equal(f.bundleCA(), old) {
		t.Errorf("the cluster moved: %+v", c.Status.CARotation)
	}
	if s := f.rotationSecret(); s == nil || !bytes.Equal(s.Data["talos.crt"], bad.Data["talos.crt"]) {
		t.Error("the planted Secret was deleted or changed")
	}
}

// TestCARotationRefusesCAsPlantedAsItStarts: new CAs planted between the
// rotation recording its CAs' digest and storing them are never used: the
// rotation stops, the cluster's secrets are refused rather than read with
// them, and a ca-rotation taking it over once they are deleted rotates to
// CAs of its own.
func TestCARotationRefusesCAsPlantedAsItStarts(t *testing.T) {
	f := newFixture(t, caRotation("rotate", false))
	bad := plantedCAs(t)
	f.beforeWrite = func(what string) error {
		if what == "create Secret demo-secrets-ca-next" {
			f.beforeWrite = nil
			return f.client.Create(context.Background(), bad.DeepCopy())
		}
		return nil
	}
	f.followTrustWhileItLoads(bad)
	old := f.bundleCA()
	op := f.run("rotate")
	if op.Status.Phase != v1alpha1.OperationFailed || !strings.Contains(fmt.Sprint(op.Status.Conditions), "does not hold the new CAs ichor-controller generated for this rotation") {
		t.Fatalf("ended %s: %+v", op.Status.Phase, op.Status.Conditions)
	}
	if !f.warnedCluster(v1alpha1.ClusterReasonSecretDigestMismatch) {
		t.Error("no Warning Event says why")
	}
	_, err := bundlestore.Load(context.Background(), f.client, f.cluster())
	var refusal *bundlestore.Refusal
	if !errors.As(err, &refusal) || refusal.Reason != v1alpha1.ClusterReasonSecretDigestMismatch {
		t.Fatalf("the secrets in force with the planted CAs: %v", err)
	}
	if s := f.rotationSecret(); s == nil || !bytes.Equal(s.Data["talos.crt"], bad.Data["talos.crt"]) || !bytes.Equal(f.bundleCA(), old) {
		t.Fatal("the planted Secret was deleted or changed, or the bundle was")
	}

	// An admin deletes it; a new ca-rotation takes the rotation over.
	if err := f.client.Delete(context.Background(), f.rotationSecret()); err != nil {
		t.Fatal(err)
	}
	again := caRotation("rotate-again", false)
	if err := f.client.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	if op := f.run("rotate-again"); op.Status.Phase != v1alpha1.OperationSucceeded {
		t.Fatalf("the takeover ended %s: %+v", op.Status.Phase, op.Status)
	}
	if got := f.bundleCA(); bytes.Equal(got, old) || bytes.Equal(got, bad.Data["talos.crt"]) {
		t.Error("the bundle does not hold a CA of the rotation's own")
	}
}
