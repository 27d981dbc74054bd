package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ApplyConfiguration implements Node with the calls `talosctl apply-config`
// makes. A config that needs a reboot is staged (`--mode=staged`) and the
// node then rebooted gracefully (`talosctl reboot`): Talos v1.14 refuses the
// REBOOT mode, and the two calls mean the same on v1.13. Were the reboot
// call lost, the node runs its old config until it boots, and the caller,
// finding the config not yet in effect, stages and reboots again.
func (n *machineryNode) ApplyConfiguration(ctx context.Context, config []byte, mode ApplyMode) (*ApplyResult, error) {
	req := &machineapi.ApplyConfigurationRequest{Data: config, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}
	if mode == ApplyReboot {
		req.Mode = machineapi.ApplyConfigurationRequest_STAGED
	}
	resp, err := n.c.ApplyConfiguration(ctx, req)
	if err != nil {
		return nil, n.v.explain("apply config ("+mode.String()+")", err)
	}
	var r ApplyResult
	for _, m := range resp.GetMessages() {
		r.Details = m.GetModeDetails()
		r.Warnings = append(r.Warnings, m.GetWarnings()...)
		// A node in maintenance mode installs and boots into the config.
		r.Rebooting = r.Rebooting || m.GetMode() == machineapi.ApplyConfigurationRequest_REBOOT //nolint:staticcheck // what a maintenance-mode node answers
	}
	if mode == ApplyReboot {
		if err := n.Reboot(ctx, false); err != nil {
			return nil, fmt.Errorf("the config is staged for the next boot, but %w", err)
		}
		r.Rebooting = true
	}
	return &r, nil
}

// Status implements Node by reading the MachineStatus resource (`talosctl get machinestatus`).
func (n *machineryNode) Status(ctx context.Context) (*Status, error) {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, n.c.COSI, runtime.MachineStatusID)
	if err != nil {
		return nil, n.v.explain("read machine status", err)
	}
	spec := ms.TypedSpec()
	s := &Status{Stage: spec.Stage.String(), Ready: spec.Status.Ready}
	for _, c := range spec.Status.UnmetConditions {
		s.Unmet = append(s.Unmet, c.Name+": "+c.Reason)
	}
	nn, err := safe.StateGetByID[*k8s.Nodename](ctx, n.c.COSI, k8s.NodenameID)
	if err != nil {
		return nil, n.v.explain("read node name", err)
	}
	s.Nodename = nn.TypedSpec().Nodename
	if s.Security, err = n.Security(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Security implements Node. In maintenance mode the resource is readable
// as os:reader, as `talosctl get securitystate --insecure` reads it.
func (n *machineryNode) Security(ctx context.Context) (*Security, error) {
	sec, err := safe.StateGetByID[*runtime.SecurityState](ctx, n.c.COSI, runtime.SecurityStateID)
	switch {
	case status.Code(err) == codes.NotFound || state.IsNotFoundError(err):
		return nil, nil
	case err != nil:
		return nil, n.v.explain("read security state", err)
	}
	spec := sec.TypedSpec()
	return &Security{SecureBoot: spec.SecureBoot, BootedWithUKI: spec.BootedWithUKI,
		ModuleSignatureEnforced: spec.ModuleSignatureEnforced, PCRSigningKeyFingerprint: spec.PCRSigningKeyFingerprint}, nil
}

// Config implements Node by reading the active MachineConfig resource: the
// YAML the node stores. The resource is read raw rather than through
// machinery's typed resource, whose decoder knows only the document kinds of
// machinery v1.13 and so fails on a v1.14 node's KubeletConfig document.
func (n *machineryNode) Config(ctx context.Context) ([]byte, error) {
	resp, err := cosiv1alpha1.NewStateClient(n.c.Conn()).Get(ctx, &cosiv1alpha1.GetRequest{
		Namespace: configres.NamespaceName,
		Type:      configres.MachineConfigType,
		Id:        configres.ActiveID,
	})
	if err != nil {
		return nil, n.v.explain("read machine config", err)
	}
	var spec configpb.MachineConfigSpec
	if err := proto.Unmarshal(resp.GetResource().GetSpec().GetProtoSpec(), &spec); err != nil {
		return nil, fmt.Errorf("decode the machine config read from %s: %w", n.v.address, err)
	}
	if len(spec.GetYamlMarshalled()) == 0 {
		return nil, fmt.Errorf("the machine config read from %s is empty", n.v.address)
	}
	return spec.GetYamlMarshalled(), nil
}

// ManifestKubeProxy is the bootstrap manifest of kube-proxy's DaemonSet,
// its ServiceAccount and its binding.
const ManifestKubeProxy = "10-kube-proxy"

// BootstrapManifest implements Node with the read `talosctl get manifests
// ID` makes.
func (n *machineryNode) BootstrapManifest(ctx context.Context, id string) ([]*unstructured.Unstructured, error) {
	m, err := safe.StateGetByID[*k8s.Manifest](ctx, n.c.COSI, id)
	if status.Code(err) == codes.NotFound || state.IsNotFoundError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, n.v.explain("read bootstrap manifest "+id, err)
	}
	objects := make([]*unstructured.Unstructured, 0, len(m.TypedSpec().Items))
	for _, item := range m.TypedSpec().Items {
		objects = append(objects, &unstructured.Unstructured{Object: item.Object})
	}
	return objects, nil
}

