package cli

import (
	"bytes"
	"fmt"
	"io"
	"os/user"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v4"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/pkg/workload"
)

// breakGlassOptions are the flags of ichor break-glass.
type breakGlassOptions struct {
	passphraseFile, output string
	endpoints, nodes       []string
	ttl                    time.Duration
}

func newBreakGlass(o *Options) *cobra.Command {
	var f breakGlassOptions
	cmd := &cobra.Command{
		Use:   "break-glass kubeconfig|talosconfig CLUSTER",
		Short: "Open the sealed bundle with its passphrase and mint a cluster-admin credential, offline",
		Long: `break-glass opens ~/.ichor/clusters/CLUSTER/bundle.age (written by ichor init) with its passphrase
and signs, from the bundle's CAs, a short-lived credential: a kubeconfig for the cluster's
Kubernetes API as a member of system:masters, or a talosconfig with the os:admin role. It needs
no Ichor component, no login and no network to the management cluster: only the sealed file and
the passphrase. The certificate names you (ichor:break-glass:<your login>), so the managed
cluster's audit log does, and lives --ttl (one hour by default): nothing long-lived is written.
The passphrase is prompted for without echo; without a terminal, it is read from
--passphrase-file or ` + PassphraseEnv + `. -O writes a new file, readable by you only (0600), in
place of any file of that name.`,
		Example: `  ichor break-glass kubeconfig demo -O demo.kubeconfig
  ichor break-glass talosconfig demo --endpoints 10.0.0.11,10.0.0.12 -O talosconfig`,
		GroupID:   "access",
		Args:      cobra.ExactArgs(2),
		ValidArgs: []string{"kubeconfig", "talosconfig"},
	}
	cmd.Flags().StringVar(&f.passphraseFile, "passphrase-file", "", "read the passphrase from this file (its first line)")
	cmd.Flags().StringVarP(&f.output, "output-file", "O", "-", `where to write it, a new 0600 file in place of any there; "-" for standard output`)
	cmd.Flags().StringSliceVar(&f.endpoints, "endpoints", nil, "talosconfig: the nodes' Talos API addresses to talk through")
	cmd.Flags().StringSliceVar(&f.nodes, "nodes", nil, "talosconfig: the nodes to act on by default")
	cmd.Flags().DurationVar(&f.ttl, "ttl", time.Hour, "how long the credential lives")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name := args[0], args[1]
		if err := f.check(kind); err != nil {
			return err
		}
		return f.run(o, kind, name)
	}
	return cmd
}

// check says what is wrong with the kind asked for and the flags.
func (f *breakGlassOptions) check(kind string) error {
	if kind != "kubeconfig" && kind != "talosconfig" {
		return fmt.Errorf("%q: break-glass mints a kubeconfig or a talosconfig", kind)
	}
	if kind == "talosconfig" && len(f.endpoints) == 0 {
		return fmt.Errorf("a talosconfig needs --endpoints: the Talos API addresses of the cluster's nodes")
	}
	if f.ttl <= 0 || f.ttl > 24*time.Hour {
		return fmt.Errorf("--ttl %s: a break-glass credential lives more than nothing and at most 24h", f.ttl)
	}
	return nil
}

// run opens the sealed bundle of cluster name, mints the credential of
// kind from it for the user here, and writes it.
func (f *breakGlassOptions) run(o *Options, kind, name string) error {
	dir, err := clusterDir(name)
	if err != nil {
		return err
	}
	passphrase, err := readPassphrase(o, f.passphraseFile, false)
	if err != nil {
		return err
	}
	s, err := unseal(dir, passphrase)
	if err != nil {
		return err
	}
	bundle := &secrets.Bundle{Clock: secrets.NewClock()}
	if err := yaml.Unmarshal([]byte(s.Bundle), bundle); err != nil {
		return fmt.Errorf("the sealed bundle does not parse")
	}
	who := "ichor:break-glass"
	if u, err := user.Current(); err == nil {
		who += ":" + u.Username
	}
	now := time.Now()
	var out []byte
	switch kind {
	case "kubeconfig":
		out, err = breakGlassKubeconfig(s, bundle, who, now, f.ttl)
	case "talosconfig":
		out, err = f.talosconfig(s, bundle, now)
	}
	if err != nil {
		return err
	}
	if f.output == "-" {
		_, err := o.Out.Write(out)
		return err
	}
	// A new 0600 file renamed over the path: writing into an existing
	// file would keep its mode, and a credential must not.
	if _, err := saveFile(bytes.NewReader(out), f.output, io.Discard); err != nil {
		return err
	}
	fmt.Fprintf(o.ErrOut, "wrote a %s valid until %s to %s\n", kind, now.Add(f.ttl).Format(time.RFC3339), f.output)
	return nil
}

// breakGlassKubeconfig is a kubeconfig of the sealed cluster's Kubernetes
// API for who, a member of system:masters, valid for ttl from now.
func breakGlassKubeconfig(s *sealed, bundle *secrets.Bundle, who string, now time.Time, ttl time.Duration) ([]byte, error) {
	rc, err := workload.ClientConfig(bundle, s.Endpoint, workload.Identity{User: who, Groups: []string{"system:masters"}}, now, ttl)
	if err != nil {
		return nil, err
	}
	ctxName := "admin@" + s.Cluster
	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{s.Cluster: {Server: s.Endpoint, CertificateAuthorityData: rc.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{ctxName: {ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}},
		Contexts:       map[string]*clientcmdapi.Context{ctxName: {Cluster: s.Cluster, AuthInfo: ctxName}},
		CurrentContext: ctxName,
	})
}

// talosconfig is an os:admin talosconfig of the sealed cluster through
// --endpoints (acting on --nodes by default), valid for --ttl from now.
func (f *breakGlassOptions) talosconfig(s *sealed, bundle *secrets.Bundle, now time.Time) ([]byte, error) {
	creds, err := talos.MintCredentials(bundle, role.MakeSet(role.Admin), now, f.ttl)
	if err != nil {
		return nil, err
	}
	cfg := config.NewConfig(s.Cluster, f.endpoints, creds.CA, &x509.PEMEncodedCertificateAndKey{Crt: creds.Certificate, Key: creds.Key})
	if len(f.nodes) > 0 {
		cfg.Contexts[s.Cluster].Nodes = f.nodes
	}
	return cfg.Bytes()
}
