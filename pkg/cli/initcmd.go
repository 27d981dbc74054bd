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

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/secretsbundle"
)

func newInit(o *Options) *cobra.Command {
	var (
		passphraseFile                            string
		endpoint, talosVersion, kubernetesVersion string
		force, reseal                             bool
	)
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
	cmd.Flags().StringVar(&passphraseFile, "passphrase-file", "", "read the passphrase from this file (its first line)")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "a new cluster's spec.controlPlane.endpoint")
	cmd.Flags().StringVar(&talosVersion, "talos-version", "v1.13.0", "a new cluster's spec.talosVersion (the bundle's contract)")
	cmd.Flags().StringVar(&kubernetesVersion, "kubernetes-version", "", "a new cluster's spec.kubernetesVersion")
	cmd.Flags().BoolVar(&force, "force", false, "replace a bundle sealed here or stored for the cluster (never one a bootstrapped cluster uses)")
	cmd.Flags().BoolVar(&reseal, "reseal", false, "seal here the bundle the cluster uses now (after a CA rotation), replacing the sealed copy")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		name := args[0]
		if reseal {
			if endpoint != "" || kubernetesVersion != "" || force {
				return fmt.Errorf("--reseal seals the bundle the cluster has: it takes no --endpoint, --kubernetes-version or --force")
			}
			return resealBundle(ctx, o, name, passphraseFile)
		}
		passphrase, err := readPassphrase(o, passphraseFile, true)
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
		secretName := name + "-secrets"
		cluster, err := c.IchorV1alpha1().TalosClusters(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cluster = nil
			if endpoint == "" || kubernetesVersion == "" {
				return fmt.Errorf("TalosCluster %s/%s does not exist: give --endpoint and --kubernetes-version to create it", ns, name)
			}
		case err != nil:
			return err
		case cluster.Status.BootstrappedAt != nil:
			return fmt.Errorf("TalosCluster %s/%s is bootstrapped: its nodes trust the bundle it has, which init never replaces", ns, name)
		case cluster.Spec.SecretsRef != nil && !force:
			return fmt.Errorf("TalosCluster %s/%s already names its bundle (Secret %s): --force replaces it", ns, name, cluster.Spec.SecretsRef.Name)
		default:
			endpoint, talosVersion = cluster.Spec.ControlPlane.Endpoint, cluster.Spec.TalosVersion
			if cluster.Spec.SecretsRef != nil {
				secretName = cluster.Spec.SecretsRef.Name
			}
		}
		bundle, err := secretsbundle.Generate(talosVersion, time.Now())
		if err != nil {
			return err
		}
		dir, err := clusterDir(name)
		if err != nil {
			return err
		}
		// Sealed before it is stored, and put in place once it is: the root
		// of trust never exists only in the cluster, nor only here.
		commit, abort, err := seal(dir, &sealed{Cluster: name, Namespace: ns, Endpoint: endpoint, Bundle: string(bundle)}, passphrase, force)
		if err != nil {
			return err
		}
		stored := false
		defer func() {
			if !stored {
				abort()
			}
		}()

		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns,
				Labels: map[string]string{"ichor.dev/cluster": name, "app.kubernetes.io/managed-by": "ichor-init"}},
			Type: secretsbundle.SecretType,
			Data: map[string][]byte{secretsbundle.BundleKey: bundle},
		}
		_, err = kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			if !force {
				return fmt.Errorf("Secret %s/%s exists: --force replaces the bundle in it", ns, secretName)
			}
			_, err = kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("store the bundle in Secret %s/%s: %w", ns, secretName, err)
		}
		stored = true
		if err := commit(); err != nil {
			return fmt.Errorf("the bundle is stored in Secret %s/%s, but sealing it here failed: %w", ns, secretName, err)
		}
		fmt.Fprintf(o.Out, "sealed %s (keep the passphrase apart from it)\n", filepath.Join(dir, sealedFile))
		fmt.Fprintf(o.Out, "secret/%s stored\n", secretName)

		ref := &v1alpha1.LocalSecretReference{Name: secretName}
		if cluster == nil {
			_, err = c.IchorV1alpha1().TalosClusters(ns).Create(ctx, &v1alpha1.TalosCluster{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: v1alpha1.TalosClusterSpec{TalosVersion: talosVersion, KubernetesVersion: kubernetesVersion,
					ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: endpoint}, SecretsRef: ref},
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
			return fmt.Errorf("point TalosCluster %s/%s at Secret %s: %w", ns, name, secretName, err)
		}
		fmt.Fprintf(o.Out, "taloscluster.ichor.dev/%s uses secret/%s\n", name, secretName)
		return nil
	}
	return cmd
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
