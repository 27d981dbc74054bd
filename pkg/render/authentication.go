package render

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
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
// system: name), through its --oidc-* flags (cluster.apiServer,
// typed): a change of them restarts kube-apiserver and needs no reboot,
// which a file of an --authentication-config would (machine.files are
// written at boot). The issuer's own CA, when it has one, becomes a
// TrustedRootsConfig, which Talos applies live.
func withOIDCTrust(cfg config.Provider, a *ichorv1alpha1.ClusterAuthentication) (config.Provider, error) {
	cfg, err := cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		if c.ClusterConfig == nil {
			return fmt.Errorf("config has no cluster section")
		}
		if c.ClusterConfig.APIServerConfig == nil {
			c.ClusterConfig.APIServerConfig = &talosv1alpha1.APIServerConfig{}
		}
		api := c.ClusterConfig.APIServerConfig
		if api.ExtraArgsConfig == nil {
			api.ExtraArgsConfig = talosv1alpha1.Args{}
		}
		set := func(k, v string) { api.ExtraArgsConfig[k] = talosv1alpha1.NewArgValue(v, nil) }
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
