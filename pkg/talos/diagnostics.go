package talos

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoSuchLink is returned by PacketCapture for a link the node does not have.
var ErrNoSuchLink = errors.New("the node has no such link")

// PacketCapture says what to capture.
type PacketCapture struct {
	// Interface is the link, as the node names it.
	Interface string
	// Promiscuous puts the link in promiscuous mode while capturing.
	Promiscuous bool
	// SnapLength is the most bytes kept of each packet; 0 lets the node decide.
	SnapLength uint32
	// Duration is how long to capture; 0 captures until the caller's
	// context ends.
	Duration time.Duration
}

// PacketCapture implements Node with the call `talosctl pcap` makes.
func (n *machineryNode) PacketCapture(ctx context.Context, pc PacketCapture) (io.ReadCloser, error) {
	// Talos reports an unknown link only inside the stream, once the caller
	// is reading it; asking first gives the caller a clean error instead.
	if _, err := safe.StateGetByID[*network.LinkStatus](ctx, n.c.COSI, pc.Interface); err != nil {
		if state.IsNotFoundError(err) || status.Code(err) == codes.NotFound {
			return nil, fmt.Errorf("%w: %q on %s", ErrNoSuchLink, pc.Interface, n.v.address)
		}
		return nil, n.v.explain("read link "+pc.Interface, err)
	}
	cancel := context.CancelFunc(func() {})
	if pc.Duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, pc.Duration)
	}
	r, err := n.c.PacketCapture(ctx, &machineapi.PacketCaptureRequest{
		Interface: pc.Interface, Promiscuous: pc.Promiscuous, SnapLen: pc.SnapLength,
	})
	if err != nil {
		cancel()
		return nil, n.v.explain("capture packets on "+pc.Interface, err)
	}
	return &timedCapture{ReadCloser: r, timed: pc.Duration > 0, cancel: cancel}, nil
}

// timedCapture ends a capture cleanly when its time is up. The deadline
// travels to the node as the call's grpc-timeout, so the stream fails with
// DeadlineExceeded from whichever side notices first: this process's timer,
// or the node's status arriving before that timer has fired.
type timedCapture struct {
	io.ReadCloser
	timed  bool
	cancel context.CancelFunc
}

func (c *timedCapture) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if err != nil && c.timed && (errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded) {
		return n, io.EOF
	}
	return n, err
}

func (c *timedCapture) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// bundleResources are the COSI resources a support bundle holds, the ones
// read first when a node misbehaves; all are readable by os:reader.
var bundleResources = []struct {
	namespace resource.Namespace
	typ       resource.Type
}{
	{runtime.NamespaceName, runtime.MachineStatusType},
	{runtime.NamespaceName, runtime.VersionType},
	{configres.NamespaceName, configres.MachineTypeType},
	{hardware.NamespaceName, hardware.SystemInformationType},
	{block.NamespaceName, block.DiskType},
	{network.NamespaceName, network.LinkStatusType},
	{network.NamespaceName, network.AddressStatusType},
	{network.NamespaceName, network.HostnameStatusType},
	{k8s.NamespaceName, k8s.NodeIPType},
	{k8s.NamespaceName, k8s.NodenameType},
	{etcd.NamespaceName, etcd.MemberType},
}

// SupportBundle implements Node. It writes a zip archive of what
// `talosctl support` gathers from one node with the os:reader role:
//
//	version           the Talos version the node runs
//	services          its services, their state and health
//	service-logs/ID.log  the whole log of each service
//	dmesg.log         the kernel log of the current boot
//	resources/TYPE.yaml  the COSI resources in bundleResources
//	errors.txt        what could not be read, if anything
//
// Each file streams from the node into the archive, so memory stays flat
// whatever the logs weigh. A part the node refuses is noted in errors.txt
// and the rest still collected; only a failure to write w, or the end of
// ctx, stops the bundle.
func (n *machineryNode) SupportBundle(ctx context.Context, w io.Writer) error {
	b := &bundle{z: zip.NewWriter(w), modified: time.Now()}

	b.add(ctx, "version", n.writeVersion)
	var services []*machineapi.ServiceInfo
	b.add(ctx, "services", func(ctx context.Context, w io.Writer) error {
		var err error
		services, err = n.writeServices(ctx, w)
		return err
	})
	for _, svc := range services {
		b.add(ctx, "service-logs/"+svc.GetId()+".log", func(ctx context.Context, w io.Writer) error {
			stream, err := n.c.Logs(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, svc.GetId(), false, -1)
			if err != nil {
				return err
			}
			return copyStream(w, stream)
		})
	}
	b.add(ctx, "dmesg.log", func(ctx context.Context, w io.Writer) error {
		stream, err := n.c.Dmesg(ctx, false, false)
		if err != nil {
			return err
		}
		return copyStream(w, stream)
	})
	for _, r := range bundleResources {
		name := "resources/" + strings.ToLower(strings.SplitN(r.typ, ".", 2)[0]) + ".yaml"
		b.add(ctx, name, func(ctx context.Context, w io.Writer) error { return n.writeResources(ctx, w, r.namespace, r.typ) })
	}
	return b.close(ctx, n.v.address)
}

