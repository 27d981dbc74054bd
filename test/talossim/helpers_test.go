package talossim

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// testTimeout bounds every wait in a test; generous for -race on a 2-core machine.
const testTimeout = 60 * time.Second

// testContext returns a context cancelled at test end or after testTimeout.
func testContext(t *testing.T) context.Context {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)

	return ctx
}

// startNode starts a simulated node that is stopped at test end.
func startNode(t *testing.T, opts Options) *Node {
	t.Helper()

	n, err := Start(testContext(t), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}

	t.Cleanup(n.Stop)

	return n
}

// newClient builds a machinery client for the node with tlsCfg, closed at test end.
func newClient(t *testing.T, n *Node, tlsCfg *tls.Config) *client.Client {
	t.Helper()

	c, err := client.New(testContext(t), client.WithEndpoints(n.Addr()), client.WithTLSConfig(tlsCfg))
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c
}

// pinnedClient connects the way `talosctl --cert-fingerprint` does: no CA, SPKI fingerprint pinning.
func pinnedClient(t *testing.T, n *Node, fingerprint string) *client.Client {
	t.Helper()

	fp, err := x509.ParseFingerprint(fingerprint)
	if err != nil {
		t.Fatalf("ParseFingerprint: %v", err)
	}

	return newClient(t, n, &tls.Config{InsecureSkipVerify: true, VerifyConnection: x509.MatchSPKIFingerprints(fp)}) //nolint:gosec
}

// certClient connects with mutual TLS, trusting caPEM and presenting cert.
func certClient(t *testing.T, n *Node, caPEM []byte, cert *x509.PEMEncodedCertificateAndKey) *client.Client {
	t.Helper()

	pool := stdx509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("bad CA PEM")
	}

	tlsCfg := &tls.Config{RootCAs: pool}

	if cert != nil {
		kp, err := tls.X509KeyPair(cert.Crt, cert.Key)
		if err != nil {
			t.Fatalf("X509KeyPair: %v", err)
		}

		tlsCfg.Certificates = []tls.Certificate{kp}
	}

	return newClient(t, n, tlsCfg)
}

// roleCert mints a client certificate for roles from the bundle's OS CA, like talosctl config new.
func roleCert(t *testing.T, bundle *secrets.Bundle, roles ...role.Role) *x509.PEMEncodedCertificateAndKey {
	t.Helper()

	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), bundle.Certs.OS, role.MakeSet(roles...), time.Hour)
	if err != nil {
		t.Fatalf("NewAdminCertificateAndKey: %v", err)
	}

	return cert
}

// testCluster is a generated cluster: its secrets bundle and control plane and worker configs.
type testCluster struct {
	bundle *secrets.Bundle
	cp     []byte
	worker []byte
}

// sharedCluster generates the cluster once per test binary: key generation dominates test time under -race,
// and nodes never share state through it.
var sharedCluster = sync.OnceValues(generateCluster)

// newCluster returns the shared generated cluster, failing the test if generation failed.
func newCluster(t *testing.T) *testCluster {
	t.Helper()

	cl, err := sharedCluster()
	if err != nil {
		t.Fatalf("generating cluster: %v", err)
	}

	return cl
}

// talos1_13KubernetesVersion is the default Kubernetes version of Talos v1.13.0 (machinery v1.13.0's
// constants.DefaultKubernetesVersion), which the tests' configs run; machinery's own default is the
// one of the Talos release it comes with.
const talos1_13KubernetesVersion = "1.36.0"

// generateCluster makes secrets and configs for Talos v1.13 installing to /dev/sda.
func generateCluster() (*testCluster, error) {
	return generateClusterAt("https://127.0.0.1:6443")
}

// generateClusterAt is generateCluster with the cluster endpoint given.
func generateClusterAt(endpoint string) (*testCluster, error) {
	return generateClusterOf("v1.13.0", endpoint)
}

// sharedCluster1_14 is a cluster of the v1.14 contract, generated once per test binary.
var sharedCluster1_14 = sync.OnceValues(func() (*testCluster, error) { return generateClusterOf("v1.14.1", "https://127.0.0.1:6443") })