// Identity implements Node with the reads `talosctl get nodeips kubelet`,
// `get nodename` and `get hostnamestatus` make, made at once: deciding a
// kubelet serving request waits for them.
func (n *machineryNode) Identity(ctx context.Context) (*Identity, error) {
	var (
		wg                  sync.WaitGroup
		ip                  *k8s.NodeIP
		nn                  *k8s.Nodename
		hs                  *network.HostnameStatus
		ipErr, nnErr, hsErr error
	)
	wg.Go(func() { ip, ipErr = safe.StateGetByID[*k8s.NodeIP](ctx, n.c.COSI, k8s.KubeletID) })
	wg.Go(func() { nn, nnErr = safe.StateGetByID[*k8s.Nodename](ctx, n.c.COSI, k8s.NodenameID) })
	wg.Go(func() { hs, hsErr = safe.StateGetByID[*network.HostnameStatus](ctx, n.c.COSI, network.HostnameID) })
	wg.Wait()
	switch {
	case ipErr != nil:
		return nil, n.v.explain("read the kubelet's node IPs", ipErr)
	case nnErr != nil:
		return nil, n.v.explain("read node name", nnErr)
	case hsErr != nil:
		return nil, n.v.explain("read hostname", hsErr)
	}
	return &Identity{
		Nodename:         nn.TypedSpec().Nodename,
		Hostname:         hs.TypedSpec().Hostname,
		FQDN:             hs.TypedSpec().FQDN(),
		KubeletAddresses: slices.Clone(ip.TypedSpec().Addresses),
	}, nil
}

// Bootstrap implements Node.
func (n *machineryNode) Bootstrap(ctx context.Context) error {
	return n.bootstrap(ctx, &machineapi.BootstrapRequest{}, "bootstrap etcd")
}

// BootstrapRecover implements Node with the call `talosctl bootstrap
// --recover-from` makes after its upload.
func (n *machineryNode) BootstrapRecover(ctx context.Context) error {
	return n.bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true}, "bootstrap etcd from the uploaded snapshot")
}

// bootstrap sends req; etcd data already there is ErrAlreadyBootstrapped.
func (n *machineryNode) bootstrap(ctx context.Context, req *machineapi.BootstrapRequest, what string) error {
	err := n.c.Bootstrap(ctx, req)
	if status.Code(err) == codes.AlreadyExists {
		return ErrAlreadyBootstrapped
	}
	if err != nil {
		return n.v.explain(what, err)
	}
	return nil
}

// EtcdRecover implements Node.
func (n *machineryNode) EtcdRecover(ctx context.Context, snapshot io.Reader) error {
	if _, err := n.c.EtcdRecover(ctx, snapshot); err != nil {
		return n.v.explain("upload the etcd snapshot", err)
	}
	return nil
}

