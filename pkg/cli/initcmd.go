package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/secretsbundle"
)

// initOptions are the flags of ichor init.
type initOptions struct {
	passphraseFile                            string
	endpoint, talosVersion, kubernetesVersion string
	force, reseal                             bool
}

func newInit(o *Options) *cobra.Command {
	var f initOptions
	cmd := &cobra.Command{
		Use:   "init CLUSTER",
		Short: "Make a cluster's secrets bundle here, seal a copy with a passphrase, and give it to Ichor",
		Long: `init generates a new cluster's secrets bundle (its CAs and keys) on this machine with Talos's
machinery, seals it in ~/.ichor/clusters/CLUSTER/bundle.age with a passphrase (age, scrypt;
directory 0700, file 0600), then stores it in the Secret CLUSTER-secrets of the namespace and
creates the TalosCluster naming it (spec.secretsRef: admins), or points an existing TalosCluster
that has no bundle yet at it. The sealed copy is the offline root of trust: ichor break-glass
opens it, with the passphrase alone, when no Ichor component, login or management cluster is
there to help. The passphrase is prompted for twice without echo; for automation, read it from
--passphrase-file or ` + PassphraseEnv + `.

A bundle already sealed here, or already stored for the cluster, is replaced only with --force;
the bundle of a cluster already bootstrapped never is (its nodes trust it).

With --reseal, init seals here the bundle the cluster uses now, read from its Secret with your
own access (Ichor's roles hold none on Secrets), and stores nothing: after a ca-rotation, the
sealed copy still holds the old CA, and break-glass talosconfigs from it are refused.`,
		Example: `  ichor -n demo init demo --endpoint https://10.0.0.10:6443 --talos-version v1.13.0 --kubernetes-version v1.36.0
  ichor -n demo init demo --reseal     # after a ca-rotation completed`,
		GroupID: "access",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&f.passphraseFile, "passphrase-file", "", "read the passphrase from this file (its first line)")
	cmd.Flags().StringVar(&f.endpoint, "endpoint", "", "a new cluster's spec.controlPlane.endpoint")
	cmd.Flags().StringVar(&f.talosVersion, "talos-version", "v1.13.0", "a new cluster's spec.talosVersion (the bundle's contract)")
	cmd.Flags().StringVar(&f.kubernetesVersion, "kubernetes-version", "", "a new cluster's spec.kubernetesVersion")
	cmd.Flags().BoolVar(&f.force, "force", false, "replace a bundle sealed here or stored for the cluster (never one a bootstrapped cluster uses)")
	cmd.Flags().BoolVar(&f.reseal, "reseal", false, "seal here the bundle the cluster uses now (after a CA rotation), replacing the sealed copy")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if f.reseal {
			if f.endpoint != "" || f.kubernetesVersion != "" || f.force {
				return fmt.Errorf("--reseal seals the bundle the cluster has: it takes no --endpoint, --kubernetes-version or --force")
			}
			return resealBundle(cmd.Context(), o, args[0], f.passphraseFile)
		}
		return f.run(cmd.Context(), o, args[0])
	}
	return cmd
}

// initTarget is the cluster init makes a bundle for, as the bundle and its
// Secret need it.
type initTarget struct {
	// cluster is the TalosCluster that exists; nil when init creates it.
	cluster                            *v1alpha1.TalosCluster
	secretName, endpoint, talosVersion string
}

// run makes a bundle for cluster name, seals it here, stores it in the
// cluster's Secret and points the cluster at it (creating the cluster when
// there is none).
func (f *initOptions) run(ctx context.Context, o *Options, name string) error {
	passphrase, err := readPassphrase(o, f.passphraseFile, true)
	if err != nil {
		return err
	}
	c, ns, err := o.clientIn()
	if err != nil {
		return err
	}
	kube, err := o.kube()
	if err != nil {
		return err
	}
	t, err := f.target(ctx, c, ns, name)
	if err != nil {
		return err
	}
	bundle, err := secretsbundle.Generate(t.talosVersion, time.Now())
	if err != nil {
		return err
	}
	dir, err := clusterDir(name)
	if err != nil {
		return err
	}
	// Sealed before it is stored, and put in place once it is: the root
	// of trust never exists only in the cluster, nor only here.
	commit, abort, err := seal(dir, &sealed{Cluster: name, Namespace: ns, Endpoint: t.endpoint, Bundle: string(bundle)}, passphrase, f.force)
	if err != nil {
		return err
	}
	if err := storeBundle(ctx, kube, ns, name, t.secretName, bundle, f.force); err != nil {
		abort()
		return err
	}
	if err := commit(); err != nil {
		return fmt.Errorf("the bundle is stored in Secret %s/%s, but sealing it here failed: %w", ns, t.secretName, err)
	}
	fmt.Fprintf(o.Out, "sealed %s (keep the passphrase apart from it)\n", filepath.Join(dir, sealedFile))
	fmt.Fprintf(o.Out, "secret/%s stored\n", t.secretName)
	return f.useBundle(ctx, o, c, ns, name, t)
}