// generateClusterOf makes the secrets and configs machinery generates for the contract of Talos
// version, installing to /dev/sda.
func generateClusterOf(version, endpoint string) (*testCluster, error) {
	vc, err := talosconfig.ParseContractFromVersion(version)
	if err != nil {
		return nil, fmt.Errorf("parsing contract: %w", err)
	}

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), vc)
	if err != nil {
		return nil, fmt.Errorf("creating secrets bundle: %w", err)
	}

	in, err := generate.NewInput("sim", endpoint, talos1_13KubernetesVersion,
		generate.WithVersionContract(vc),
		generate.WithSecretsBundle(bundle),
		generate.WithInstallDisk("/dev/sda"),
	)
	if err != nil {
		return nil, fmt.Errorf("creating generate input: %w", err)
	}

	cl := &testCluster{bundle: bundle}

	for _, out := range []struct {
		typ machine.Type
		dst *[]byte
	}{{machine.TypeControlPlane, &cl.cp}, {machine.TypeWorker, &cl.worker}} {
		cfg, err := in.Config(out.typ)
		if err != nil {
			return nil, fmt.Errorf("generating %s config: %w", out.typ, err)
		}

		if *out.dst, err = cfg.Bytes(); err != nil {
			return nil, fmt.Errorf("encoding %s config: %w", out.typ, err)
		}
	}

	return cl, nil
}

// patch applies a strategic-merge YAML patch to cfg the way talosctl --config-patch does.
func patch(t *testing.T, cfg []byte, yamlPatch string) []byte {
	t.Helper()

	patches, err := configpatcher.LoadPatches([]string{yamlPatch})
	if err != nil {
		t.Fatalf("LoadPatches: %v", err)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), patches)
	if err != nil {
		t.Fatalf("Apply patch: %v", err)
	}

	b, err := out.Bytes()
	if err != nil {
		t.Fatalf("patched Bytes: %v", err)
	}

	return b
}

// installedNode starts a node, applies the cluster's control plane config in maintenance mode, waits for
// it to run and returns an os:admin client.
func installedNode(t *testing.T, cl *testCluster, opts Options) (*Node, *client.Client) {
	t.Helper()

	n := appliedNode(t, testContext(t), opts, cl.cp, PhaseRunning)

	return n, certClient(t, n, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))
}

// appliedNode starts a node, applies cfg in maintenance mode through the pinned certificate and waits
// until the node reaches phase (PhaseInstalling for a node held there by a long InstallDelay,
// PhaseRunning otherwise).
func appliedNode(t *testing.T, ctx context.Context, opts Options, cfg []byte, phase Phase) *Node {
	t.Helper()

	n := startNode(t, opts)

	if _, err := pinnedClient(t, n, n.MaintenanceFingerprint()).ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cfg}); err != nil {
		t.Fatalf("maintenance ApplyConfiguration: %v", err)
	}

	if err := n.WaitPhase(ctx, phase); err != nil {
		t.Fatal(err)
	}

	return n
}

// machineConfig reads the MachineConfig resource id through the client's COSI API.
func machineConfig(ctx context.Context, c *client.Client, id resource.ID) (*config.MachineConfig, error) {
	return safe.StateGet[*config.MachineConfig](ctx, c.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined))
}

// mustMachineConfig is machineConfig failing the test on error.
func mustMachineConfig(t *testing.T, c *client.Client, id resource.ID) *config.MachineConfig {
	t.Helper()

	mc, err := machineConfig(testContext(t), c, id)
	if err != nil {
		t.Fatalf("reading MachineConfig %s: %v", id, err)
	}

	return mc
}

// waitMachineConfig blocks (via a COSI watch, bounded by testTimeout) until the MachineConfig id satisfies cond.
func waitMachineConfig(t *testing.T, c *client.Client, id resource.ID, cond func(*config.MachineConfig) bool) {
	t.Helper()

	_, err := c.COSI.WatchFor(testContext(t),
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined),
		state.WithCondition(func(r resource.Resource) (bool, error) {
			mc, ok := r.(*config.MachineConfig)

			return ok && cond(mc), nil
		}))
	if err != nil {
		t.Fatalf("waiting for MachineConfig %s: %v", id, err)
	}
}

