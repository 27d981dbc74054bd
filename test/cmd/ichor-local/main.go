// Command ichor-local runs the whole local management plane in the
// foreground for `make run`: etcd, kube-apiserver, kube-controller-manager
// and ichor-apiserver (with its embedded etcd) registered through its
// APIService, ichor-controller and ichor-auth as their ServiceAccounts (with
// a first IchorUser, admin, to sign in as), plus simulated Talos
// machines in maintenance mode. Once ichor.dev is Available it writes an
// admin kubeconfig and says how to use it; Ctrl-C or SIGTERM stops
// everything it started.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/artifacts"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/pki"

	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/internal/proc"
	"ichor.dev/ichor/test/objectstore"
	"ichor.dev/ichor/test/oidcprovider"
	"ichor.dev/ichor/test/talossim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "ichor-local: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	stateDir := flag.String("state-dir", ".local/run", "Directory for certificates, data and logs; emptied at every start.")
	kubeconfig := flag.String("kubeconfig", ".local/kubeconfig", "Where to write the admin kubeconfig.")
	apiserver := flag.String("ichor-apiserver", "bin/ichor-apiserver", "The ichor-apiserver binary to run.")
	controller := flag.String("ichor-controller", "bin/ichor-controller", "The ichor-controller binary to run.")
	auth := flag.String("ichor-auth", "bin/ichor-auth", "The ichor-auth binary to run.")
	console := flag.String("ichor-ui", "bin/ichor-ui", "The ichor-ui binary to run.")
	machines := flag.Int("machines", 5, "How many simulated Talos machines to start in maintenance mode.")
	machineNet := flag.String("machine-network", "127.0.1.0/24", "Loopback network the simulated machines listen in, one address each, on the Talos API port.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	// A fresh control plane every time, so a second run never trips on the first's leftovers.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	binary, err := filepath.Abs(*apiserver)
	if err != nil {
		return err
	}

	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	cp, err := harness.Start(ctx, harness.Options{
		Dir:               dir,
		IchorBinary:       binary,
		IchorEmbeddedEtcd: true,
		Logf:              logf,
	})
	if err != nil {
		return err
	}
	defer cp.Stop()

	// The Kubernetes control plane of every simulated cluster the machines are bootstrapped into.
	kube := &talossim.Kubernetes{BinDir: cp.BinDir, Dir: filepath.Join(dir, "clusters"), Logf: logf}
	defer kube.Stop()

	nodes, err := startMachines(ctx, *machines, *machineNet, kube)
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
	}()
	if err != nil {
		return err
	}

	ctrlProc, err := startController(ctx, cp, dir, *controller)
	if err != nil {
		return err
	}
	defer ctrlProc.Stop(15 * time.Second) //nolint:errcheck

	authProc, err := startAuth(ctx, cp, dir, *auth)
	if err != nil {
		return err
	}
	defer authProc.Stop(15 * time.Second) //nolint:errcheck

	ui, err := startUI(ctx, cp, dir, *console)
	if err != nil {
		return err
	}
	defer ui.proc.Stop(15 * time.Second) //nolint:errcheck

	store, target, err := startBackupTarget(ctx, dir, filepath.Dir(*kubeconfig))
	if err != nil {
		return err
	}
	defer store.Stop()

	data, err := os.ReadFile(cp.AdminKubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*kubeconfig, data, 0o600); err != nil {
		return err
	}
	signIn, err := firstAdmin(ctx, cp, filepath.Dir(*kubeconfig))
	if err != nil {
		return err
	}
	fmt.Printf(`
Ichor is running: ichor.dev/v1alpha1 is Available through kube-apiserver at %s.
Logs are in %s (ichor-controller.log, ichor-auth.log, ichor-ui.log).

The web console is at %s (its serving CA: %s).
Sign in there as admin, with the password in %s, or at the local OpenID
provider as olga (password "olga's provider password"; its CA: %s).

  kubectl --kubeconfig %s get ichor -A
  kubectl --kubeconfig %s api-resources --api-group=ichor.dev

Sign in as the IchorUser admin (its password is in %s), then act as ichor:admin:

  bin/ichor login --kubeconfig %s --issuer %s --username admin \
    --issuer-certificate-authority %s --password-file %s
  kubectl --kubeconfig %s auth whoami

Or sign in at the local OpenID provider (as olga, password "olga's provider password": an operator):

  bin/ichor login --kubeconfig %s --oidc --issuer %s --issuer-certificate-authority %s

Simulated Talos machines in maintenance mode (Talos API address, certificate fingerprint):
`, cp.URL, dir, ui.url, ui.caFile, signIn.passwordFile, cp.OIDC.CAFile, *kubeconfig, *kubeconfig, signIn.passwordFile, signIn.kubeconfig, cp.Auth.URL, cp.Auth.CAFile, signIn.passwordFile, signIn.kubeconfig, signIn.kubeconfig, cp.OIDC.URL, cp.OIDC.CAFile)
	for _, n := range nodes {
		fmt.Printf("  %-18s %s\n", n.Addr(), n.MaintenanceFingerprint())
	}
	fmt.Printf(`
A backup target: SeaweedFS's S3 API at %s, bucket %s (its CA: %s).
For a TalosCluster demo in namespace demo, as an admin:

  kubectl --kubeconfig %s -n demo apply -f %s
  kubectl --kubeconfig %s -n demo patch taloscluster demo --subresource=backup --type=merge --patch-file %s

The patch holds a schedule, the target, a retention and the public key of the age identity in %s,
which decrypts the backups (an etcd-restore's identitySecret); see docs/backups.md.
`, store.Endpoint, backupBucket, target.caFile, *kubeconfig, target.secretFile, *kubeconfig, target.patchFile, target.keyFile)
	fmt.Print("\nPress Ctrl-C to stop.\n")
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "stopping")
	return nil
}