// EtcdLeave implements Node with the call `talosctl etcd leave` makes.
func (n *machineryNode) EtcdLeave(ctx context.Context) error {
	if err := n.c.EtcdLeaveCluster(ctx, &machineapi.EtcdLeaveClusterRequest{}); err != nil {
		return n.v.explain("leave etcd", err)
	}
	return nil
}

// WipeEtcdData implements Node as `talosctl reset --graceful=false --reboot
// --system-labels-to-wipe EPHEMERAL` does, or ETCD where that is a
// partition, as Talos's own etcd tests decide from its VolumeStatus.
func (n *machineryNode) WipeEtcdData(ctx context.Context) error {
	label := "EPHEMERAL"
	v, err := n.Volume(ctx, "ETCD")
	switch {
	case err == nil && v.Type == block.VolumeTypePartition.String():
		label = "ETCD"
	case err != nil && !errors.Is(err, ErrNoVolume):
		return err
	}
	err = n.c.ResetGeneric(ctx, &machineapi.ResetRequest{
		Graceful:               false,
		Reboot:                 true,
		SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: label, Wipe: true}},
	})
	if err != nil {
		return n.v.explain("wipe "+label, err)
	}
	return nil
}

// promotedPartitions are the PromotedVolumes the node keeps on partitions
// of their own, from their VolumeStatus.
func (n *machineryNode) promotedPartitions(ctx context.Context) ([]string, error) {
	var out []string
	for _, id := range PromotedVolumes {
		v, err := n.Volume(ctx, id)
		switch {
		case errors.Is(err, ErrNoVolume):
		case err != nil:
			return nil, err
		case v.Type == block.VolumeTypePartition.String():
			out = append(out, id)
		}
	}
	return out, nil
}

// Schematic implements Node from the node's ExtensionStatus resources, as
// Talos's ImageFactorySchematicController reads them.
func (n *machineryNode) Schematic(ctx context.Context) (string, error) {
	list, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, n.c.COSI)
	if err != nil {
		return "", n.v.explain("read the node's extensions", err)
	}
	for ext := range list.All() {
		if m := ext.TypedSpec().Metadata; m.Name == constants.ImageFactorySchematicExtensionName {
			return m.Version, nil
		}
	}
	return "", nil
}

// RestartService implements Node.
func (n *machineryNode) RestartService(ctx context.Context, id string) error {
	if _, err := n.c.ServiceRestart(ctx, id); err != nil {
		return n.v.explain("restart "+id, err)
	}
	return nil
}

// EtcdSnapshot implements Node with the call `talosctl etcd snapshot` makes.
func (n *machineryNode) EtcdSnapshot(ctx context.Context) (io.ReadCloser, error) {
	r, err := n.c.EtcdSnapshot(ctx, &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		return nil, n.v.explain("snapshot etcd", err)
	}
	return r, nil
}

// EtcdMembers implements Node.
func (n *machineryNode) EtcdMembers(ctx context.Context) ([]EtcdMember, error) {
	resp, err := n.c.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	if err != nil {
		return nil, n.v.explain("list etcd members", err)
	}
	var members []EtcdMember
	for _, msg := range resp.GetMessages() {
		for _, m := range msg.GetMembers() {
			members = append(members, EtcdMember{
				ID:       strconv.FormatUint(m.GetId(), 16),
				Hostname: m.GetHostname(),
				Learner:  m.GetIsLearner(),
			})
		}
	}
	return members, nil
}

// wipeModes are Talos's wipe modes for WipeMode.
var wipeModes = map[WipeMode]machineapi.ResetRequest_WipeMode{
	WipeAll:        machineapi.ResetRequest_ALL,
	WipeSystemDisk: machineapi.ResetRequest_SYSTEM_DISK,
	WipeUserDisks:  machineapi.ResetRequest_USER_DISKS,
}

