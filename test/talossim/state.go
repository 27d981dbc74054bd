package talossim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// historyInitialCapacity is the watch history each resource type starts with. COSI's default (100
// events for every type on every node) was most of a simulated node's memory; the history still grows
// as watches need it.
const historyInitialCapacity = 8

// eth0Index is the kernel link index of eth0 (lo is 1).
const eth0Index = 2

// newResourceState builds the in-memory COSI state with the namespaces and resource definitions a Talos
// node registers (a subset), so the access policy and talosctl's kind resolution work.
func newResourceState(ctx context.Context) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(func(ns resource.Namespace) state.CoreState {
		return inmem.NewStateWithOptions(inmem.WithHistoryInitialCapacity(historyInitialCapacity))(ns)
	}))

	nsReg := registry.NewNamespaceRegistry(st)
	if err := nsReg.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("registering default namespaces: %w", err)
	}

	rdReg := registry.NewResourceRegistry(st)
	if err := rdReg.RegisterDefault(ctx); err != nil {
		return nil, fmt.Errorf("registering default resource definitions: %w", err)
	}

	for _, ns := range []struct {
		name resource.Namespace
		desc string
	}{
		{v1alpha1.NamespaceName, "Talos v1alpha1 subsystems glue resources."},
		{cluster.NamespaceName, "Cluster configuration and discovery resources."},
		{config.NamespaceName, "Talos node configuration."},
		{etcd.NamespaceName, "etcd resources."},
		{hardware.NamespaceName, "Hardware resources."},
		{k8s.NamespaceName, "Kubernetes all node types resources."},
		{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
		{network.NamespaceName, "Networking resources."},
		{secrets.NamespaceName, "Resources with secret material."},
	} {
		if err := nsReg.Register(ctx, ns.name, ns.desc); err != nil {
			return nil, fmt.Errorf("registering namespace %q: %w", ns.name, err)
		}
	}

	for _, r := range []meta.ResourceWithRD{
		&block.Disk{},
		&block.VolumeStatus{},
		&hardware.SystemInformation{},
		&network.LinkStatus{},
		&network.LinkSpec{}, // sensitive: lets clients observe the admin-only rule like on a real node
		&network.AddressStatus{},
		&network.HostnameStatus{},
		&k8s.NodeIP{},
		&k8s.Nodename{},
		&runtime.MachineStatus{},
		&runtime.SecurityState{},
		&runtime.Version{},
		&runtime.UnattendedInstallStatus{},
		&runtime.ExtensionStatus{},
		&runtime.ImageFactorySchematic{},
		&etcd.Member{},
		&config.MachineConfig{},
		&config.MachineType{},
		&k8s.APIServerConfig{},
		&k8s.ConfigStatus{},
		&k8s.ControllerManagerConfig{},
		&k8s.SchedulerConfig{},
		&k8s.KubeletSpec{},
		&k8s.Manifest{},
		&v1alpha1.Service{},
		&secrets.OSRoot{},
		&secrets.KubernetesRoot{},
	} {
		if err := rdReg.Register(ctx, r); err != nil {
			return nil, fmt.Errorf("registering resource definition %T: %w", r, err)
		}
	}

	return st, nil
}

// accessPolicy mirrors Talos's COSI API filter: read-only, registered types and namespaces only, and
// sensitive types for os:admin only.
func accessPolicy(st state.State) state.FilteringRule {
	return func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Error(codes.PermissionDenied, "write access is not allowed")
		}

		rd, err := safe.StateGet[*meta.ResourceDefinition](ctx, st,
			resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, strings.ToLower(access.ResourceType), resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("resource type %q is not supported", access.ResourceType))
			}

			return err
		}

		switch sensitivity := rd.TypedSpec().Sensitivity; sensitivity {
		case meta.Sensitive:
			if !rolesFromContext(ctx).Includes(role.Admin) {
				return errNotAuthorized
			}
		case meta.NonSensitive:
		default:
			return fmt.Errorf("unexpected sensitivity %q", sensitivity)
		}

		_, err = safe.StateGet[*meta.Namespace](ctx, st,
			resource.NewMetadata(meta.NamespaceName, meta.NamespaceType, access.ResourceNamespace, resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("namespace %q is not supported", access.ResourceNamespace))
			}

			return err
		}

		return nil
	}
}

