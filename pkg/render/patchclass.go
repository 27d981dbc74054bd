package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// PatchClass says who may write a machine-config field through a
// TalosConfigPatch. Anything that receives a control-plane config, or can run
// code with a node's privileges, holds the cluster's root of trust, so fields
// that hand out either are an admin's to write.
type PatchClass string

const (
	// ClassSettings are plain settings: networking, sysctls of the network
	// and memory subsystems, labels, taints, volumes. Operators write them.
	ClassSettings PatchClass = "Settings"
	// ClassPrivileged are fields that run code with a node's privileges or
	// change whom the node or cluster trusts: static pods, manifests, host
	// mounts, files, kernel modules, the installer image, component images
	// and flags, Talos API access, registries, authentication. They need the
	// update verb on talosconfigpatches/privileged (admins).
	ClassPrivileged PatchClass = "Privileged"
	// ClassBundle are the fields of the cluster's secrets bundle (see
	// SecretFields): refused to everyone, but an admin's one override.
	ClassBundle PatchClass = "Bundle"
)

// classRank orders the classes by who may write them.
var classRank = map[PatchClass]int{ClassSettings: 0, ClassPrivileged: 1, ClassBundle: 2}

// classRule is one row of the class table: a field path (elements joined by
// dots; no rule names a dotted key; "*" is any item of a list) and its
// class, with why.
type classRule struct {
	path  string
	class PatchClass
	why   string
}

// v1alpha1Classes is the class of every v1alpha1 field a patch may reach; the
// longest rule that is a prefix of a changed path decides, and a path no rule
// covers is Privileged: a field is a plain setting only when this table says so.
var v1alpha1Classes = []classRule{
	{"debug", ClassSettings, "console verbosity"},
	{"machine.network", ClassSettings, "links, addresses, routes, hostname"},
	{"machine.network.nameservers", ClassPrivileged, "resolvers decide where registries and endpoints resolve"},
	{"machine.network.extraHostEntries", ClassPrivileged, "host entries decide where registries and endpoints resolve"},
	{"machine.network.kubespan", ClassPrivileged, "KubeSpan peers join the node's network"},
	{"machine.network.interfaces.*.wireguard", ClassPrivileged, "WireGuard keys and peers join the node's network"},
	{"machine.nodeLabels", ClassSettings, "Node labels"},
	{"machine.nodeAnnotations", ClassSettings, "Node annotations"},
	{"machine.nodeTaints", ClassSettings, "Node taints"},
	{"machine.certSANs", ClassSettings, "names in the Talos API certificate"},
	{"machine.time", ClassSettings, "time servers"},
	{"machine.disks", ClassSettings, "extra disks"},
	{"machine.install.disk", ClassSettings, "the install disk"},
	{"machine.install.diskSelector", ClassSettings, "the install disk"},
	{"machine.install.wipe", ClassSettings, "wiping the install disk"},
	{"machine.kubelet.nodeIP", ClassSettings, "the kubelet's node IP"},
	{"machine.kubelet.clusterDNS", ClassSettings, "the kubelet's DNS servers"},
	{"machine.kubelet.registerWithFQDN", ClassSettings, "the Node's name"},
	{"machine.features.hostDNS", ClassSettings, "the host DNS cache"},
	{"machine.features.kubePrism", ClassSettings, "the local API load balancer"},
	{"machine.features.diskQuotaSupport", ClassSettings, "disk quotas"},
	{"machine.features.stableHostname", ClassSettings, "a stable hostname"},
	{"machine.features.nodeAddressSortAlgorithm", ClassSettings, "address order"},
	{"cluster.allowSchedulingOnControlPlanes", ClassSettings, "scheduling workloads on control planes"},
	{"cluster.discovery.enabled", ClassSettings, "cluster discovery"},
	{"cluster.apiServer.certSANs", ClassSettings, "names in the API server certificate"},
	{"cluster.etcd.advertisedSubnets", ClassSettings, "etcd's advertised networks"},
	{"cluster.etcd.listenSubnets", ClassSettings, "etcd's listening networks"},
	{"cluster.proxy.disabled", ClassSettings, "kube-proxy on or off"},
	{"cluster.proxy.mode", ClassSettings, "kube-proxy's mode"},
	{"cluster.coreDNS.disabled", ClassSettings, "CoreDNS on or off"},

	{"machine.pods", ClassPrivileged, "static pods run with the node's privileges"},
	{"machine.files", ClassPrivileged, "files are written onto the host"},
	{"machine.udev", ClassPrivileged, "udev rules run programs as root"},
	{"machine.sysfs", ClassPrivileged, "sysfs writes reach the kernel (uevent_helper runs a program)"},
	{"machine.kernel", ClassPrivileged, "kernel modules run in the kernel"},
	{"machine.install", ClassPrivileged, "the installer image, extensions and kernel arguments run at boot"},
	{"machine.kubelet", ClassPrivileged, "the kubelet's image, flags, config and host mounts"},
	{"machine.env", ClassPrivileged, "environment of Talos's own services (proxies, TLS settings)"},
	{"machine.registries", ClassPrivileged, "registry mirrors choose the images nodes run"},
	{"machine.features", ClassPrivileged, "Talos API access and RBAC"},
	{"machine.logging", ClassPrivileged, "logs leave the node"},
	{"machine.systemDiskEncryption", ClassPrivileged, "disk encryption keys and key servers"},
	{"machine.seccompProfiles", ClassPrivileged, "seccomp profiles of workloads"},
	{"machine.baseRuntimeSpecOverrides", ClassPrivileged, "the runtime spec of every container"},
	{"cluster.controlPlane", ClassPrivileged, "where nodes find the Kubernetes API"},
	{"cluster.inlineManifests", ClassPrivileged, "manifests are applied as cluster-admin"},
	{"cluster.extraManifests", ClassPrivileged, "manifests are fetched and applied as cluster-admin"},
	{"cluster.extraManifestHeaders", ClassPrivileged, "headers of manifest fetches"},
	{"cluster.network", ClassPrivileged, "CNI manifests"},
	{"cluster.apiServer", ClassPrivileged, "the API server's image, flags, mounts, admission and audit"},
	{"cluster.controllerManager", ClassPrivileged, "the controller manager's image, flags and mounts"},
	{"cluster.scheduler", ClassPrivileged, "the scheduler's image, flags and mounts"},
	{"cluster.proxy", ClassPrivileged, "kube-proxy's image and flags"},
	{"cluster.coreDNS", ClassPrivileged, "CoreDNS's image"},
	{"cluster.etcd", ClassPrivileged, "etcd's image and flags"},
	{"cluster.discovery", ClassPrivileged, "discovery service endpoints"},
	{"cluster.adminKubeconfig", ClassPrivileged, "admin credentials"},
}