// target reads the cluster init makes a bundle for: one that does not
// exist yet (the flags then say what it is), or one that has no bundle
// (or, with --force, one not bootstrapped yet).
func (f *initOptions) target(ctx context.Context, c versioned.Interface, ns, name string) (initTarget, error) {
	t := initTarget{secretName: name + "-secrets", endpoint: f.endpoint, talosVersion: f.talosVersion}
	cluster, err := c.IchorV1alpha1().TalosClusters(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if f.endpoint == "" || f.kubernetesVersion == "" {
			return t, fmt.Errorf("TalosCluster %s/%s does not exist: give --endpoint and --kubernetes-version to create it", ns, name)
		}
	case err != nil:
		return t, err
	case cluster.Status.BootstrappedAt != nil:
		return t, fmt.Errorf("TalosCluster %s/%s is bootstrapped: its nodes trust the bundle it has, which init never replaces", ns, name)
	case cluster.Spec.SecretsRef != nil && !f.force:
		return t, fmt.Errorf("TalosCluster %s/%s already names its bundle (Secret %s): --force replaces it", ns, name, cluster.Spec.SecretsRef.Name)
	default:
		t.cluster, t.endpoint, t.talosVersion = cluster, cluster.Spec.ControlPlane.Endpoint, cluster.Spec.TalosVersion
		if cluster.Spec.SecretsRef != nil {
			t.secretName = cluster.Spec.SecretsRef.Name
		}
	}
	return t, nil
}

// storeBundle stores bundle in Secret ns/secretName, replacing the one
// there only when force.
func storeBundle(ctx context.Context, kube kubernetes.Interface, ns, cluster, secretName string, bundle []byte, force bool) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns,
			Labels: map[string]string{"ichor.dev/cluster": cluster, "app.kubernetes.io/managed-by": "ichor-init"}},
		Type: secretsbundle.SecretType,
		Data: map[string][]byte{secretsbundle.BundleKey: bundle},
	}
	_, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if !force {
			return fmt.Errorf("Secret %s/%s exists: --force replaces the bundle in it", ns, secretName)
		}
		_, err = kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("store the bundle in Secret %s/%s: %w", ns, secretName, err)
	}
	return nil
}

// useBundle creates the TalosCluster naming the stored bundle, or points
// the one that exists at it (spec.secretsRef, through its subresource).
func (f *initOptions) useBundle(ctx context.Context, o *Options, c versioned.Interface, ns, name string, t initTarget) error {
	ref := &v1alpha1.LocalSecretReference{Name: t.secretName}
	if t.cluster == nil {
		_, err := c.IchorV1alpha1().TalosClusters(ns).Create(ctx, &v1alpha1.TalosCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.TalosClusterSpec{TalosVersion: t.talosVersion, KubernetesVersion: f.kubernetesVersion,
				ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: t.endpoint}, SecretsRef: ref},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create TalosCluster %s/%s: %w", ns, name, err)
		}
		fmt.Fprintf(o.Out, "taloscluster.ichor.dev/%s created\n", name)
		return nil
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"secretsRef": ref}})
	if err != nil {
		return err
	}
	if _, err := c.IchorV1alpha1().TalosClusters(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "secret-references"); err != nil {
		return fmt.Errorf("point TalosCluster %s/%s at Secret %s: %w", ns, name, t.secretName, err)
	}
	fmt.Fprintf(o.Out, "taloscluster.ichor.dev/%s uses secret/%s\n", name, t.secretName)
	return nil
}

// resealBundle seals the bundle cluster name uses now, read from its
// Secret as the user, over the sealed copy here.
func resealBundle(ctx context.Context, o *Options, name, passphraseFile string) error {
	c, ns, err := o.clientIn()
	if err != nil {
		return err
	}
	kube, err := o.kube()
	if err != nil {
		return err
	}
	cluster, err := c.IchorV1alpha1().TalosClusters(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if r := cluster.Status.CARotation; r != nil {
		return fmt.Errorf("TalosOperation %s is rotating TalosCluster %s/%s's Talos API CA (phase %s): its bundle takes the new CA when the rotation completes; reseal then",
			r.Operation, ns, name, r.Phase)
	}
	secretName := secretsbundle.SecretName(cluster)
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("reading Secret %s/%s needs get on secrets in namespace %s, which no Ichor role holds: use an identity that may read the bundle", ns, secretName, ns)
	}
	if err != nil {
		return fmt.Errorf("read the bundle of TalosCluster %s/%s: %w", ns, name, err)
	}
	data := secret.Data[secretsbundle.BundleKey]
	bundle, err := secretsbundle.Parse(data)
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w", ns, secretName, err)
	}
	if ca := cluster.Status.KubernetesCA; ca != "" && ca != string(bundle.Certs.K8s.Crt) {
		return fmt.Errorf("Secret %s/%s holds a bundle whose Kubernetes CA is not the one TalosCluster %s shows (status.kubernetesCA): nothing sealed", ns, secretName, name)
	}
	passphrase, err := readPassphrase(o, passphraseFile, true)
	if err != nil {
		return err
	}
	dir, err := clusterDir(name)
	if err != nil {
		return err
	}
	commit, abort, err := seal(dir, &sealed{Cluster: name, Namespace: ns, Endpoint: cluster.Spec.ControlPlane.Endpoint, Bundle: string(data)}, passphrase, true)
	if err != nil {
		return err
	}
	if err := commit(); err != nil {
		abort()
		return err
	}
	fmt.Fprintf(o.Out, "sealed %s from secret/%s, the bundle TalosCluster %s uses now (keep the passphrase apart from it)\n",
		filepath.Join(dir, sealedFile), secretName, name)
	return nil
}
