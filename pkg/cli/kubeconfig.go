package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"ichor.dev/ichor/pkg/apis/ichor"
)

func newKubeconfig(o *Options) *cobra.Command {
	var (
		username string
		use      bool
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER --username EMAIL",
		Short: "Add a context for a managed cluster, signed in with your OpenID sign-in",
		Long: `kubeconfig adds a context for the managed cluster CLUSTER to your kubeconfig: the cluster's
endpoint and Kubernetes CA certificate from its TalosCluster, and a user that runs ichor auth token
with the sign-in at the OpenID provider the cluster trusts (its spec.authentication), so that you
act there as oidc:<your name>, in groups oidc:<your groups>, as RBAC of that cluster allows. It
holds no secret. Sign in first with ichor login --oidc --no-kubeconfig at that provider, with the
client the cluster trusts: a cluster's own client, never the one you sign in to Ichor with, since
whoever runs that cluster's kube-apiserver sees the tokens you send it.`,
		Example: `  ichor login --oidc --issuer https://login.example.com --client-id kubernetes --no-kubeconfig
  ichor -n demo kubeconfig demo --username olga@example.com
  kubectl --context oidc:olga@example.com@demo/demo auth whoami`,
		GroupID: "access",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&username, "username", "", "the email you signed in with at the provider")
	cmd.Flags().BoolVar(&use, "use", false, "make the new context current")
	_ = cmd.MarkFlagRequired("username")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		tc, err := c.IchorV1alpha1().TalosClusters(ns).Get(cmd.Context(), args[0], metav1.GetOptions{})
		if err != nil {
			return err
		}
		auth := tc.Spec.Authentication
		switch {
		case auth == nil:
			return fmt.Errorf("TalosCluster %s/%s trusts no OpenID provider: an admin sets one through the talosclusters/authentication subresource", ns, tc.Name)
		case tc.Status.KubernetesCA == "":
			return fmt.Errorf("TalosCluster %s/%s has no Kubernetes CA yet: its secrets bundle is not ready (see its SecretsReady condition)", ns, tc.Name)
		}
		f := signInFlags{issuer: auth.IssuerURL, username: username, oidc: true, clientID: auth.ClientID}
		path, err := signInPath(f.issuer, f.who())
		if err != nil {
			return err
		}
		if _, err := readSignIn(path); err != nil {
			if errors.Is(err, errNotSignedIn) {
				return fmt.Errorf("%s is not signed in at %s with client %s, which %s/%s trusts: run %s --no-kubeconfig",
					username, auth.IssuerURL, auth.ClientID, ns, tc.Name, f.loginHint())
			}
			return err
		}

		loader := o.Config.ToRawKubeConfigLoader()
		raw, err := loader.RawConfig()
		if err != nil {
			return err
		}
		clusterName := ns + "/" + tc.Name
		user := execUser(&f, "the ichor CLI signs you in")
		// The user ichor login --oidc wrote, unless that one is for another client.
		userName := ichor.OIDCPrefix + username
		if old, ok := raw.AuthInfos[userName]; ok && (old.Exec == nil || !slices.Equal(old.Exec.Args, user.Exec.Args)) {
			userName += "/" + auth.ClientID
		}
		if old, ok := raw.AuthInfos[userName]; !ok || !equality.Semantic.DeepEqual(old.Exec, user.Exec) {
			raw.AuthInfos[userName] = user
		}
		raw.Clusters[clusterName] = &clientcmdapi.Cluster{
			Server: tc.Spec.ControlPlane.Endpoint, CertificateAuthorityData: []byte(tc.Status.KubernetesCA),
		}
		contextName := ichor.OIDCPrefix + username + "@" + clusterName
		raw.Contexts[contextName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: userName}
		if use {
			raw.CurrentContext = contextName
		}
		if err := clientcmd.ModifyConfig(loader.ConfigAccess(), raw, false); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "Context %q reaches %s: you act there as %s<your %s>, in groups %s<your groups>.\n",
			contextName, tc.Spec.ControlPlane.Endpoint, ichor.OIDCPrefix, auth.UsernameClaim, ichor.OIDCPrefix)
		if !use {
			fmt.Fprintf(o.Out, "Use it with: kubectl --context %s …\n", contextName)
		}
		return nil
	}
	return cmd
}
