package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// validCluster is an internal TalosCluster with the v1alpha1 defaults already
// filled in by hand.
func validCluster() *ichor.TalosCluster {
	return &ichor.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "team-a", ResourceVersion: "1"},
		Spec: ichor.TalosClusterSpec{
			TalosVersion:      "v1.13.0",
			KubernetesVersion: "v1.36.0",
			ControlPlane:      ichor.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
			Network: ichor.ClusterNetwork{
				PodCIDRs:     []string{"10.244.0.0/16"},
				ServiceCIDRs: []string{"10.96.0.0/12"},
				DNSDomain:    "cluster.local",
				CNI:          ichor.CNISpec{Name: ichor.CNIFlannel},
			},
		},
	}
}

func TestValidateTalosCluster(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *ichor.TalosCluster)
		want   []fe
	}{
		{name: "valid", mutate: func(c *ichor.TalosCluster) {}},
		{
			name: "valid dual stack",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Network.PodCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/56"}
				c.Spec.Network.ServiceCIDRs = []string{"fd00:10:96::/112", "10.96.0.0/12"}
			},
		},
		{
			name: "valid with every option",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.ControlPlane.Endpoint = "https://k8s.example.com"
				c.Spec.Network.CNI.Name = ichor.CNICilium
				c.Spec.CiliumValues = "kubeProxyReplacement: true\nipam:\n  mode: kubernetes\n"
				c.Spec.SecretsRef = &ichor.LocalSecretReference{Name: "prod-secrets"}
				c.Spec.Authentication = &ichor.ClusterAuthentication{IssuerURL: "https://issuer.example.com/realms/x", ClientID: "kubernetes",
					UsernameClaim: "email", GroupsClaim: "https://example.com/claims/groups", CABundle: selfSignedPEM()}
				c.Spec.Security.KubeletServingCertificates = ichor.KubeletServingCertificates{Enabled: true, VerifyFromAPIServer: true}
				c.Spec.Paused = true
			},
		},
		{
			name:   "bad metadata",
			mutate: func(c *ichor.TalosCluster) { c.Name = "Prod_1"; c.Namespace = "" },
			want:   []fe{invalid("metadata.name"), required("metadata.namespace")},
		},
		{
			name:   "missing versions",
			mutate: func(c *ichor.TalosCluster) { c.Spec.TalosVersion = ""; c.Spec.KubernetesVersion = "" },
			want:   []fe{required("spec.talosVersion"), required("spec.kubernetesVersion")},
		},
		{
			name:   "semver without leading v",
			mutate: func(c *ichor.TalosCluster) { c.Spec.TalosVersion = "1.13.0" },
			want:   []fe{invalid("spec.talosVersion")},
		},
		{
			name:   "version that is not semver",
			mutate: func(c *ichor.TalosCluster) { c.Spec.KubernetesVersion = "v1.37" },
			want:   []fe{invalid("spec.kubernetesVersion")},
		},
		{
			name:   "a Talos release Ichor does not manage",
			mutate: func(c *ichor.TalosCluster) { c.Spec.TalosVersion = "v1.12.5" },
			want:   []fe{invalid("spec.talosVersion")},
		},
		{
			name:   "a Kubernetes the Talos release does not run",
			mutate: func(c *ichor.TalosCluster) { c.Spec.KubernetesVersion = "v1.37.0" },
			want:   []fe{invalid("spec.kubernetesVersion")},
		},
		{
			name:   "Talos v1.14 runs Kubernetes v1.37",
			mutate: func(c *ichor.TalosCluster) { c.Spec.TalosVersion, c.Spec.KubernetesVersion = "v1.14.1", "v1.37.0" },
		},
		{
			name:   "endpoint missing",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "" },
			want:   []fe{required("spec.controlPlane.endpoint")},
		},
		{
			name:   "endpoint over http",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "http://10.5.0.2:6443" },
			want:   []fe{invalid("spec.controlPlane.endpoint")},
		},
		{
			name:   "endpoint without host",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "https://:6443" },
			want:   []fe{invalid("spec.controlPlane.endpoint")},
		},
		{
			name:   "endpoint with credentials",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "https://admin:pw@10.5.0.2:6443" },
			want:   []fe{invalid("spec.controlPlane.endpoint")},
		},
		{
			name:   "endpoint with query",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "https://10.5.0.2:6443/?x=1" },
			want:   []fe{invalid("spec.controlPlane.endpoint")},
		},
		{
			name:   "endpoint port out of range",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "https://10.5.0.2:70000" },
			want:   []fe{invalid("spec.controlPlane.endpoint")},
		},
		{
			name:   "no networks",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.PodCIDRs = nil; c.Spec.Network.ServiceCIDRs = []string{} },
			want:   []fe{required("spec.network.podCIDRs"), required("spec.network.serviceCIDRs")},
		},
		{
			name: "too many pod networks",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Network.PodCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/56", "10.245.0.0/16"}
			},
			want: []fe{tooMany("spec.network.podCIDRs")},
		},
		{
			name:   "repeated pod network",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.PodCIDRs = []string{"10.244.0.0/16", "10.244.0.0/16"} },
			want:   []fe{duplicate("spec.network.podCIDRs[1]")},
		},
		{
			name:   "two pod networks of one family",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.PodCIDRs = []string{"10.244.0.0/16", "10.245.0.0/16"} },
			want:   []fe{invalid("spec.network.podCIDRs[1]")},
		},
		{
			name:   "two IPv6 service networks",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.ServiceCIDRs = []string{"fd00:1::/112", "fd00:2::/112"} },
			want:   []fe{invalid("spec.network.serviceCIDRs[1]")},
		},
		{
			name:   "service networks of another IP family than the pod networks",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.ServiceCIDRs = []string{"fd00:1::/112"} },
			want:   []fe{invalid("spec.network.serviceCIDRs")},
		},
		{
			name: "dual-stack pod and service networks",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Network.PodCIDRs = []string{"10.244.0.0/16", "fd00:10::/56"}
				c.Spec.Network.ServiceCIDRs = []string{"fd00:1::/112", "10.96.0.0/12"}
			},
		},
		{
			name:   "pod network not canonical",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.PodCIDRs = []string{"10.244.1.0/16"} },
			want:   []fe{invalid("spec.network.podCIDRs[0]")},
		},
		{
			name:   "service network not a CIDR",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.ServiceCIDRs = []string{"10.96.0.0/12", "ten-ninety-six"} },
			want:   []fe{invalid("spec.network.serviceCIDRs[1]")},
		},
		{
			name:   "dns domain missing",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.DNSDomain = "" },
			want:   []fe{required("spec.network.dnsDomain")},
		},
		{
			name:   "dns domain invalid",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.DNSDomain = "Cluster_Local" },
			want:   []fe{invalid("spec.network.dnsDomain")},
		},
		{
			name:   "cni missing",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.CNI.Name = "" },
			want:   []fe{required("spec.network.cni.name")},
		},
		{
			name:   "cni unknown",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.CNI.Name = "calico" },
			want:   []fe{notSupported("spec.network.cni.name")},
		},
		{
			name:   "cilium values without cilium",
			mutate: func(c *ichor.TalosCluster) { c.Spec.CiliumValues = "ipam:\n  mode: kubernetes\n" },
			want:   []fe{forbidden("spec.ciliumValues")},
		},
		{
			name: "cilium values that are a list",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Network.CNI.Name = ichor.CNICilium
				c.Spec.CiliumValues = "- a\n- b\n"
			},
			want: []fe{invalid("spec.ciliumValues")},
		},
		{
			name:   "secrets ref without name",
			mutate: func(c *ichor.TalosCluster) { c.Spec.SecretsRef = &ichor.LocalSecretReference{} },
			want:   []fe{required("spec.secretsRef.name")},
		},
		{
			name:   "secrets ref with bad name",
			mutate: func(c *ichor.TalosCluster) { c.Spec.SecretsRef = &ichor.LocalSecretReference{Name: "Prod Secrets"} },
			want:   []fe{invalid("spec.secretsRef.name")},
		},
		{
			name: "authentication incomplete",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Authentication = &ichor.ClusterAuthentication{IssuerURL: "http://issuer.example.com"}
			},
			want: []fe{invalid("spec.authentication.issuerURL"), required("spec.authentication.clientID"),
				required("spec.authentication.usernameClaim"), required("spec.authentication.groupsClaim")},
		},
		{
			name: "authentication with flag-splitting claims and a CA that is not one",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Authentication = &ichor.ClusterAuthentication{IssuerURL: "https://issuer.example.com", ClientID: "a,b",
					UsernameClaim: "email=x", GroupsClaim: strings.Repeat("g", 257), CABundle: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}
			},
			want: []fe{invalid("spec.authentication.clientID"), invalid("spec.authentication.usernameClaim"),
				tooLong("spec.authentication.groupsClaim"), invalid("spec.authentication.caBundle")},
		},
		{
			name: "verifyFromAPIServer without serving certificates",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Security.KubeletServingCertificates.VerifyFromAPIServer = true
			},
			want: []fe{forbidden("spec.security.kubeletServingCertificates.verifyFromAPIServer")},
		},
		{
			name: "disk encryption with an unknown key",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Security.DiskEncryption = &ichor.DiskEncryption{Key: "static"}
			},
			want: []fe{notSupported("spec.security.diskEncryption.key")},
		},
		{
			name: "a schematic the factory builds",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Schematic = &ichor.Schematic{SystemExtensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"},
					ExtraKernelArgs: []string{"net.ifnames=0"}, Overlay: &ichor.SchematicOverlay{Name: "rpi_generic", Image: "siderolabs/sbc-raspberrypi", Options: "configTxt: x\n"}}
			},
		},
		{
			name: "a schematic the factory would not build",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Schematic = &ichor.Schematic{SystemExtensions: []string{"iscsi-tools", "siderolabs/a", "siderolabs/a", "Siderolabs/B"},
					ExtraKernelArgs: []string{"a b", ""}, Overlay: &ichor.SchematicOverlay{Image: "https://x/y", Options: "[1, 2]"}}
			},
			want: []fe{invalid("spec.schematic.systemExtensions[0]"), duplicate("spec.schematic.systemExtensions[2]"), invalid("spec.schematic.systemExtensions[3]"),
				invalid("spec.schematic.extraKernelArgs[0]"), invalid("spec.schematic.extraKernelArgs[1]"),
				required("spec.schematic.overlay.name"), invalid("spec.schematic.overlay.image"), invalid("spec.schematic.overlay.options")},
		},
		{
			name:   "empty spec",
			mutate: func(c *ichor.TalosCluster) { c.Spec = ichor.TalosClusterSpec{} },
			want: []fe{
				required("spec.talosVersion"), required("spec.kubernetesVersion"), required("spec.controlPlane.endpoint"),
				required("spec.network.podCIDRs"), required("spec.network.serviceCIDRs"), required("spec.network.dnsDomain"),
				required("spec.network.cni.name"),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validCluster()
			tc.mutate(c)
			expectErrors(t, ValidateTalosCluster(c), tc.want...)
		})
	}
}