// settingSysctls are the sysctl key prefixes that are plain settings; other
// keys reach the kernel's program hooks (kernel.core_pattern, kernel.modprobe).
var settingSysctls = []string{"net.", "vm.", "fs.inotify.", "fs.file-max", "fs.nr_open"}

// docClass is the class of a document kind, with why.
type docClass struct {
	class PatchClass
	why   string
}

// documentClasses is the class of every config document kind other than
// v1alpha1 that Talos machinery knows: each decided here, none left to a
// default. A kind not listed (a later Talos's) is
// Privileged. Ichor itself renders VolumeConfig (disk encryption) and
// TrustedRootsConfig (an OIDC issuer's CA): both are Privileged, and
// TestRenderedSecurityIsPrivileged keeps every kind Ichor renders listed.
var documentClasses = union(talos1_13Documents, talos1_14Documents)

// union is the classes of a and b, which share no kind.
func union(a, b map[string]docClass) map[string]docClass {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// talos1_13Documents are the kinds Talos v1.13 knows.
var talos1_13Documents = map[string]docClass{
	"HostnameConfig":       {ClassSettings, "the hostname"},
	"LinkConfig":           {ClassSettings, "links, addresses, routes"},
	"LinkAliasConfig":      {ClassSettings, "link names"},
	"DummyLinkConfig":      {ClassSettings, "dummy links"},
	"BondConfig":           {ClassSettings, "bonds"},
	"BridgeConfig":         {ClassSettings, "bridges"},
	"VLANConfig":           {ClassSettings, "VLANs"},
	"VRFConfig":            {ClassSettings, "VRFs"},
	"DHCPv4Config":         {ClassSettings, "DHCP"},
	"DHCPv6Config":         {ClassSettings, "DHCP"},
	"EthernetConfig":       {ClassSettings, "Ethernet settings"},
	"RoutingRuleConfig":    {ClassSettings, "routing rules"},
	"BlackholeRouteConfig": {ClassSettings, "blackhole routes"},
	"TCPProbeConfig":       {ClassSettings, "connectivity probes"},
	// A node holding the endpoint's address receives connections it cannot
	// answer without the cluster's keys: an outage at worst, as with routes.
	"Layer2VIPConfig": {ClassSettings, "a shared address"},
	"HCloudVIPConfig": {ClassSettings, "a shared address"},
	"TimeSyncConfig":  {ClassSettings, "time servers"},
	// A volume of its own, mounted under /var/mnt, made in free space or on
	// an unused disk (or, external, from the hypervisor): never a system volume.
	"UserVolumeConfig":     {ClassSettings, "a user volume"},
	"ExternalVolumeConfig": {ClassSettings, "an external volume"},
	"ZswapConfig":          {ClassSettings, "compressed memory, which stays in memory"},
	"WatchdogTimerConfig":  {ClassSettings, "the hardware watchdog"},
	"OOMConfig":            {ClassSettings, "which workloads the out-of-memory handler stops"},

	// STATE holds the machine config, every CA key of a control plane among
	// them: a key slot added to it, or its encryption removed, reads them
	// from a disk image.
	"VolumeConfig":               {ClassPrivileged, "system volumes: STATE and EPHEMERAL, their encryption keys and disks"},
	"ExistingVolumeConfig":       {ClassPrivileged, "mounts any existing partition, STATE among them, where workloads reach it"},
	"RawVolumeConfig":            {ClassPrivileged, "raw partitions on any disk, the system disk among them"},
	"SwapVolumeConfig":           {ClassPrivileged, "swap writes memory, keys among it, to disk"},
	"NetworkDefaultActionConfig": {ClassPrivileged, "the firewall keeps the Talos API, etcd and the kubelet from other networks"},
	"NetworkRuleConfig":          {ClassPrivileged, "the firewall keeps the Talos API, etcd and the kubelet from other networks"},
	"WireguardConfig":            {ClassPrivileged, "WireGuard keys and peers join the node's network"},
	"KubeSpanConfig":             {ClassPrivileged, "KubeSpan peers join the node's network"},
	"KubeSpanEndpointsConfig":    {ClassPrivileged, "KubeSpan peers join the node's network"},
	"SideroLinkConfig":           {ClassPrivileged, "SideroLink hands the node's API, logs and events to another party"},
	"ResolverConfig":             {ClassPrivileged, "resolvers decide where registries and endpoints resolve"},
	"StaticHostConfig":           {ClassPrivileged, "host entries decide where registries and endpoints resolve"},
	"RegistryMirrorConfig":       {ClassPrivileged, "registry mirrors choose the images nodes run"},
	"RegistryAuthConfig":         {ClassPrivileged, "registry credentials"},
	"RegistryTLSConfig":          {ClassPrivileged, "whom the node trusts for registries"},
	"ImageVerificationConfig":    {ClassPrivileged, "which image signatures the node accepts"},
	"TrustedRootsConfig":         {ClassPrivileged, "the certificate authorities the node trusts"},
	"EnvironmentConfig":          {ClassPrivileged, "environment of Talos's own services (proxies, TLS settings)"},
	"ExtensionServiceConfig":     {ClassPrivileged, "extension services run as root"},
	"EventSinkConfig":            {ClassPrivileged, "events leave the node"},
	"KmsgLogConfig":              {ClassPrivileged, "kernel logs leave the node"},
	"PCIDriverRebindConfig":      {ClassPrivileged, "hands PCI devices, which reach memory, to other drivers"},
}

// talos1_14Documents are the kinds Talos v1.14 added: a v1.13 node refuses
// them. Those that replace a v1alpha1 section take that section's class;
// Kubernetes' own components, manifests, keys and trust are Privileged, as
// cluster.* is.
var talos1_14Documents = map[string]docClass{
	k8s.KubeletConfig:       {ClassPrivileged, "the kubelet's image, flags and config"},
	"HTTPProbeConfig":       {ClassSettings, "connectivity probes"},
	"VethConfig":            {ClassSettings, "veth pairs"},
	"FilesystemTrimConfig":  {ClassSettings, "when filesystems are trimmed"},
	"FilesystemScrubConfig": {ClassSettings, "when filesystems are scrubbed"},
	"KubePrismConfig":       {ClassSettings, "the node-local load balancer in front of the Kubernetes API"},
	// Node labels, annotations and taints, the node IP, FQDN registration:
	// machine.node*, machine.kubelet.nodeIP and registerWithFQDN are Settings.
	"KubeNodeConfig":               {ClassSettings, "the Node's labels, annotations, taints, IP and name"},
	"BGPInstanceConfig":            {ClassPrivileged, "BGP sessions announce routes to peers outside the node"},
	"LVMVolumeGroupConfig":         {ClassPrivileged, "volume groups on any disk, the system disk among them"},
	"LVMLogicalVolumeConfig":       {ClassPrivileged, "logical volumes on any volume group"},
	"RAIDArrayConfig":              {ClassPrivileged, "RAID arrays of any disks, the system disk among them"},
	"UnattendedInstallConfig":      {ClassPrivileged, "the installer image (the code the node boots) and the install disk"},
	"SysctlConfig":                 {ClassPrivileged, "kernel parameters, some of which weaken isolation"},
	"SysfsConfig":                  {ClassPrivileged, "sysfs writes reach the kernel (uevent_helper runs a program)"},
	"KernelModuleConfig":           {ClassPrivileged, "kernel modules run in the kernel"},
	"UdevRulesConfig":              {ClassPrivileged, "udev rules run programs as root"},
	"EtcFileConfig":                {ClassPrivileged, "files are written onto the host"},
	"CRICustomizationConfig":       {ClassPrivileged, "the container runtime's configuration, its registries and runtimes"},
	"CRIBaseRuntimeSpecConfig":     {ClassPrivileged, "the base OCI spec every container runs with"},
	"ImageCacheConfig":             {ClassPrivileged, "the image cache serves images to the cluster's nodes"},
	"SecurityProfileConfig":        {ClassPrivileged, "workload isolation"},
	"ContainerConfig":              {ClassPrivileged, "containers Talos runs as root"},
	"DiscoveryServiceConfig":       {ClassPrivileged, "the cluster's members are published to a discovery service"},
	"DiscoveryIdentityConfig":      {ClassPrivileged, "the cluster's discovery identity and secret"},
	"KubeClusterConfig":            {ClassPrivileged, "the cluster's name and where nodes find the Kubernetes API"},
	"KubeNetworkConfig":            {ClassPrivileged, "the pod and service networks"},
	"KubeAPIServerConfig":          {ClassPrivileged, "kube-apiserver's image and flags"},
	"KubeAPIServerCAConfig":        {ClassPrivileged, "the Kubernetes CA"},
	"KubeAggregatorCAConfig":       {ClassPrivileged, "the aggregation layer's CA"},
	"KubeServiceAccountConfig":     {ClassPrivileged, "the service-account signing key"},
	"KubeEtcdEncryptionConfig":     {ClassPrivileged, "the key Secrets are encrypted with in etcd"},
	"KubeAuthenticationConfig":     {ClassPrivileged, "whom kube-apiserver authenticates"},
	"KubeAuthorizerConfig":         {ClassPrivileged, "how kube-apiserver authorizes"},
	"KubeAdmissionControlConfig":   {ClassPrivileged, "kube-apiserver's admission plugins (Pod Security among them)"},
	"KubeAuditPolicyConfig":        {ClassPrivileged, "what kube-apiserver audits"},
	"KubeControllerManagerConfig":  {ClassPrivileged, "kube-controller-manager's image and flags, which hold the signing keys"},
	"KubeSchedulerConfig":          {ClassPrivileged, "kube-scheduler's image, flags and config"},
	"KubeProxyConfig":              {ClassPrivileged, "kube-proxy's image (host network, privileged) and config"},
	"KubeCoreDNSConfig":            {ClassPrivileged, "CoreDNS's image: where the cluster's names resolve"},
	"KubeFlannelCNIConfig":         {ClassPrivileged, "the CNI, a privileged DaemonSet"},
	"KubeExternalManifestConfig":   {ClassPrivileged, "manifests are applied as cluster-admin"},
	"KubeInlineManifestConfig":     {ClassPrivileged, "manifests are applied as cluster-admin"},
	"KubeStaticPodConfig":          {ClassPrivileged, "static pods run with the node's privileges"},
	"KubeCredentialProviderConfig": {ClassPrivileged, "the kubelet runs credential provider programs"},
	"KubeTalosAPIAccessConfig":     {ClassPrivileged, "which workloads reach the Talos API, and with which roles"},
}

// documentClass is the class of a document kind, with why.
func documentClass(kind string) (PatchClass, string) {
	d, ok := documentClasses[kind]
	if !ok {
		return ClassPrivileged, "the " + kind + " document is not one Ichor knows to hold plain settings"
	}
	return d.class, "the " + kind + " document: " + d.why
}

// ClassifiedField is one field a patch changes, with its class and why.
type ClassifiedField struct {
	Path  string
	Class PatchClass
	Why   string
}

// classOf returns the class of a v1alpha1 path: the longest rule that is a
// prefix of it, stiffened by every rule below it (a path replacing a whole
// section writes every field in it), Privileged when no rule covers it.
func classOf(path []string) (PatchClass, string) {
	if len(secretsUnder(path)) > 0 {
		return ClassBundle, "the cluster's secrets bundle"
	}
	if len(path) >= 3 && path[0] == "machine" && path[1] == "sysctls" {
		for _, p := range settingSysctls {
			if strings.HasPrefix(path[2], p) {
				return ClassSettings, "a sysctl of the network or memory subsystem"
			}
		}
		return ClassPrivileged, "sysctl " + path[2] + " is not a network or memory setting"
	}
	class, why, best := ClassPrivileged, "not a field Ichor knows to be a plain setting", -1
	for _, r := range v1alpha1Classes {
		rp := strings.Split(r.path, ".")
		if len(rp) > best && underRule(path, rp) {
			class, why, best = r.class, r.why, len(rp)
		}
	}
	if best < 0 {
		return class, why
	}
	// Rules below path: writing the section (or a whole list) writes them too.
	for _, r := range v1alpha1Classes {
		rp := strings.Split(r.path, ".")
		if len(rp) > len(path) && underRule(path, rp[:len(path)]) && classRank[r.class] > classRank[class] {
			class, why = r.class, r.why+" (below "+strings.Join(path, ".")+")"
		}
	}
	if len(path) <= 1 || (len(path) == 2 && path[1] == "sysctls") {
		// A whole section, or every sysctl.
		class = ClassPrivileged
	}
	return class, why
}

// underRule reports whether path is rule or lies below it; a "*" of the
// rule matches any list item (an index, JSON6902's "-", or "*").
func underRule(path, rule []string) bool {
	if len(path) < len(rule) {
		return false
	}
	for i, r := range rule {
		if r != "*" && r != path[i] {
			return false
		}
	}
	return true
}

// itemsClassed reports whether a rule names fields inside the items of the
// list at path; elsewhere a list is one field.
func itemsClassed(path []string) bool {
	for _, r := range v1alpha1Classes {
		rp := strings.Split(r.path, ".")
		if len(rp) > len(path) && rp[len(path)] == "*" && underRule(path, rp[:len(path)]) {
			return true
		}
	}
	return false
}

// classifyPaths classifies changed or named paths: v1alpha1 ones as
// []string, other documents' as "Kind" + path.
func classifyPaths(v1 [][]string, docs map[string][][]string) []ClassifiedField {
	var out []ClassifiedField
	for _, p := range v1 {
		c, why := classOf(p)
		out = append(out, ClassifiedField{Path: strings.Join(p, "."), Class: c, Why: why})
	}
	for kind, paths := range docs {
		c, why := documentClass(kind)
		if len(paths) == 0 {
			paths = [][]string{nil}
		}
		for _, p := range paths {
			out = append(out, ClassifiedField{Path: kind + ":" + strings.Join(p, "."), Class: c, Why: why})
		}
	}
	slices.SortFunc(out, func(a, b ClassifiedField) int { return strings.Compare(a.Path, b.Path) })
	return slices.CompactFunc(out, func(a, b ClassifiedField) bool { return a.Path == b.Path })
}

// Strongest returns the class of the most guarded field, Settings for none.
func StrongestClass(fields []ClassifiedField) PatchClass {
	out := ClassSettings
	for _, f := range fields {
		if classRank[f.Class] > classRank[out] {
			out = f.Class
		}
	}
	return out
}

// Of returns the fields of class c, as "path (why)".
func FieldsOf(fields []ClassifiedField, c PatchClass) []string {
	var out []string
	for _, f := range fields {
		if f.Class == c {
			out = append(out, fmt.Sprintf("%s (%s)", f.Path, f.Why))
		}
	}
	return out
}

// DocumentKind is what Ichor decided about one kind of machine-config
// document: who may patch it (its class, with why) and what a change of it
// takes to be in effect.
type DocumentKind struct {
	Kind   string
	Class  PatchClass
	Why    string
	Effect ichorv1alpha1.ConfigEffect
	// Since is the first Talos release that knows it, "" for v1.13 or
	// earlier: a node of an older release refuses it.
	Since string
}

// DocumentKinds lists every document kind Talos machinery knows besides
// v1alpha1, by kind (TestEveryDocumentKindHasAClass keeps it complete); the
// reference page docs/reference/config-documents.md is made from it.
func DocumentKinds() []DocumentKind {
	out := make([]DocumentKind, 0, len(documentClasses))
	for kind, c := range documentClasses {
		k := DocumentKind{Kind: kind, Class: c.class, Why: c.why, Effect: documentEffect(kind)}
		if _, ok := talos1_14Documents[kind]; ok {
			k.Since = "v1.14"
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b DocumentKind) int { return strings.Compare(a.Kind, b.Kind) })
	return out
}