// startMachines starts count simulated machines on consecutive addresses of
// network, each on the Talos API port, as machines on a provisioning network would be, and
// with its kubelet on the kubelet port once configured.
func startMachines(ctx context.Context, count int, network string, kube *talossim.Kubernetes) ([]*talossim.Node, error) {
	prefix, err := netip.ParsePrefix(network)
	if err != nil {
		return nil, fmt.Errorf("--machine-network: %w", err)
	}
	if !prefix.Addr().IsLoopback() {
		return nil, fmt.Errorf("--machine-network %s: simulated machines listen on loopback only", network)
	}
	var nodes []*talossim.Node
	// The machines form one cluster's control planes and workers: control
	// planes share one etcd, and workers get their API certificate from a
	// configured control plane, as from trustd.
	etcd, trustd := &talossim.EtcdCluster{Name: "local"}, talossim.NewTrustd()
	addr := prefix.Masked().Addr()
	for range count {
		addr = addr.Next()
		if !prefix.Contains(addr) {
			return nodes, fmt.Errorf("--machine-network %s has room for fewer than %d machines", network, count)
		}
		n, err := talossim.Start(ctx, talossim.Options{
			ListenAddress: netip.AddrPortFrom(addr, constants.ApidPort).String(),
			Kubernetes:    kube,
			KubeletPort:   constants.KubeletPort,
			Etcd:          etcd,
			Trustd:        trustd,
		})
		if err != nil {
			return nodes, fmt.Errorf("start simulated machine at %s: %w", addr, err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// The controller's identity, as artifacts/controller-rbac.yaml names it.
const (
	controllerUser   = "system:serviceaccount:" + harness.IchorNamespace + ":ichor-controller"
	controllerGroups = "system:serviceaccounts,system:serviceaccounts:" + harness.IchorNamespace
)

// startController installs the controller's RBAC from artifacts/ and runs the
// ichor-controller binary as its ServiceAccount (the admin credential
// impersonating it, so every request is authorized against that RBAC).
func startController(ctx context.Context, cp *harness.ControlPlane, dir, binary string) (*proc.Process, error) {
	binary, kubeconfig, err := installAs(ctx, cp, dir, binary, "ichor-controller", controllerUser, "controller-rbac.yaml")
	if err != nil {
		return nil, err
	}
	return proc.Start(dir, "ichor-controller", binary,
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:0",
		// Its own: a restore's decrypted snapshot waits there, and the
		// controller sweeps away whatever of that kind no operation needs.
		"--scratch-dir="+filepath.Join(dir, "scratch"),
		// The simulated nodes pull any installer whose tag is a Talos version;
		// a site names its own mirror's repository here.
		"--install-image=siderolabs/installer:"+talossim.DefaultVersion,
		// Where ichor-apiserver sends uploaded etcd snapshots.
		"--upload-bind-address="+cp.ControllerUpload.Address,
		"--upload-tls-cert-file="+cp.ControllerUpload.CertFile,
		"--upload-tls-private-key-file="+cp.ControllerUpload.KeyFile,
	)
}

// The identity of ichor-auth, as artifacts/auth-rbac.yaml names it.
const authUser = "system:serviceaccount:" + harness.IchorNamespace + ":ichor-auth"

// startAuth installs ichor-auth's RBAC and state Secrets from artifacts/ and
// runs the binary as its ServiceAccount at the issuer URL the harness's
// kube-apiserver trusts.
func startAuth(ctx context.Context, cp *harness.ControlPlane, dir, binary string) (*proc.Process, error) {
	binary, kubeconfig, err := installAs(ctx, cp, dir, binary, "ichor-auth", authUser, "auth-rbac.yaml", "auth-state.yaml")
	if err != nil {
		return nil, err
	}
	return proc.Start(dir, "ichor-auth", binary,
		"--kubeconfig="+kubeconfig,
		"--bind-address="+cp.Auth.Address,
		"--issuer-url="+cp.Auth.URL,
		"--tls-cert-file="+cp.Auth.CertFile,
		"--tls-private-key-file="+cp.Auth.KeyFile,
	)
}

// runningUI is the started web console.
type runningUI struct {
	proc        *proc.Process
	url, caFile string
}

// startUI runs the binary on a loopback port, with a serving certificate of
// a CA of its own (written beside it, for a browser to trust), and a
// kubeconfig that holds no credential: ichor-ui has none of its own.
func startUI(ctx context.Context, cp *harness.ControlPlane, dir, binary string) (*runningUI, error) {
	binary, err := filepath.Abs(binary)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "ichor-ui.kubeconfig")
	if err := writeServerOnlyKubeconfig(cp, kubeconfig); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("ichor-ui-local-ca")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ichor-ui-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		return nil, err
	}
	kp, err := ca.Issue(pki.Leaf{CommonName: "ichor-ui", DNSNames: pki.Loopback.DNSNames, IPs: pki.Loopback.IPs, Usage: pki.ServerAuth})
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := kp.WriteFiles(dir, "ichor-ui")
	if err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts("127.0.0.1", 1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p, err := proc.Start(dir, "ichor-ui", binary,
		"--kubeconfig="+kubeconfig,
		"--bind-address="+addr,
		"--issuer-url="+cp.Auth.URL,
		"--issuer-ca-file="+cp.Auth.CAFile,
		"--tls-cert-file="+certFile,
		"--tls-private-key-file="+keyFile,
		"--oidc-issuer-url="+cp.OIDC.URL,
		"--oidc-ca-file="+cp.OIDC.CAFile,
		"--oidc-client-id="+oidcprovider.ConsoleClientID,
		"--oidc-name=the local OpenID provider",
	)
	if err != nil {
		return nil, err
	}
	return &runningUI{proc: p, url: "https://" + addr, caFile: caFile}, nil
}

// installAs applies files of artifacts/ (a component's RBAC) and returns
// binary's absolute path and a kubeconfig that acts as user, the
// component's ServiceAccount.
func installAs(ctx context.Context, cp *harness.ControlPlane, dir, binary, name, user string, files ...string) (string, string, error) {
	binary, err := filepath.Abs(binary)
	if err != nil {
		return "", "", err
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return "", "", err
	}
	args := []string{"apply", "--server-side"}
	for _, f := range files {
		args = append(args, "-f", filepath.Join(root, "artifacts", f))
	}
	if _, err := cp.Kubectl(ctx, args...); err != nil {
		return "", "", fmt.Errorf("install %s's RBAC: %w", name, err)
	}
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	if err := cp.KubeconfigFor(kubeconfig, user, strings.Split(controllerGroups, ",")...); err != nil {
		return "", "", err
	}
	return binary, kubeconfig, nil
}

// localSignIn is how the first admin signs in.
type localSignIn struct{ passwordFile, kubeconfig string }

// firstAdmin turns Ichor users on and creates the IchorUser admin with a
// random password, written to a file of dir that only its owner reads, and
// a kubeconfig that knows the management cluster and holds no credential,
// for ichor login to fill.
func firstAdmin(ctx context.Context, cp *harness.ControlPlane, dir string) (localSignIn, error) {
	s := localSignIn{passwordFile: filepath.Join(dir, "admin-password"), kubeconfig: filepath.Join(dir, "people.kubeconfig")}
	raw := make([]byte, 18)
	if _, err := rand.Read(raw); err != nil {
		return s, err
	}
	password := base64.RawURLEncoding.EncodeToString(raw)
	if err := os.WriteFile(s.passwordFile, []byte(password+"\n"), 0o600); err != nil {
		return s, err
	}
	ichor, err := versioned.NewForConfig(cp.AdminConfig)
	if err != nil {
		return s, err
	}
	// The installation as artifacts/ starts it, with Ichor users on.
	var in v1alpha1.IchorInstallation
	if err := yaml.UnmarshalStrict(artifacts.Installation, &in); err != nil {
		return s, fmt.Errorf("artifacts/installation.yaml: %w", err)
	}
	in.Spec.Settings.UsersEnabled = true
	if _, err := ichor.IchorV1alpha1().IchorInstallations().Create(ctx, &in, metav1.CreateOptions{}); err != nil {
		return s, fmt.Errorf("create the IchorInstallation: %w", err)
	}
	users := ichor.IchorV1alpha1().IchorUsers()
	if _, err := users.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: "admin"},
		Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleAdmin, DisplayName: "First admin"}}, metav1.CreateOptions{}); err != nil {
		return s, fmt.Errorf("create the IchorUser admin: %w", err)
	}
	if _, err := users.UpdatePassword(ctx, "admin", &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, Password: password},
		metav1.UpdateOptions{}); err != nil {
		return s, fmt.Errorf("set the password of the IchorUser admin: %w", err)
	}
	return s, writeServerOnlyKubeconfig(cp, s.kubeconfig)
}

