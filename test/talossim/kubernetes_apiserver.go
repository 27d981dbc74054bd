package talossim

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"k8s.io/client-go/tools/clientcmd"

	"ichor.dev/ichor/test/internal/proc"
)

// A control plane's kube-apiserver follows its machine config as Talos runs it: cluster.apiServer's
// extraArgs become flags (over the simulator's own, but for the plumbing that ties the process to its
// loopback listener, certificates and etcd, which stays the simulator's), its extraVolumes mount host
// paths into the pod, as Talos mounts its own secrets directory (/system/secrets/kubernetes/
// kube-apiserver, whose ca.crt the simulator writes), and its env is the pod's. A change of any of them, or of the trusted roots such
// a mount shows, restarts kube-apiserver (not etcd, not the other components), as Talos replaces the
// static pod; its mirror pod at the new config version appears, Ready, only once the restarted
// process serves (mirrorPods). The host is the run directory's host/: the simulator writes there
// the one host file it models, /etc/ssl/certs/ca-certificates.crt, holding the TrustedRootsConfig
// certificates (it has no system roots); any other host path is an empty directory. The cluster has
// one kube-apiserver for all its control planes: it runs the spec of the control plane whose config
// changed last.

// simAPIServerFlags are the flags the simulator keeps: they tie kube-apiserver to the simulated
// control plane.
var simAPIServerFlags = []string{
	"bind-address", "advertise-address", "secure-port", "tls-cert-file", "tls-private-key-file",
	"etcd-servers", "etcd-cafile", "etcd-certfile", "etcd-keyfile", "client-ca-file",
	"service-account-issuer", "service-account-key-file", "service-account-signing-key-file", "encryption-provider-config",
	"authentication-config",
	"requestheader-client-ca-file", "requestheader-allowed-names", "requestheader-username-headers",
	"requestheader-group-headers", "requestheader-extra-headers-prefix", "proxy-client-cert-file",
	"proxy-client-key-file", "endpoint-reconciler-type",
}

// hostTrustedRoots is the host's trust bundle, where Talos writes its roots and TrustedRootsConfigs.
const hostTrustedRoots = "/etc/ssl/certs/ca-certificates.crt"

// apiServerSpec is what of a control plane's config shapes its kube-apiserver.
type apiServerSpec struct {
	args   map[string][]string
	env    map[string]string
	mounts map[string]string // mount path → host path
	roots  string            // the host's trust bundle
	// cas are the cluster's Kubernetes CAs: cluster.ca's certificate, then cluster.acceptedCAs. A
	// change rotates the control plane's certificates (rotatePKI); cfg is the config they are
	// issued from.
	cas string
	cfg talosconfig.Config
	// keys are its service-account keys and its encryption config
	// (kubernetes_keys.go); keysErr why they could not be read.
	keys    apiServerKeys
	keysErr error
}

func apiServerSpecOf(cfg config.Provider) apiServerSpec {
	// Talos mounts the API server's own secrets (ca.crt, the cluster CA, which
	// kubelet-certificate-authority names) into its pod; the run writes them on its host.
	s := apiServerSpec{args: map[string][]string{}, env: map[string]string{}, mounts: map[string]string{
		constants.KubernetesAPIServerSecretsDir: constants.KubernetesAPIServerSecretsDir,
	}}
	if cfg == nil || cfg.K8sAPIServerConfig() == nil {
		return s
	}

	api := cfg.K8sAPIServerConfig()
	maps.Copy(s.args, api.ExtraArgs())
	maps.Copy(s.env, api.Env())

	for _, v := range api.ExtraVolumes() {
		s.mounts[filepath.Clean(v.MountPath())] = filepath.Clean(v.HostPath())
	}

	if roots := cfg.TrustedRoots(); roots != nil {
		s.roots = strings.Join(roots.ExtraTrustedRootCertificates(), "\n")
	}

	s.cfg, s.cas = cfg, clusterCAs(cfg)
	s.keys, s.keysErr = apiServerKeysOf(cfg)

	return s
}

// clusterCAs is cluster.ca's certificate followed by cluster.acceptedCAs, as one PEM bundle.
func clusterCAs(cfg talosconfig.Config) string {
	var b strings.Builder

	for _, ca := range k8sAcceptedCAs(cfg) {
		b.Write(ca.Crt)
	}

	return b.String()
}