// putResource creates r or replaces the stored resource with the same metadata when its spec differs,
// so watchers see an Updated event only for real changes.
func putResource(ctx context.Context, st state.State, r resource.Resource) error {
	existing, err := st.Get(ctx, r.Metadata())

	switch {
	case state.IsNotFoundError(err):
		if err = st.Create(ctx, r); err != nil {
			return fmt.Errorf("creating %s: %w", r.Metadata(), err)
		}

		return nil
	case err != nil:
		return fmt.Errorf("reading %s: %w", r.Metadata(), err)
	}

	if reflect.DeepEqual(existing.Spec(), r.Spec()) {
		return nil
	}

	r.Metadata().SetVersion(existing.Metadata().Version())

	if err = st.Update(ctx, r); err != nil {
		return fmt.Errorf("updating %s: %w", r.Metadata(), err)
	}

	return nil
}

// removeResource destroys the resource at md if it exists.
func removeResource(ctx context.Context, st state.State, md resource.Pointer) error {
	if err := st.Destroy(ctx, md); err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("destroying %s: %w", md, err)
	}

	return nil
}

// publishHardware writes the resources that never change during a node's life: system information,
// disks, link, addresses and node IPs.
func publishHardware(ctx context.Context, st state.State, o Options) error {
	si := hardware.NewSystemInformation(hardware.SystemInformationID)
	si.TypedSpec().UUID = o.SystemUUID
	si.TypedSpec().SerialNumber = o.SystemSerial

	// How the node booted: module signatures are enforced by default since Talos v1.12; a SecureBoot
	// boot is a UKI whose PCR policy a key signed.
	sec := runtime.NewSecurityStateSpec(runtime.NamespaceName)
	sec.TypedSpec().ModuleSignatureEnforced = true
	if o.SecureBoot {
		sec.TypedSpec().SecureBoot, sec.TypedSpec().BootedWithUKI = true, true
		fp := sha256.Sum256([]byte("talossim PCR signing key " + o.SystemUUID))
		sec.TypedSpec().PCRSigningKeyFingerprint = hex.EncodeToString(fp[:])
	}

	resources := []resource.Resource{si, sec}

	for _, d := range o.Disks {
		disk := block.NewDisk(block.NamespaceName, filepath.Base(d.Path))
		spec := disk.TypedSpec()
		spec.DevPath = d.Path
		spec.SetSize(d.Size)
		spec.IOSize = 512
		spec.SectorSize = 512
		spec.Model = d.Model
		spec.Serial = d.Serial
		spec.Transport = d.Transport
		spec.SubSystem = "/sys/class/block"
		resources = append(resources, disk)
	}

	link := network.NewLinkStatus(network.NamespaceName, "eth0")
	ls := link.TypedSpec()
	ls.Index = eth0Index
	ls.Type = nethelpers.LinkEther
	ls.Flags = nethelpers.LinkFlags(nethelpers.LinkUp | nethelpers.LinkBroadcast | nethelpers.LinkRunning | nethelpers.LinkMulticast | nethelpers.LinkLowerUp)
	ls.HardwareAddr = nethelpers.HardwareAddr(o.HardwareAddr)
	ls.PermanentAddr = nethelpers.HardwareAddr(o.HardwareAddr)
	ls.BroadcastAddr = nethelpers.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	ls.MTU = 1500
	ls.QueueDisc = "pfifo_fast"
	ls.OperationalState = nethelpers.OperStateUp
	ls.Driver = "virtio_net"
	ls.LinkState = true
	resources = append(resources, link)

	nodeIP := k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID)

	for _, p := range o.Addresses {
		addr := network.NewAddressStatus(network.NamespaceName, network.AddressID("eth0", p))
		as := addr.TypedSpec()
		as.Address = p
		as.Local = p.Addr()
		as.LinkIndex = eth0Index
		as.LinkName = "eth0"
		as.Family = nethelpers.FamilyInet6
		if p.Addr().Is4() {
			as.Family = nethelpers.FamilyInet4
		}
		as.Scope = nethelpers.ScopeGlobal
		as.Flags = nethelpers.AddressFlags(nethelpers.AddressPermanent)
		resources = append(resources, addr)

		nodeIP.TypedSpec().Addresses = append(nodeIP.TypedSpec().Addresses, p.Addr())
	}

	resources = append(resources, nodeIP)

	for _, r := range resources {
		if err := putResource(ctx, st, r); err != nil {
			return err
		}
	}

	return nil
}

