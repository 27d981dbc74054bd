package render

import (
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// withAcceptedCAs sets machine.acceptedCAs and cluster.acceptedCAs: the
// Talos API CAs and the Kubernetes CAs accepted besides machine.ca and
// cluster.ca, as each phase of a CA rotation has them (talosctl rotate-ca
// writes the same fields). machine.ca and cluster.ca themselves come from
// the bundle in force.
func withAcceptedCAs(cfg config.Provider, talos, kubernetes [][]byte) (config.Provider, error) {
	certs := func(pems [][]byte) []*x509.PEMEncodedCertificate {
		var out []*x509.PEMEncodedCertificate
		for _, crt := range pems {
			out = append(out, &x509.PEMEncodedCertificate{Crt: crt})
		}
		return out
	}
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		c.MachineConfig.MachineAcceptedCAs = certs(talos)
		c.ClusterConfig.ClusterAcceptedCAs = certs(kubernetes)
		return nil
	})
}
