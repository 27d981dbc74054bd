package render

import (
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config"
	talosv1alpha1 "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// withAcceptedTalosCAs sets machine.acceptedCAs: the Talos API CAs the node
// accepts client certificates from besides machine.ca, as each phase of a
// Talos API CA rotation has them (talosctl rotate-ca writes the same
// fields). machine.ca itself comes from the bundle in force.
func withAcceptedTalosCAs(cfg config.Provider, accepted [][]byte) (config.Provider, error) {
	return cfg.PatchV1Alpha1(func(c *talosv1alpha1.Config) error {
		c.MachineConfig.MachineAcceptedCAs = nil
		for _, crt := range accepted {
			c.MachineConfig.MachineAcceptedCAs = append(c.MachineConfig.MachineAcceptedCAs, &x509.PEMEncodedCertificate{Crt: crt})
		}
		return nil
	})
}