// TestValidateTalosClusterDefaulted checks that the v1alpha1 defaults turn the
// smallest cluster a user can write into a valid one.
func TestValidateTalosClusterDefaulted(t *testing.T) {
	in := &v1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "team-a"},
		Spec: v1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.13.0",
			KubernetesVersion: "v1.36.0",
			ControlPlane:      v1alpha1.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
		},
	}
	out := &ichor.TalosCluster{}
	defaultedInternal(t, in, out)
	expectErrors(t, ValidateTalosCluster(out))
	if got := out.Spec.Network.CNI.Name; got != ichor.CNIFlannel {
		t.Errorf("cni defaulted to %q, want flannel", got)
	}
}

func TestValidateTalosClusterUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *ichor.TalosCluster)
		want   []fe
	}{
		{name: "unchanged", mutate: func(c *ichor.TalosCluster) {}},
		{
			name: "versions, endpoint, cni and pause may change",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.TalosVersion = "v1.14.1"
				c.Spec.KubernetesVersion = "v1.37.0"
				c.Spec.ControlPlane.Endpoint = "https://k8s.example.com:6443"
				c.Spec.Network.CNI.Name = ichor.CNINone
				c.Spec.Paused = true
			},
		},
		{
			name:   "pod networks are immutable",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.PodCIDRs = []string{"10.100.0.0/16"} },
			want:   []fe{invalid("spec.network.podCIDRs")},
		},
		{
			name: "adding a second family is a change too",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Network.ServiceCIDRs = append(c.Spec.Network.ServiceCIDRs, "fd00:10:96::/112")
			},
			want: []fe{invalid("spec.network.serviceCIDRs")},
		},
		{
			name:   "dns domain is immutable",
			mutate: func(c *ichor.TalosCluster) { c.Spec.Network.DNSDomain = "prod.local" },
			want:   []fe{invalid("spec.network.dnsDomain")},
		},
		{
			name:   "spec is still validated",
			mutate: func(c *ichor.TalosCluster) { c.Spec.ControlPlane.Endpoint = "10.5.0.2:6443" },
			want:   []fe{invalid("spec.controlPlane.endpoint")},
		},
		{
			name: "subresource-owned fields change only there",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Network.CNI.Name = ichor.CNICilium
				c.Spec.CiliumValues = "ipam: {mode: kubernetes}\n"
				c.Spec.SecretsRef = &ichor.LocalSecretReference{Name: "other"}
				c.Spec.Authentication = &ichor.ClusterAuthentication{IssuerURL: "https://issuer.example.com/realms/x", ClientID: "kubernetes",
					UsernameClaim: "email", GroupsClaim: "groups"}
			},
			want: []fe{forbidden("spec.ciliumValues"), forbidden("spec.secretsRef"), forbidden("spec.authentication")},
		},
		{
			name: "the schematic changes only through its subresource",
			mutate: func(c *ichor.TalosCluster) {
				c.Spec.Schematic = &ichor.Schematic{SystemExtensions: []string{"siderolabs/iscsi-tools"}}
			},
			want: []fe{forbidden("spec.schematic")},
		},
		{
			name:   "update without resource version",
			mutate: func(c *ichor.TalosCluster) { c.ResourceVersion = "" },
			want:   []fe{invalid("metadata.resourceVersion")},
		},
		{
			name:   "rename",
			mutate: func(c *ichor.TalosCluster) { c.Name = "staging" },
			want:   []fe{invalid("metadata.name")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validCluster()
			c := old.DeepCopy()
			tc.mutate(c)
			expectErrors(t, ValidateTalosClusterUpdate(c, old), tc.want...)
		})
	}

	// A cluster stored at a release that has since left the table can be
	// updated, until its versions change; then they must be managed ones.
	old := validCluster()
	old.Spec.TalosVersion = "v1.12.5"
	c := old.DeepCopy()
	c.Spec.Paused = true
	expectErrors(t, ValidateTalosClusterUpdate(c, old))
	c.Spec.KubernetesVersion = "v1.35.0"
	expectErrors(t, ValidateTalosClusterUpdate(c, old), invalid("spec.talosVersion"))
}