// Reset implements Node with the request `talosctl reset --reboot` sends for
// r's flags.
func (n *machineryNode) Reset(ctx context.Context, r ResetRequest) error {
	req := &machineapi.ResetRequest{
		Graceful:        r.Graceful,
		Reboot:          true,
		Mode:            wipeModes[r.Mode],
		UserDisksToWipe: r.UserDisks,
	}
	labels := slices.Clone(r.SystemLabels)
	if slices.Contains(labels, "EPHEMERAL") {
		promoted, err := n.promotedPartitions(ctx)
		if err != nil {
			return err
		}
		for _, id := range promoted {
			if !slices.Contains(labels, id) {
				labels = append(labels, id)
			}
		}
	}
	for _, label := range labels {
		req.SystemPartitionsToWipe = append(req.SystemPartitionsToWipe, &machineapi.ResetPartitionSpec{Label: label, Wipe: true})
	}
	if err := n.c.ResetGeneric(ctx, req); err != nil {
		return n.v.explain(fmt.Sprintf("reset (graceful=%t, mode %s)", r.Graceful, strings.ToLower(req.Mode.String())), err)
	}
	return nil
}

// bootIDPath is the file that holds the kernel's boot ID.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// BootID implements Node with the read `talosctl reboot --wait` makes.
func (n *machineryNode) BootID(ctx context.Context) (string, error) {
	r, err := n.c.Read(ctx, bootIDPath)
	if err != nil {
		return "", n.v.explain("read the boot ID", err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 128))
	if err != nil {
		return "", n.v.explain("read the boot ID", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" && ctx.Err() != nil {
		// The stream ended with the call's deadline, before the node
		// answered; the reader says only that it ended.
		return "", n.v.explain("read the boot ID", ctx.Err())
	}
	if id == "" {
		return "", fmt.Errorf("the node's %s is empty", bootIDPath)
	}
	return id, nil
}

// Reboot implements Node with the call `talosctl reboot [--mode force]` makes.
func (n *machineryNode) Reboot(ctx context.Context, force bool) error {
	mode := machineapi.RebootRequest_DEFAULT
	if force {
		mode = machineapi.RebootRequest_FORCE
	}
	if err := n.c.Reboot(ctx, client.WithRebootMode(mode)); err != nil {
		return n.v.explain(fmt.Sprintf("reboot (force=%t)", force), err)
	}
	return nil
}

// Shutdown implements Node with the call `talosctl shutdown [--force]` makes.
func (n *machineryNode) Shutdown(ctx context.Context, force bool) error {
	if err := n.c.Shutdown(ctx, client.WithShutdownForce(force)); err != nil {
		return n.v.explain(fmt.Sprintf("shut down (force=%t)", force), err)
	}
	return nil
}

// EtcdStatus implements Node with the call `talosctl etcd status` makes.
func (n *machineryNode) EtcdStatus(ctx context.Context) (*EtcdStatus, error) {
	resp, err := n.c.EtcdStatus(ctx)
	if err != nil {
		return nil, n.v.explain("read etcd status", err)
	}
	for _, msg := range resp.GetMessages() {
		if st := msg.GetMemberStatus(); st != nil {
			return &EtcdStatus{
				MemberID: strconv.FormatUint(st.GetMemberId(), 16),
				DBSize:   st.GetDbSize(), DBSizeInUse: st.GetDbSizeInUse(),
				Leader: strconv.FormatUint(st.GetLeader(), 16),
				Errors: slices.Clone(st.GetErrors()),
			}, nil
		}
	}
	return nil, errors.New("the node answered etcd status without a member status")
}

// EtcdDefragment implements Node with the call `talosctl etcd defrag` makes.
func (n *machineryNode) EtcdDefragment(ctx context.Context) error {
	if _, err := n.c.EtcdDefragment(ctx); err != nil {
		return n.v.explain("defragment etcd", err)
	}
	return nil
}

// EtcdAlarms implements Node with the call `talosctl etcd alarm list`
// makes: the alarms raised in the node's etcd cluster, as "NOSPACE on
// member 8e9e05c52164694d".
func (n *machineryNode) EtcdAlarms(ctx context.Context) ([]string, error) {
	resp, err := n.c.EtcdAlarmList(ctx)
	if err != nil {
		return nil, n.v.explain("list etcd alarms", err)
	}
	return describeAlarms(resp.GetMessages()), nil
}

// EtcdDisarmAlarms implements Node with the call `talosctl etcd alarm
// disarm` makes. It returns the alarms it disarmed.
func (n *machineryNode) EtcdDisarmAlarms(ctx context.Context) ([]string, error) {
	resp, err := n.c.EtcdAlarmDisarm(ctx)
	if err != nil {
		return nil, n.v.explain("disarm etcd alarms", err)
	}
	var alarms []string
	for _, msg := range resp.GetMessages() {
		alarms = append(alarms, describeMemberAlarms(msg.GetMemberAlarms())...)
	}
	return alarms, nil
}

func describeAlarms(msgs []*machineapi.EtcdAlarm) []string {
	var alarms []string
	for _, msg := range msgs {
		alarms = append(alarms, describeMemberAlarms(msg.GetMemberAlarms())...)
	}
	return alarms
}

func describeMemberAlarms(as []*machineapi.EtcdMemberAlarm) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("%s on member %s", a.GetAlarm(), strconv.FormatUint(a.GetMemberId(), 16)))
	}
	return out
}