// writeServerOnlyKubeconfig writes a kubeconfig that knows the management
// cluster (its URL and CA) and holds no credential.
func writeServerOnlyKubeconfig(cp *harness.ControlPlane, path string) error {
	admin, err := clientcmd.LoadFromFile(cp.AdminKubeconfig)
	if err != nil {
		return err
	}
	only := clientcmdapi.NewConfig()
	only.Clusters["local"] = admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	only.Contexts["local"] = &clientcmdapi.Context{Cluster: "local"}
	only.CurrentContext = "local"
	return clientcmd.WriteToFile(*only, path)
}

// backupBucket is the bucket `make run` creates for backups.
const backupBucket = "ichor-backups"

// backupTarget are the files a newcomer applies to back up to the local
// object store.
type backupTarget struct {
	keyFile, caFile, secretFile, patchFile string
}

// startBackupTarget starts SeaweedFS's S3 API on loopback with a bucket for
// backups, and writes into out its CA, a Secret of its credentials and a
// patch of spec.backup naming it, to apply in a cluster's namespace.
func startBackupTarget(ctx context.Context, dir, out string) (*objectstore.Server, backupTarget, error) {
	storeDir := filepath.Join(dir, "s3")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, backupTarget{}, err
	}
	store, err := objectstore.Start(ctx, storeDir)
	if err != nil {
		return nil, backupTarget{}, fmt.Errorf("start the local object store: %w", err)
	}
	if err := store.CreateBucket(ctx, backupBucket); err != nil {
		store.Stop()
		return nil, backupTarget{}, err
	}
	// The backups' age identity, as age-keygen writes it: what an
	// etcd-restore decrypts with.
	identity, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, backupTarget{}, err
	}
	t := backupTarget{
		keyFile:    filepath.Join(out, "backup.key"),
		caFile:     filepath.Join(out, "backup-target-ca.crt"),
		secretFile: filepath.Join(out, "backup-credentials.yaml"),
		patchFile:  filepath.Join(out, "backup-target-patch.yaml"),
	}
	secret, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "local-s3-backups"},
		"stringData": map[string]string{"accessKeyID": store.Admin.AccessKeyID, "secretAccessKey": store.Admin.SecretAccessKey},
	})
	if err != nil {
		return nil, backupTarget{}, err
	}
	patch, err := yaml.Marshal(map[string]any{"spec": map[string]any{"backup": map[string]any{
		"schedule": "@every 6h",
		"target": map[string]any{"s3": map[string]any{
			"bucket": backupBucket, "region": objectstore.Region, "endpoint": store.Endpoint, "forcePathStyle": true,
			"caBundle": string(store.CAPEM), "credentialsRef": map[string]string{"name": "local-s3-backups"},
		}},
		"encryption": map[string]any{"recipients": []string{identity.Recipient().String()}},
		"retention":  map[string]any{"count": 14},
	}}})
	if err != nil {
		return nil, backupTarget{}, err
	}
	key := fmt.Sprintf("# public key: %s\n%s\n", identity.Recipient(), identity)
	for file, data := range map[string][]byte{t.keyFile: []byte(key), t.caFile: store.CAPEM, t.secretFile: secret, t.patchFile: patch} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return nil, backupTarget{}, err
		}
	}
	return store, t, nil
}