// TestValidateContractMove: spec.talosVersion, the contract, moves to a
// newer minor release only once the machines run it.
func TestValidateContractMove(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, running string
		want                    []fe
	}{
		{"machines on v1.13 refuse the v1.14 contract", "v1.13.0", "v1.14.1", "v1.13.5", []fe{forbidden("spec.talosVersion")}},
		{"machines on v1.14 take it", "v1.13.0", "v1.14.1", "v1.14.1", nil},
		{"no machine reports yet", "v1.13.0", "v1.14.1", "", nil},
		{"a patch release of the same contract", "v1.13.0", "v1.13.5", "v1.13.0", nil},
		{"back to an older contract", "v1.14.1", "v1.13.0", "v1.14.1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := validCluster()
			old.Spec.TalosVersion, old.Status.TalosVersion = tc.from, tc.running
			c := old.DeepCopy()
			c.Spec.TalosVersion = tc.to
			errs := ValidateTalosClusterUpdate(c, old)
			expectErrors(t, errs, tc.want...)
			if len(tc.want) > 0 && !strings.Contains(errs.ToAggregate().Error(), "talos-upgrade") {
				t.Errorf("the refusal does not say what to do: %v", errs)
			}
		})
	}
}

func TestValidateTalosClusterStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.TalosClusterStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.TalosClusterStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.TalosClusterStatus) {
				s.Phase = ichor.ClusterPhaseReady
				s.ObservedGeneration = 3
				s.Conditions = []metav1.Condition{goodCondition("SecretsReady"), goodCondition("Bootstrapped")}
				s.Machines = ichor.MachineCounts{Total: 3, Ready: 3, ControlPlanes: 1, Workers: 2}
				s.TalosVersion = "v1.13.0"
				s.KubernetesVersion = "v1.37.2"
				s.BootstrappedAt = &fixedTime
			},
		},
		{
			name:   "unknown phase",
			mutate: func(s *ichor.TalosClusterStatus) { s.Phase = "Exploded" },
			want:   []fe{notSupported("status.phase")},
		},
		{
			name: "rotations under way",
			mutate: func(s *ichor.TalosClusterStatus) {
				s.CARotation = &ichor.CARotationStatus{Operation: "rotate", Phase: ichor.CARotationIssueNew, Kubernetes: true}
				s.DiskKeySlot = 1
				s.DiskKeyRotation = &ichor.DiskKeyRotationStatus{Operation: "rekey", Phase: ichor.DiskKeyRotationAddNew, Slot: 0}
			},
		},
		{
			name: "a CA rotation of no CA, a disk key rotation into its own slot, a slot past LUKS2's",
			mutate: func(s *ichor.TalosClusterStatus) {
				s.CARotation = &ichor.CARotationStatus{Operation: "rotate", Phase: ichor.CARotationAcceptNew}
				s.DiskKeySlot = 32
				s.DiskKeyRotation = &ichor.DiskKeyRotationStatus{Operation: "rekey", Phase: "Sideways", Slot: 32}
			},
			want: []fe{required("status.caRotation"), notSupported("status.diskKeyRotation.phase"), invalid("status.diskKeyRotation.slot"),
				invalid("status.diskKeyRotation.slot"), invalid("status.diskKeySlot")},
		},
		{
			name:   "negative observed generation",
			mutate: func(s *ichor.TalosClusterStatus) { s.ObservedGeneration = -1 },
			want:   []fe{invalid("status.observedGeneration")},
		},
		{
			name:   "versions without leading v",
			mutate: func(s *ichor.TalosClusterStatus) { s.TalosVersion = "1.13.0"; s.KubernetesVersion = "1.37.2" },
			want:   []fe{invalid("status.talosVersion"), invalid("status.kubernetesVersion")},
		},
		{
			name: "an operation's batch of workers",
			mutate: func(s *ichor.TalosClusterStatus) {
				s.Disruption = &ichor.DisruptionStatus{Machine: "w-1", MachineUID: "u1", Action: ichor.DisruptionReboot, Since: fixedTime, Operation: "reboot",
					Batch: []ichor.DisruptionMember{{Machine: "w-2", MachineUID: "u2"}}}
			},
		},
		{
			name: "bad batches",
			mutate: func(s *ichor.TalosClusterStatus) {
				s.Disruption = &ichor.DisruptionStatus{Machine: "w-1", MachineUID: "u1", Action: ichor.DisruptionReboot, Since: fixedTime,
					Batch: []ichor.DisruptionMember{{Machine: "w-1", MachineUID: "u1"}, {Machine: "W_2"}}}
			},
			want: []fe{forbidden("status.disruption.batch"), duplicate("status.disruption.batch[0].machine"),
				invalid("status.disruption.batch[1].machine"), required("status.disruption.batch[1].machineUID")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.TalosClusterStatus)
			want   []fe
		}{bc.name, func(s *ichor.TalosClusterStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validCluster()
			c := old.DeepCopy()
			tc.mutate(&c.Status)
			expectErrors(t, ValidateTalosClusterStatusUpdate(c, old), tc.want...)
		})
	}
}