// nodeView is the mutable node state that resources are derived from.
type nodeView struct {
	phase        Phase
	hostname     string
	active       talosconfig.Provider
	persisted    talosconfig.Provider
	version      string       // running Talos version
	image        string       // the installer image the running version came from
	etcdMemberID uint64       // 0: no local etcd member
	kubelet      *kubeletSpec // the kubelet that runs; nil when none does
	volumes      map[string]block.VolumeStatusSpec
	unattended   *runtime.UnattendedInstallStatusSpec
}

// publishDynamic writes the resources derived from the phase, the running version, the local etcd
// member and the active/persisted configs.
func publishDynamic(ctx context.Context, st state.State, v nodeView) error {
	ms := runtime.NewMachineStatus()
	ms.TypedSpec().Stage = machineStages[v.phase]
	ms.TypedSpec().Status.Ready = true // the simulator models a healthy node: no unmet readiness conditions

	hs := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hs.TypedSpec().Hostname = v.hostname

	nn := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nn.TypedSpec().Nodename = v.hostname

	ver := runtime.NewVersion()
	ver.TypedSpec().Name = "Talos"
	ver.TypedSpec().Version = v.version

	for _, r := range []resource.Resource{ms, hs, nn, ver} {
		if err := putResource(ctx, st, r); err != nil {
			return err
		}
	}

	member := etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID)
	if v.etcdMemberID == 0 {
		if err := removeResource(ctx, st, member.Metadata()); err != nil {
			return err
		}
	} else {
		member.TypedSpec().MemberID = etcd.FormatMemberID(v.etcdMemberID)

		if err := putResource(ctx, st, member); err != nil {
			return err
		}
	}

	for _, c := range []struct {
		id  resource.ID
		cfg talosconfig.Provider
	}{{config.ActiveID, v.active}, {config.PersistentID, v.persisted}} {
		var err error
		if c.cfg == nil {
			err = removeResource(ctx, st, resource.NewMetadata(config.NamespaceName, config.MachineConfigType, c.id, resource.VersionUndefined))
		} else {
			err = putResource(ctx, st, config.NewMachineConfigWithID(c.cfg, c.id))
		}

		if err != nil {
			return err
		}
	}

	if err := publishOSRoot(ctx, st, v); err != nil {
		return err
	}

	if err := publishKubernetesRoot(ctx, st, v); err != nil {
		return err
	}

	if err := publishVolumes(ctx, st, v.volumes); err != nil {
		return err
	}

	if err := publishSchematic(ctx, st, v.version, v.image); err != nil {
		return err
	}

	if err := publishUnattended(ctx, st, v.unattended); err != nil {
		return err
	}

	if err := publishControlPlaneConfigs(ctx, st, v); err != nil {
		return err
	}

	if err := publishManifests(ctx, st, v); err != nil {
		return err
	}

	if err := publishKubelet(ctx, st, v); err != nil {
		return err
	}

	if v.active != nil && v.active.Machine() != nil {
		mt := config.NewMachineType()
		mt.SetMachineType(v.active.Machine().Type())

		return putResource(ctx, st, mt)
	}

	return removeResource(ctx, st, config.NewMachineType().Metadata())
}

