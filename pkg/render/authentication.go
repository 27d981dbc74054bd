package render

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/security"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"ichor.dev/ichor/pkg/apis/ichor"
	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// oidcSigningAlgs are the asymmetric algorithms kube-apiserver accepts on
// an OIDC token (its default is RS256 only; Ichor's own issuer signs ES256).
const oidcSigningAlgs = "RS256,RS384,RS512,ES256,ES384,ES512,PS256,PS384,PS512"

// Where a control plane's trusted roots are: Talos writes the system roots
// and every TrustedRootsConfig into the host's bundle, and kube-apiserver
// reads it through a read-only mount of the directory at the same path.
const (
	hostTrustedRootsDir    = "/etc/ssl/certs"
	hostTrustedRootsBundle = hostTrustedRootsDir + "/ca-certificates.crt"
	// OIDCRootsName names the TrustedRootsConfig of the issuer's caBundle.
	OIDCRootsName = "ichor-oidc-issuer"
)

// withOIDCTrust has a control plane's kube-apiserver accept tokens of the
// cluster's OIDC issuer as ichor.OIDCPrefix users and groups (never a
// system: name). From the v1.14 contract on, a JWT authenticator of the
// KubeAuthenticationConfig document (structured authentication, which
// kube-apiserver reloads live); before, its --oidc-* flags (a change of them
// restarts kube-apiserver and needs no reboot).
func withOIDCTrust(cfg config.Provider, contract *config.VersionContract, a *ichorv1alpha1.ClusterAuthentication) (config.Provider, error) {
	if multidoc(contract) {
		return editDocument(cfg, k8s.KubeAuthenticationConfig, k8s.DefaultAuthenticationConfig, func(d *k8s.KubeAuthenticationConfigV1Alpha1) error {
			if d.AuthConfig.Object == nil {
				d.AuthConfig.Object = map[string]any{}
			}
			jwt, _ := d.AuthConfig.Object["jwt"].([]any)
			d.AuthConfig.Object["jwt"] = append(jwt, jwtAuthenticator(a))
			return nil
		})
	}
	return withOIDCFlags(cfg, a)
}

// jwtAuthenticator is the issuer's entry of a structured authentication
// configuration (apiserver.config.k8s.io AuthenticationConfiguration, jwt[]).
// The issuer's CA is written inline; a username taken from the email claim
// also requires email_verified to be true, so a token that does not say
// the address was verified names nobody. kube-apiserver accepts every
// asymmetric algorithm here, as Ichor's flags ask of the v1.13 layout.
func jwtAuthenticator(a *ichorv1alpha1.ClusterAuthentication) map[string]any {
	issuer := map[string]any{"url": a.IssuerURL, "audiences": []any{a.ClientID}}
	if a.CABundle != "" {
		issuer["certificateAuthority"] = strings.TrimSpace(a.CABundle) + "\n"
	}
	mappings := map[string]any{"username": map[string]any{"claim": a.UsernameClaim, "prefix": ichor.OIDCPrefix}}
	if a.GroupsClaim != "" {
		mappings["groups"] = map[string]any{"claim": a.GroupsClaim, "prefix": ichor.OIDCPrefix}
	}
	out := map[string]any{"issuer": issuer, "claimMappings": mappings}
	if a.UsernameClaim == "email" {
		out["claimValidationRules"] = []any{map[string]any{
			"expression": "has(claims.email_verified) && claims.email_verified == true",
			"message":    "the token does not say its email address was verified",
		}}
	}
	return out
}

// withOIDCFlags is the v1.13 layout's trust: kube-apiserver's --oidc-* flags
// (cluster.apiServer, typed). The issuer's own CA, when it has one, becomes
// a TrustedRootsConfig, which Talos applies live, read through a read-only
// mount of the host's bundle.
func withOIDCFlags(cfg config.Provider, a *ichorv1alpha1.ClusterAuthentication) (config.Provider, error) {
	cfg, err := cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		if c.ClusterConfig == nil {
			return fmt.Errorf("config has no cluster section")
		}
		if c.ClusterConfig.APIServerConfig == nil { //nolint:staticcheck // the v1.13 layout
			c.ClusterConfig.APIServerConfig = &talosv1alpha1.APIServerConfig{} //nolint:staticcheck // the v1.13 layout
		}
		api := c.ClusterConfig.APIServerConfig //nolint:staticcheck // the v1.13 layout
		if api.ExtraArgsConfig == nil {
			api.ExtraArgsConfig = meta.Args{}
		}
		set := func(k, v string) { api.ExtraArgsConfig[k] = meta.NewArgValue(v, nil) }
		set("oidc-issuer-url", a.IssuerURL)
		set("oidc-client-id", a.ClientID)
		set("oidc-username-claim", a.UsernameClaim)
		set("oidc-username-prefix", ichor.OIDCPrefix)
		set("oidc-groups-claim", a.GroupsClaim)
		set("oidc-groups-prefix", ichor.OIDCPrefix)
		set("oidc-signing-algs", oidcSigningAlgs)
		if a.CABundle != "" {
			set("oidc-ca-file", hostTrustedRootsBundle)
			api.ExtraVolumesConfig = append(api.ExtraVolumesConfig, talosv1alpha1.VolumeMountConfig{
				VolumeHostPath: hostTrustedRootsDir, VolumeMountPath: hostTrustedRootsDir, VolumeReadOnly: true,
			})
		}
		return nil
	})
	if err != nil || a.CABundle == "" {
		return cfg, err
	}
	roots := security.NewTrustedRootsConfigV1Alpha1()
	roots.MetaName = OIDCRootsName
	roots.Certificates = strings.TrimSpace(a.CABundle) + "\n"
	return container.New(append(cfg.Documents(), roots)...)
}