// kubeletDocumentLayout rewrites a generated config into Talos v1.14's layout: machine.kubelet
// moved into a KubeletConfig document (extraConfig becomes config). The machine.kubelet fields that
// Talos v1.14 keeps in other documents are refused rather than dropped.
func kubeletDocumentLayout(t *testing.T, b []byte) []byte {
	t.Helper()

	var kubelet *v1alpha1.KubeletConfig

	cfg, err := loadConfig(t, b).PatchV1Alpha1(func(c *v1alpha1.Config) error {
		kubelet, c.MachineConfig.MachineKubelet = c.MachineConfig.MachineKubelet, nil //nolint:staticcheck // the deprecated section is what moves

		return nil
	})
	if err != nil {
		t.Fatalf("removing machine.kubelet: %v", err)
	}

	if kubelet == nil {
		t.Fatal("the config has no machine.kubelet to move")
	}

	//nolint:staticcheck // the deprecated fields are what moves
	if len(kubelet.KubeletExtraMounts) > 0 || len(kubelet.KubeletCredentialProviderConfig.Object) > 0 || kubelet.KubeletRegisterWithFQDN != nil ||
		kubelet.KubeletNodeIP != nil || kubelet.KubeletSkipNodeRegistration != nil ||
		(kubelet.KubeletDisableManifestsDirectory != nil && !*kubelet.KubeletDisableManifestsDirectory) {
		t.Fatalf("machine.kubelet %+v has fields the KubeletConfig document has no place for", kubelet)
	}

	doc := k8s.NewKubeletConfigV1Alpha1()
	doc.KubeletImage = kubelet.KubeletImage
	doc.KubeletConfig = kubelet.KubeletExtraConfig
	doc.KubeletArgs = kubelet.KubeletExtraArgs
	doc.KubeletClusterDNS = kubelet.KubeletClusterDNS
	doc.KubeletDefaultRuntimeSeccompProfileEnabled = kubelet.KubeletDefaultRuntimeSeccompProfileEnabled

	moved, err := container.New(append(cfg.Documents(), doc)...)
	if err != nil {
		t.Fatalf("adding the KubeletConfig document: %v", err)
	}

	out, err := moved.EncodeBytes()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}

	return out
}

// loadConfig parses config bytes, failing the test on error.
func loadConfig(t *testing.T, b []byte) talosconfig.Provider {
	t.Helper()

	p, err := configloader.NewFromBytes(b)
	if err != nil {
		t.Fatalf("NewFromBytes: %v", err)
	}

	return p
}

// wantCode fails the test unless err carries gRPC code want (and, if non-empty, a message containing msg).
func wantCode(t *testing.T, err error, want codes.Code, msg string) {
	t.Helper()

	if err == nil {
		t.Fatalf("expected %s error, got nil", want)
	}

	if got := client.StatusCode(err); got != want {
		t.Fatalf("expected code %s, got %s (%v)", want, got, err)
	}

	if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Fatalf("expected message containing %q, got %v", msg, err)
	}
}

// wantHistory fails the test unless the node's phase history equals want.
func wantHistory(t *testing.T, n *Node, want ...Phase) {
	t.Helper()

	if got := n.PhaseHistory(); !slices.Equal(got, want) {
		t.Fatalf("phase history = %v, want %v", got, want)
	}
}

// wantWriteDenied checks a COSI Create error: the COSI client maps PermissionDenied to an owner conflict.
func wantWriteDenied(t *testing.T, err error, msg string) {
	t.Helper()

	if !state.IsOwnerConflictError(err) || !strings.Contains(err.Error(), "code = PermissionDenied desc = "+msg) {
		t.Fatalf("expected PermissionDenied %q (as owner conflict), got %v", msg, err)
	}
}