// publishKubernetesRoot writes a control plane's secrets.KubernetesRoot resource as Talos's
// RootKubernetesController derives it from the active config: the cluster's identity, the issuing
// Kubernetes CA (cluster.ca) and every accepted one with the issuing one's certificate last, and its
// other secrets. Sensitive: talosctl rotate-ca reads the current Kubernetes CA from it. A worker has
// none.
func publishKubernetesRoot(ctx context.Context, st state.State, v nodeView) error {
	root := secrets.NewKubernetesRoot(secrets.KubernetesRootID)

	if v.active == nil || v.active.Machine() == nil || v.active.Cluster() == nil || !v.active.Machine().Type().IsControlPlane() ||
		k8sIssuingCA(v.active) == nil {
		return removeResource(ctx, st, root.Metadata())
	}

	cfg := v.active
	cluster := cfg.Cluster()
	apiServer := cfg.K8sAPIServerConfig()
	network := k8sNetwork(cfg)
	spec := root.TypedSpec()
	spec.Name = clusterName(cfg)
	spec.Endpoint = clusterEndpoint(cfg)
	spec.CertSANs = apiServer.CertSANs()
	spec.DNSDomain = network.DNSDomain()
	spec.APIServerIPs = apiServerServiceIPs(network)

	local := fmt.Sprintf("https://localhost:%d", apiServer.APIPort())
	if kp := cfg.K8sKubePrismConfig(); kp != nil { // nil: KubePrism is off
		local = fmt.Sprintf("https://127.0.0.1:%d", kp.Port())
	}

	var err error
	if spec.LocalEndpoint, err = url.Parse(local); err != nil {
		return err
	}

	if aggregator := cfg.K8sAggregatorCAConfig(); aggregator != nil {
		spec.AggregatorCA = aggregator.IssuingCA()
	}

	spec.IssuingCA = k8sIssuingCA(cfg)
	spec.AcceptedCAs = append(slices.Clone(k8sOtherAcceptedCAs(cfg)), &x509.PEMEncodedCertificate{Crt: spec.IssuingCA.Crt})

	if serviceAccount := cfg.K8sServiceAccountConfig(); serviceAccount != nil {
		spec.ServiceAccount = serviceAccount.IssuingKey()
	}

	spec.AESCBCEncryptionSecret = cluster.AESCBCEncryptionSecret()
	spec.SecretboxEncryptionSecret = cluster.SecretboxEncryptionSecret()

	if token := cluster.Token(); token != nil {
		spec.BootstrapTokenID, spec.BootstrapTokenSecret = token.ID(), token.Secret()
	}

	return putResource(ctx, st, root)
}

// publishOSRoot writes the secrets.OSRoot resource as Talos's RootOSController derives it from the
// active config, on every node type: the issuing Talos API CA (only where the config holds its key),
// every accepted CA with the issuing one's certificate last, the certificate SANs and the machine token.
// It is sensitive: only os:admin reads it (talosctl rotate-ca reads the current CA from it).
func publishOSRoot(ctx context.Context, st state.State, v nodeView) error {
	root := secrets.NewOSRoot(secrets.OSRootID)

	if v.active == nil || v.active.Machine() == nil || v.active.Cluster() == nil {
		return removeResource(ctx, st, root.Metadata())
	}

	sec := v.active.Machine().Security()
	spec := root.TypedSpec()
	spec.IssuingCA = sec.IssuingCA()
	spec.AcceptedCAs = slices.Clone(sec.AcceptedCAs()) // appended to below: not the config's own slice

	if spec.IssuingCA != nil {
		spec.AcceptedCAs = append(spec.AcceptedCAs, &x509.PEMEncodedCertificate{Crt: spec.IssuingCA.Crt})

		if len(spec.IssuingCA.Key) == 0 {
			spec.IssuingCA = nil // a worker's config holds the certificate only
		}
	}

	for _, san := range sec.CertSANs() {
		if ip, err := netip.ParseAddr(san); err == nil {
			spec.CertSANIPs = append(spec.CertSANIPs, ip)
		} else {
			spec.CertSANDNSNames = append(spec.CertSANDNSNames, san)
		}
	}

	spec.Token = sec.Token()

	return putResource(ctx, st, root)
}
