package download

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

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

// validateCaptureRequest refuses a capture whose options are not valid.
func validateCaptureRequest(name string, o *ichor.PacketCaptureOptions) error {
	if errs := ValidatePacketCaptureOptions(o); len(errs) > 0 {
		return apierrors.NewInvalid(ichor.Kind("PacketCaptureOptions"), name, errs)
	}
	return nil
}

// packetCapture streams GET talosmachines/NAME/packet-capture: a pcap file
// of one of the node's links, captured for durationSeconds, as `talosctl
// pcap` saves it. It needs os:operator on the node. The stream ends after
// the capture's duration.
func packetCapture(_ context.Context, r request[*ichor.TalosMachine, *ichor.PacketCaptureOptions]) (string, opener, error) {
	m, o := r.object, r.options
	duration := time.Duration(o.DurationSeconds) * time.Second
	if duration == 0 {
		duration = DefaultCaptureDuration
	}
	what := fmt.Sprintf("a %s %s of link %s on TalosMachine %s", duration, r.row.Subresource, o.Interface, m.Name)
	return what, func(ctx context.Context) (*opened, error) {
		node, credential, err := r.session(ctx, m, v1alpha1.PurposePacketCapture)
		if err != nil {
			return nil, err
		}
		body, err := node.PacketCapture(ctx, talos.PacketCapture{
			Interface: o.Interface, Promiscuous: o.Promiscuous, SnapLength: uint32(o.SnapLength), //nolint:gosec // validated
			Duration: duration,
		})
		if err != nil {
			_ = node.Close()
			if errors.Is(err, talos.ErrNoSuchLink) {
				return nil, apierrors.NewInvalid(ichor.Kind("PacketCaptureOptions"), m.Name, field.ErrorList{
					field.NotFound(field.NewPath("interface"), o.Interface)})
			}
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("packet capture on TalosMachine %s: %v", m.Name, err))
		}
		return &opened{body: body, release: func() { _ = node.Close() }, credential: credential}, nil
	}, nil
}