// bundle writes the files of a support bundle into a zip archive and keeps
// the first write error (after which nothing more is written) and the
// errors of the parts it could not read.
type bundle struct {
	z        *zip.Writer
	modified time.Time
	failed   error
	missing  []string
}

// add writes one file with fill. A fill error is noted; a write error stops the bundle.
func (b *bundle) add(ctx context.Context, name string, fill func(context.Context, io.Writer) error) {
	if b.failed != nil {
		return
	}
	if err := ctx.Err(); err != nil {
		b.failed = err
		return
	}
	f, err := b.z.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: b.modified})
	if err != nil {
		b.failed = err
		return
	}
	w := &watchedWriter{w: f}
	if err := fill(ctx, w); err != nil {
		if w.err != nil {
			b.failed = w.err
			return
		}
		b.missing = append(b.missing, fmt.Sprintf("%s: %v", name, err))
	}
}

// close writes errors.txt, if anything was missing, and ends the archive.
func (b *bundle) close(ctx context.Context, address string) error {
	if len(b.missing) > 0 {
		b.add(ctx, "errors.txt", func(_ context.Context, w io.Writer) error {
			_, err := fmt.Fprintf(w, "Parts of the support bundle of %s could not be read:\n%s\n", address, strings.Join(b.missing, "\n"))
			return err
		})
	}
	if b.failed != nil {
		return b.failed
	}
	return b.z.Close()
}

// watchedWriter remembers a write error, to tell the archive failing from
// the node failing.
type watchedWriter struct {
	w   io.Writer
	err error
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// copyStream copies a Talos data stream into w.
func copyStream(w io.Writer, stream client.MachineStream) error {
	r, err := client.ReadStream(stream)
	if err != nil {
		return err
	}
	defer r.Close() //nolint:errcheck
	_, err = io.Copy(w, r)
	return err
}

func (n *machineryNode) writeVersion(ctx context.Context, w io.Writer) error {
	resp, err := n.c.Version(ctx)
	if err != nil {
		return err
	}
	for _, m := range resp.GetMessages() {
		v := m.GetVersion()
		if _, err := fmt.Fprintf(w, "Tag:        %s\nSHA:        %s\nBuilt:      %s\nGo version: %s\nOS/Arch:    %s/%s\n",
			v.GetTag(), v.GetSha(), v.GetBuilt(), v.GetGoVersion(), v.GetOs(), v.GetArch()); err != nil {
			return err
		}
	}
	return nil
}

func (n *machineryNode) writeServices(ctx context.Context, w io.Writer) ([]*machineapi.ServiceInfo, error) {
	resp, err := n.c.ServiceList(ctx)
	if err != nil {
		return nil, err
	}
	var services []*machineapi.ServiceInfo
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSTATE\tHEALTH\tLAST EVENT") //nolint:errcheck // the flush reports it
	for _, m := range resp.GetMessages() {
		for _, s := range m.GetServices() {
			services = append(services, s)
			health := "?"
			if h := s.GetHealth(); h != nil && !h.GetUnknown() {
				health = "FAIL"
				if h.GetHealthy() {
					health = "OK"
				}
			}
			var last string
			if events := s.GetEvents().GetEvents(); len(events) > 0 {
				last = events[len(events)-1].GetMsg()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.GetId(), s.GetState(), health, last) //nolint:errcheck // the flush reports it
		}
	}
	return services, tw.Flush()
}

func (n *machineryNode) writeResources(ctx context.Context, w io.Writer, namespace resource.Namespace, typ resource.Type) error {
	list, err := n.c.COSI.List(ctx, resource.NewMetadata(namespace, typ, "", resource.VersionUndefined))
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return nil
	}
	enc := yaml.NewEncoder(w)
	for _, r := range list.Items {
		doc, err := resource.MarshalYAML(r)
		if err != nil {
			return fmt.Errorf("%s: %w", resource.String(r), err)
		}
		if err := enc.Encode(doc); err != nil {
			return err
		}
	}
	return enc.Close()
}