// TalosCA implements Node with the read `talosctl rotate-ca` makes.
func (n *machineryNode) TalosCA(ctx context.Context) (*TalosCA, error) {
	root, err := safe.StateGetByID[*secrets.OSRoot](ctx, n.c.COSI, secrets.OSRootID)
	if err != nil {
		return nil, n.v.explain("read the Talos API CAs", err)
	}
	spec := root.TypedSpec()
	out := &TalosCA{}
	if spec.IssuingCA != nil {
		out.Issuing = spec.IssuingCA.Crt // the key stays behind
	}
	for _, ca := range spec.AcceptedCAs {
		out.Accepted = append(out.Accepted, ca.Crt)
	}
	return out, nil
}

// Volume implements Node with the read `talosctl get volumestatus` makes.
func (n *machineryNode) Volume(ctx context.Context, id string) (*Volume, error) {
	v, err := safe.StateGetByID[*block.VolumeStatus](ctx, n.c.COSI, id)
	switch {
	case status.Code(err) == codes.NotFound || state.IsNotFoundError(err):
		return nil, fmt.Errorf("volume %s: %w", id, ErrNoVolume)
	case err != nil:
		return nil, n.v.explain("read the status of volume "+id, err)
	}
	spec := v.TypedSpec()
	return &Volume{
		Type:           spec.Type.String(),
		Phase:          spec.Phase.String(),
		Encrypted:      spec.EncryptionProvider == block.EncryptionProviderLUKS2,
		OpenedWithSlot: spec.EncryptionSlot,
		FailedSyncs:    spec.EncryptionFailedSyncs,
		Error:          spec.ErrorMessage,
	}, nil
}

// APIServerVersions implements Node.
func (n *machineryNode) APIServerVersions(ctx context.Context) (APIServerVersions, error) {
	var v APIServerVersions
	c, err := safe.StateGetByID[*k8s.APIServerConfig](ctx, n.c.COSI, k8s.APIServerConfigID)
	switch {
	case status.Code(err) == codes.NotFound || state.IsNotFoundError(err):
		return v, nil
	case err != nil:
		return v, n.v.explain("read the API server's config", err)
	}
	v.Config = c.Metadata().Version().String()
	files, err := safe.StateGetByID[*k8s.ConfigStatus](ctx, n.c.COSI, k8s.ConfigStatusStaticPodID)
	switch {
	case status.Code(err) == codes.NotFound || state.IsNotFoundError(err):
	case err != nil:
		return v, n.v.explain("read the status of the API server's configuration files", err)
	default:
		v.ConfigFiles = files.TypedSpec().Version
	}
	return v, nil
}
