package talossim

import (
	"net/netip"
	"net/url"

	"github.com/siderolabs/crypto/x509"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	k8sres "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// The Kubernetes settings of a machine config are read through machinery's K8s* accessors, which
// take them from the documents of Talos v1.14 and later (KubeClusterConfig, KubeAPIServerCAConfig,
// KubeNetworkConfig, KubeletConfig, …) when the config has them, and from the v1alpha1 cluster and
// machine sections otherwise, so that the simulator reads both layouts alike.

// clusterEndpoint is the cluster's Kubernetes endpoint (cluster.controlPlane.endpoint, or the
// KubeClusterConfig document's), nil when cfg names none.
func clusterEndpoint(cfg talosconfig.Config) *url.URL {
	if cfg == nil {
		return nil
	}

	c := cfg.K8sClusterConfig()
	if c == nil {
		return nil
	}

	return c.ClusterEndpoint()
}

// clusterName is the cluster's name, "" when cfg names no cluster.
func clusterName(cfg talosconfig.Config) string {
	if cfg == nil {
		return ""
	}

	c := cfg.K8sClusterConfig()
	if c == nil {
		return ""
	}

	return c.ClusterName()
}

// k8sIssuingCA is the Kubernetes CA that issues the cluster's certificates, with its key: a control
// plane's cluster.ca. nil where the config holds no key (a worker's holds the certificate only).
func k8sIssuingCA(cfg talosconfig.Config) *x509.PEMEncodedCertificateAndKey {
	if cfg == nil {
		return nil
	}

	c := cfg.K8sAPIServerCAConfig()
	if c == nil {
		return nil
	}

	return c.IssuingCA()
}

// k8sAcceptedCAs are the Kubernetes CAs the config trusts: cluster.ca's certificate first (a worker's
// too, which has no key), then cluster.acceptedCAs.
func k8sAcceptedCAs(cfg talosconfig.Config) []*x509.PEMEncodedCertificate {
	if cfg == nil {
		return nil
	}

	c := cfg.K8sAPIServerCAConfig()
	if c == nil {
		return nil
	}

	return c.AcceptedCAs()
}

// k8sOtherAcceptedCAs are the Kubernetes CAs the config trusts beside the issuing one
// (cluster.acceptedCAs): machinery's AcceptedCAs lists the issuing CA's certificate first.
func k8sOtherAcceptedCAs(cfg talosconfig.Config) []*x509.PEMEncodedCertificate {
	accepted := k8sAcceptedCAs(cfg)
	if k8sIssuingCA(cfg) != nil && len(accepted) > 0 {
		return accepted[1:]
	}

	return accepted
}

// k8sNetwork is the cluster's network (cluster.network, or the KubeNetworkConfig document), with
// Talos's defaults (pod CIDR 10.244.0.0/16, service CIDR 10.96.0.0/12, cluster.local) for a config
// that has neither, as v1alpha1's cluster.network reads when it is absent.
func k8sNetwork(cfg talosconfig.Config) talosconfig.K8sNetworkConfig {
	if cfg != nil {
		if network := cfg.K8sNetworkConfig(); network != nil {
			return network
		}
	}

	return &v1alpha1.ClusterConfig{}
}

// apiServerServiceIPs are the kubernetes Service's IPs: the first address of each service CIDR.
func apiServerServiceIPs(network talosconfig.K8sNetworkConfig) []netip.Addr {
	cidrs := network.ServiceCIDRs()
	masked := make([]netip.Prefix, 0, len(cidrs))

	for _, cidr := range cidrs {
		if cidr.IsValid() {
			masked = append(masked, cidr.Masked())
		}
	}

	return k8sres.APIServerServiceAddrs(masked)
}

// prefixStrings formats CIDRs as the config writes them.
func prefixStrings(prefixes []netip.Prefix) []string {
	out := make([]string, 0, len(prefixes))
	for _, p := range prefixes {
		out = append(out, p.String())
	}

	return out
}
