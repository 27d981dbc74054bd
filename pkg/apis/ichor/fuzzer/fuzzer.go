// Package fuzzer holds the randfill functions the round-trip test uses to build
// random ichor.dev objects.
//
// Decoding an object applies the v1alpha1 defaults (see
// pkg/apis/ichor/v1alpha1/defaults.go), so a fuzzed internal object only
// survives internal -> v1alpha1 -> JSON -> v1alpha1 -> internal if defaulting
// has nothing left to fill. The functions below fill exactly the fields the
// defaulters would fill, and only when they are empty; every other field, and
// every value that is already set, stays random.
package fuzzer

import (
	"fmt"
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// Funcs returns the fuzzer functions for the ichor.dev API group.
var Funcs = func(codecs runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(s *ichor.TalosClusterSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			n := &s.Network
			if len(n.PodCIDRs) == 0 {
				n.PodCIDRs = []string{fmt.Sprintf("10.%d.0.0/16", c.Intn(256))}
			}
			if len(n.ServiceCIDRs) == 0 {
				n.ServiceCIDRs = []string{fmt.Sprintf("172.%d.0.0/16", 16+c.Intn(16))}
			}
			if n.DNSDomain == "" {
				n.DNSDomain = nonEmpty(c)
			}
			if n.CNI.Name == "" {
				n.CNI.Name = pick(c, ichor.CNIFlannel, ichor.CNICilium, ichor.CNINone)
			}
		},
		func(s *ichor.TalosMachineSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			// The defaulter appends :50000 to anything that reads as a bare host;
			// an empty address is left alone.
			if c.Intn(10) == 0 {
				s.Address = ""
			} else {
				s.Address = hostPort(c)
			}
			if s.ClusterName != "" && s.Role == "" {
				s.Role = pick(c, ichor.MachineRoleControlPlane, ichor.MachineRoleWorker)
			}
		},
		func(s *ichor.TalosOperationSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			// A random string is almost never a real type: pick a real one half
			// of the time so that node-reset and its parameters are exercised.
			if c.Bool() {
				s.Type = pick(c, ichor.OperationTypes()...)
			}
			if s.Type == ichor.OperationNodeReset && s.NodeReset == nil {
				r := &ichor.NodeResetParameters{}
				c.Fill(r)
				s.NodeReset = r
			}
			if s.Type == ichor.OperationCARotation && s.CARotation == nil {
				r := &ichor.CARotationParameters{}
				c.Fill(r)
				s.CARotation = r
			}
			if s.Type == ichor.OperationKeyRotation && s.KeyRotation == nil {
				r := &ichor.KeyRotationParameters{}
				c.Fill(r)
				s.KeyRotation = r
			}
		},
		func(p *ichor.KeyRotationParameters, c randfill.Continue) {
			c.FillNoCustom(p)
			if len(p.Keys) == 0 {
				p.Keys = []ichor.RotatableKey{ichor.KeyDiskEncryption}
			}
		},
		func(p *ichor.CARotationParameters, c randfill.Continue) {
			c.FillNoCustom(p)
			if p.Talos == nil {
				t := c.Bool()
				p.Talos = &t
			}
			if p.Kubernetes == nil {
				k := c.Bool()
				p.Kubernetes = &k
			}
		},
		func(p *ichor.NodeResetParameters, c randfill.Continue) {
			c.FillNoCustom(p)
			if p.Graceful == nil {
				g := c.Bool()
				p.Graceful = &g
			}
			if p.Wipe == "" {
				p.Wipe = pick(c, ichor.WipeModeAll, ichor.WipeModeSystemDisk, ichor.WipeModeUserDisks)
			}
		},
		func(s *ichor.MachineReclaimSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.Role == "" {
				s.Role = pick(c, ichor.MachineRoleControlPlane, ichor.MachineRoleWorker)
			}
			if s.Wipe == "" {
				s.Wipe = pick(c, ichor.WipeModeAll, ichor.WipeModeSystemDisk, ichor.WipeModeUserDisks)
			}
			if s.Graceful == nil {
				g := c.Bool()
				s.Graceful = &g
			}
			if s.Unmanaged != nil {
				s.Unmanaged.Address = hostPort(c)
			}
		},
		func(a *ichor.ClusterAuthentication, c randfill.Continue) {
			c.FillNoCustom(a)
			if a.UsernameClaim == "" {
				a.UsernameClaim = "email"
			}
			if a.GroupsClaim == "" {
				a.GroupsClaim = "groups"
			}
		},
		func(b *ichor.ClusterBackup, c randfill.Continue) {
			c.FillNoCustom(b)
			if b.Compression == "" {
				b.Compression = pick(c, ichor.BackupCompressionZstd, ichor.BackupCompressionNone)
			}
		},
		func(s *ichor.InstallationSettings, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.ScanInterval == nil {
				s.ScanInterval = randDuration(c)
			}
			if s.CredentialLifetimes.TalosCredential == nil {
				s.CredentialLifetimes.TalosCredential = randDuration(c)
			}
			if s.CredentialLifetimes.ReaderTalosconfig == nil {
				s.CredentialLifetimes.ReaderTalosconfig = randDuration(c)
			}
		},
	}
}

// pick returns one of the given values at random.
func pick[T any](c randfill.Continue, values ...T) T {
	return values[c.Intn(len(values))]
}

// nonEmpty returns a random string of at least one character.
func nonEmpty(c randfill.Continue) string {
	for {
		if s := c.String(0); s != "" {
			return s
		}
	}
}

// hostPort returns a Talos API address that the defaulter leaves as it is:
// an IPv4 address, an IPv6 address or a DNS name, with a port.
func hostPort(c randfill.Continue) string {
	port := strconv.Itoa(1 + c.Intn(65535))
	var host string
	switch c.Intn(3) {
	case 0:
		host = net.IPv4(byte(c.Intn(256)), byte(c.Intn(256)), byte(c.Intn(256)), byte(c.Intn(256))).String()
	case 1:
		ip := make(net.IP, net.IPv6len)
		for i := range ip {
			ip[i] = byte(c.Intn(256))
		}
		ip[0] = 0xfd // keep it an IPv6 address, never an IPv4-mapped one
		host = ip.String()
	default:
		host = fmt.Sprintf("node-%d.example.com", c.Intn(1000))
	}
	return net.JoinHostPort(host, port)
}

// randDuration returns a random non-negative duration of whole seconds.
func randDuration(c randfill.Continue) *metav1.Duration {
	return &metav1.Duration{Duration: time.Duration(c.Int63n(int64(24*time.Hour/time.Second))) * time.Second}
}