// key is the spec in one comparable string.
func (s apiServerSpec) key() string {
	var b strings.Builder

	for _, k := range slices.Sorted(maps.Keys(s.args)) {
		fmt.Fprintf(&b, "arg %s=%q\n", k, s.args[k])
	}

	for _, k := range slices.Sorted(maps.Keys(s.env)) {
		fmt.Fprintf(&b, "env %s=%q\n", k, s.env[k])
	}

	for _, k := range slices.Sorted(maps.Keys(s.mounts)) {
		fmt.Fprintf(&b, "mount %s=%s\n", k, s.mounts[k])
	}

	fmt.Fprintf(&b, "roots %q\n", s.roots)
	fmt.Fprintf(&b, "cas %q\n", s.cas)
	fmt.Fprintf(&b, "keys %s\n", s.keys.digest())

	return b.String()
}

// writeHost writes the simulated host's files under hostDir.
func (s apiServerSpec) writeHost(hostDir string) error {
	for _, h := range s.mounts {
		if err := os.MkdirAll(filepath.Join(hostDir, h), 0o755); err != nil {
			return err
		}
	}

	bundle := filepath.Join(hostDir, hostTrustedRoots)
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		return err
	}

	return os.WriteFile(bundle, []byte(s.roots), 0o644)
}

// hostPath maps a path inside the pod onto the simulated host, through the longest mount holding it;
// a path under no mount is the image's, which the simulator takes as is.
func (s apiServerSpec) hostPath(hostDir, p string) string {
	best := ""
	for m := range s.mounts {
		if (p == m || strings.HasPrefix(p, m+"/")) && len(m) > len(best) {
			best = m
		}
	}

	if best == "" {
		return p
	}

	return filepath.Join(hostDir, s.mounts[best], strings.TrimPrefix(p, best))
}

// flags merges the spec's extra args over base (--name=value flags), but for simAPIServerFlags; a
// value that is a path inside a mount is mapped onto the host.
func (s apiServerSpec) flags(base []string, hostDir string) []string {
	extra := map[string][]string{}
	for k, vs := range s.args {
		if slices.Contains(simAPIServerFlags, k) {
			continue
		}

		for _, v := range vs {
			if strings.HasPrefix(v, "/") {
				v = s.hostPath(hostDir, v)
			}

			extra[k] = append(extra[k], v)
		}
	}

	var out []string
	for _, f := range base {
		name, _, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if _, over := extra[name]; !over {
			out = append(out, f)
		}
	}

	for _, k := range slices.Sorted(maps.Keys(extra)) {
		for _, v := range extra[k] {
			out = append(out, "--"+k+"="+v)
		}
	}

	return out
}

// apiServerConfig tells the cluster's control plane that a control plane's config changed what
// shapes kube-apiserver; the run restarts its kube-apiserver with it unless it runs that already.
func (k *Kubernetes) apiServerConfig(cfg config.Provider) {
	endpoint := clusterEndpoint(cfg)
	if endpoint == nil {
		return
	}

	want := apiServerSpecOf(cfg)

	k.mu.Lock()
	defer k.mu.Unlock()

	r := k.runs[endpoint.String()]
	key := want.key()
	// Every control plane tells its change: one restart serves them all.
	if r == nil || (r.apiWant == nil && r.apiSpec == key) || (r.apiWant != nil && r.apiWant.key() == key) {
		return
	}

	r.apiWant = &want
	select {
	case r.apiKick <- struct{}{}:
	default:
	}
}

// apiServerSettled reports whether the cluster's kube-apiserver runs, restarted, with what cfg says.
func (k *Kubernetes) apiServerSettled(cfg config.Provider) bool {
	endpoint := clusterEndpoint(cfg)
	if endpoint == nil {
		return false
	}

	key := apiServerSpecOf(cfg).key()

	k.mu.Lock()
	defer k.mu.Unlock()

	r := k.runs[endpoint.String()]

	return r != nil && r.apiWant == nil && r.apiSpec == key
}

// followAPIServerConfig restarts the run's kube-apiserver with each spec asked for, until ctx ends.
func (k *Kubernetes) followAPIServerConfig(ctx context.Context, r *kubeRun) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.apiKick:
		}

		k.mu.Lock()
		want := r.apiWant
		k.mu.Unlock()

		if want == nil {
			continue
		}

		if err := k.restartAPIServer(ctx, r, *want); err != nil {
			k.logf("talossim: kube-apiserver restarted with its new config does not serve: %v", err)
		}

		k.mu.Lock()
		r.apiSpec = want.key()
		if r.apiWant != nil && r.apiWant.key() == r.apiSpec {
			r.apiWant = nil
		}
		k.mu.Unlock()
	}
}

