package download

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// Bounds of a packet capture's options.
const (
	DefaultCaptureDuration = 10 * time.Second
	MaxCaptureDuration     = time.Hour
	// MaxSnapLength is the largest snap length Linux captures take.
	MaxSnapLength = 262144
)

// linkName is what Linux accepts as a link name: at most 15 bytes, no
// slash, colon or white space.
var linkName = regexp.MustCompile(`^[^/:\s]{1,15}$`)

// PacketCaptureREST is GET talosmachines/NAME/packet-capture: a pcap file
// of one of the node's links, captured for durationSeconds, as `talosctl
// pcap` saves it. It needs os:operator on the node.
type PacketCaptureREST struct {
	Deps
	streamEndpoint
}

var (
	_ rest.GetterWithOptions = &PacketCaptureREST{}
	_ rest.StorageMetadata   = &PacketCaptureREST{}
)

// New returns an empty TalosMachine, the kind the subresource belongs to.
func (r *PacketCaptureREST) New() runtime.Object { return &ichor.TalosMachine{} }

// NewGetOptions returns the capture's query parameters.
func (r *PacketCaptureREST) NewGetOptions() (runtime.Object, bool, string) {
	return &ichor.PacketCaptureOptions{}, false, ""
}

// ValidatePacketCaptureOptions checks a capture's options.
func ValidatePacketCaptureOptions(o *ichor.PacketCaptureOptions) field.ErrorList {
	var errs field.ErrorList
	switch {
	case o.Interface == "":
		errs = append(errs, field.Required(field.NewPath("interface"), "the link to capture on, such as eth0"))
	case !linkName.MatchString(o.Interface) || o.Interface == "." || o.Interface == "..":
		errs = append(errs, field.Invalid(field.NewPath("interface"), o.Interface, "not a link name: at most 15 bytes, without '/', ':' or white space"))
	}
	if o.SnapLength < 0 || o.SnapLength > MaxSnapLength {
		errs = append(errs, field.Invalid(field.NewPath("snapLength"), o.SnapLength, fmt.Sprintf("must be between 0 (the node's default) and %d", MaxSnapLength)))
	}
	if o.DurationSeconds < 0 || o.DurationSeconds > int64(MaxCaptureDuration/time.Second) {
		errs = append(errs, field.Invalid(field.NewPath("durationSeconds"), o.DurationSeconds,
			fmt.Sprintf("must be between 1 and %d (0 or unset: %d)", int64(MaxCaptureDuration/time.Second), int64(DefaultCaptureDuration/time.Second))))
	}
	return errs
}

// Get checks the request and returns the capture's stream, which ends
// after the capture's duration.
func (r *PacketCaptureREST) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	subresource := r.row.Subresource
	o := options.(*ichor.PacketCaptureOptions)
	if err := refuseDryRun(o.DryRun); err != nil {
		return nil, err
	}
	if errs := ValidatePacketCaptureOptions(o); len(errs) > 0 {
		return nil, apierrors.NewInvalid(ichor.Kind("PacketCaptureOptions"), name, errs)
	}
	m, user, err := r.machineFor(ctx, name, subresource)
	if err != nil {
		return nil, err
	}
	duration := time.Duration(o.DurationSeconds) * time.Second
	if duration == 0 {
		duration = DefaultCaptureDuration
	}
	return &download{
		deps: &r.Deps, user: user, object: reference("TalosMachine", m), contentType: r.row.ContentType,
		what: fmt.Sprintf("a %s %s of link %s on TalosMachine %s", duration, subresource, o.Interface, m.Name),
		open: func(ctx context.Context) (*opened, error) {
			node, credential, err := r.session(ctx, m, v1alpha1.PurposePacketCapture)
			if err != nil {
				return nil, err
			}
			captureCtx, cancel := context.WithTimeout(ctx, duration)
			body, err := node.PacketCapture(captureCtx, talos.PacketCapture{
				Interface: o.Interface, Promiscuous: o.Promiscuous, SnapLength: uint32(o.SnapLength), //nolint:gosec // validated
			})
			if err != nil {
				cancel()
				_ = node.Close()
				if errors.Is(err, talos.ErrNoSuchLink) {
					return nil, apierrors.NewInvalid(ichor.Kind("PacketCaptureOptions"), name, field.ErrorList{
						field.NotFound(field.NewPath("interface"), o.Interface)})
				}
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("packet capture on TalosMachine %s: %v", name, err))
			}
			return &opened{
				body: &timedCapture{ReadCloser: body, ctx: captureCtx}, release: func() { cancel(); _ = node.Close() }, credential: credential,
			}, nil
		},
	}, nil
}

// timedCapture ends the capture cleanly when its time is up: the node's
// stream then fails with the deadline, which is the capture's end.
type timedCapture struct {
	io.ReadCloser
	ctx context.Context
}

func (c *timedCapture) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if err != nil && errors.Is(c.ctx.Err(), context.DeadlineExceeded) {
		return n, io.EOF
	}
	return n, err
}
