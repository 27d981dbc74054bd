package render

import (
	"slices"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// withAcceptedCAs sets the Talos API CAs and the Kubernetes CAs accepted
// besides the issuing ones, as each phase of a CA rotation has them
// (talosctl rotate-ca writes the same fields): machine.acceptedCAs, and
// the KubeAPIServerCAConfig document's acceptedCAs (cluster.acceptedCAs
// before the v1.14 contract). The issuing CAs come from the bundle in force.
func withAcceptedCAs(cfg config.Provider, contract *config.VersionContract, talos, kubernetes [][]byte) (config.Provider, error) {
	certs := func(pems [][]byte) []*x509.PEMEncodedCertificate {
		var out []*x509.PEMEncodedCertificate
		for _, crt := range pems {
			out = append(out, &x509.PEMEncodedCertificate{Crt: crt})
		}
		return out
	}
	cfg, err := cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		c.MachineConfig.MachineAcceptedCAs = certs(talos)
		if !multidoc(contract) {
			c.ClusterConfig.ClusterAcceptedCAs = certs(kubernetes) //nolint:staticcheck // the v1.13 layout
		}
		return nil
	})
	if err != nil || !multidoc(contract) {
		return cfg, err
	}
	// The generator writes a control plane's CA as issuingCA, with its key,
	// and a worker's as its first accepted CA, without: the rotation's other
	// CA comes after what it wrote, as cluster.acceptedCAs comes after
	// cluster.ca.
	return editDocument(cfg, k8s.KubeAPIServerCAConfig, nil, func(d *k8s.KubeAPIServerCAConfigV1Alpha1) error {
		for _, crt := range kubernetes {
			if !slices.Contains(d.APIAcceptedCAs, string(crt)) {
				d.APIAcceptedCAs = append(d.APIAcceptedCAs, string(crt))
			}
		}
		return nil
	})
}