// restartAPIServer stops the run's kube-apiserver and starts it with spec, and waits until it serves.
// When the cluster's CAs changed, the control plane's certificates are issued again first, and the
// controller manager and the scheduler restart with them once kube-apiserver serves.
func (k *Kubernetes) restartAPIServer(ctx context.Context, r *kubeRun, spec apiServerSpec) error {
	k.logf("talossim: restarting kube-apiserver with its new config")

	rotate := spec.cas != r.cas
	if rotate {
		if err := k.rotatePKI(r, spec.cfg); err != nil {
			return fmt.Errorf("issuing the control plane's certificates from the rotated CAs: %w", err)
		}
	}

	if spec.keysErr != nil {
		return spec.keysErr
	}

	if err := spec.keys.write(r.dir); err != nil {
		return err
	}

	if err := spec.writeHost(r.hostDir()); err != nil {
		return err
	}

	old := r.procs[r.apiIndex]
	_ = old.Stop(15 * time.Second)

	p, err := proc.Start(r.dir, "kube-apiserver", filepath.Join(k.BinDir, "kube-apiserver"), append(spec.flags(r.apiBase, r.hostDir()), spec.keys.flags(r.dir)...)...)
	if err != nil {
		return err
	}

	r.procs[r.apiIndex] = p

	if err := r.apiHealthy(ctx, p); err != nil || !rotate {
		return err
	}

	for _, c := range r.components {
		k.logf("talossim: restarting %s with the rotated CAs", c.name)

		_ = r.procs[c.index].Stop(15 * time.Second)

		p, err := proc.Start(r.dir, c.name, filepath.Join(k.BinDir, c.name), c.args...)
		if err != nil {
			return err
		}

		r.procs[c.index] = p

		if err := c.healthy(ctx, p); err != nil {
			return err
		}
	}

	return nil
}

// rotatePKI issues the run's certificates again, in place, from cluster's CAs (cluster.ca issues,
// cluster.acceptedCAs are trusted beside it), as Talos does when a Kubernetes CA rotation changes
// them: kube-apiserver serves a certificate of the issuing CA and accepts clients of every CA, the
// controller manager signs with the issuing CA. etcd's data stays.
func (k *Kubernetes) rotatePKI(r *kubeRun, cfg talosconfig.Config) error {
	endpoint, bind, err := apiServerAddress(cfg)
	if err != nil {
		return err
	}

	f, err := writeKubePKI(r.dir, cfg, endpoint, bind.Addr())
	if err != nil {
		return err
	}

	if err = writeAPIServerCA(r, f); err != nil {
		return err
	}

	admin, err := clientcmd.RESTConfigFromKubeConfig(f.adminKubeconfig)
	if err != nil {
		return err
	}

	admin.QPS = -1

	k.mu.Lock()
	r.admin, r.cas, r.ca = admin, clusterCAs(cfg), string(k8sIssuingCA(cfg).Crt)
	k.mu.Unlock()

	return nil
}

// writeAPIServerCA writes the cluster's CAs where Talos mounts them into kube-apiserver's pod.
func writeAPIServerCA(r *kubeRun, f kubePKI) error {
	ca, err := os.ReadFile(f.acceptedCAs)
	if err != nil {
		return err
	}

	return os.WriteFile(filepath.Join(r.hostDir(), constants.KubernetesAPIServerSecretsDir, "ca.crt"), ca, 0o644)
}

// hostDir is the simulated host of the run's control planes.
func (r *kubeRun) hostDir() string { return filepath.Join(r.dir, "host") }

// followAPIServerLocked tells the node's Kubernetes when what shapes kube-apiserver changed in the
// config of this running control plane.
func (n *Node) followAPIServerLocked() {
	k := n.opts.Kubernetes
	if k == nil || n.phase != PhaseRunning || !n.configuredLocked() || !n.isControlPlaneLocked() {
		return
	}

	key := apiServerSpecOf(n.active).key()
	if key == n.apiServerKey {
		return
	}

	n.apiServerKey = key
	k.apiServerConfig(n.active)
}

// apiServerSettled reports whether the cluster's kube-apiserver serves with what this node's config
// says: until then the kubelet does not show the new static pod.
func (n *Node) apiServerSettled() bool {
	n.mu.Lock()
	cfg := n.active
	n.mu.Unlock()

	k := n.opts.Kubernetes

	return k == nil || k.apiServerSettled(cfg)
}
