package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/schematic"
)

func newImageURLs(o *Options) *cobra.Command {
	var machine, arch string
	var secureBoot bool
	cmd := &cobra.Command{
		Use:   "image-urls CLUSTER",
		Short: "Show where to boot and install new machines of a cluster from: ISO, disk image, PXE, installer",
		Long: `image-urls lists the Image Factory's boot media of the cluster's schematic at the Talos version it
runs, so that new machines boot the image the others run: the ISO, the raw disk image, the iPXE
script with the kernel and initramfs it boots (with --secureboot, the SecureBoot ISO and UKI), and
the installer image upgrades pull. With --machine, those of that machine's own schematic. It
reads the cluster's status.image, which ichor-controller keeps from the installation's image
factory (spec.settings.imageFactory).`,
		Example: `  ichor -n demo image-urls demo
  ichor -n demo image-urls demo --arch arm64 --machine rpi-1`,
		GroupID: "machines",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&machine, "machine", "", "a TalosMachine of the cluster: its own schematic's media, and SecureBoot ones if it booted SecureBoot")
	cmd.Flags().StringVar(&arch, "arch", "amd64", fmt.Sprintf("the machines' architecture: one of %v", schematic.Arches))
	cmd.Flags().BoolVar(&secureBoot, "secureboot", false, "the SecureBoot media (signed UKI and ISO)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !slices.Contains(schematic.Arches, arch) {
			return fmt.Errorf("--arch %q: the factory builds for %v", arch, schematic.Arches)
		}
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		media, err := imageMedia(cmd.Context(), c, ns, args[0], machine, arch, secureBoot)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
		for _, m := range media {
			fmt.Fprintf(w, "%s\t%s\n", m.Name, m.Ref)
		}
		return w.Flush()
	}
	return cmd
}

// imageMedia are the media of cluster's schematic, or of machine's own.
func imageMedia(ctx context.Context, c versioned.Interface, ns, cluster, machine, arch string, secureBoot bool) ([]schematic.Medium, error) {
	tc, err := c.IchorV1alpha1().TalosClusters(ns).Get(ctx, cluster, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	img := tc.Status.Image
	if img == nil {
		why := "ichor-controller has not looked at it yet"
		if cond := meta.FindStatusCondition(tc.Status.Conditions, v1alpha1.ClusterConditionImageReady); cond != nil {
			why = cond.Message
		}
		return nil, fmt.Errorf("TalosCluster %s/%s installs from no image factory (%s): an admin names one in spec.settings.imageFactory of the IchorInstallation", ns, cluster, why)
	}
	factory, id, version, _, err := schematic.ParseInstaller(img.Installer, img.FactoryURL)
	if err != nil {
		return nil, err
	}
	if machine != "" {
		m, err := c.IchorV1alpha1().TalosMachines(ns).Get(ctx, machine, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if m.Spec.ClusterName != cluster {
			return nil, fmt.Errorf("TalosMachine %s/%s is not a machine of TalosCluster %s", ns, machine, cluster)
		}
		if m.Spec.Schematic != nil {
			s, err := schematic.Of(m.Spec.Schematic)
			if err != nil {
				return nil, fmt.Errorf("TalosMachine %s/%s: %w", ns, machine, err)
			}
			if id, err = s.ID(); err != nil {
				return nil, err
			}
		}
		secureBoot = secureBoot || m.Status.Security != nil && m.Status.Security.SecureBoot
	}
	return factory.Media(id, version, arch, secureBoot), nil
}

func newSchematic(o *Options) *cobra.Command {
	var machine, overlayName, overlayImage, overlayOptions string
	var extensions, kernelArgs []string
	var clear bool
	cmd := &cobra.Command{
		Use:   "schematic CLUSTER",
		Short: "Set the Image Factory schematic (extensions, kernel arguments, overlay) of a cluster or machine",
		Long: `schematic sets the cluster's spec.schematic, or with --machine that machine's own, through the
schematic subresource (admins: a schematic chooses what code nodes run). The flags give the whole
schematic; --clear removes it (the stock image, or for a machine the cluster's). Every config
then names the new installer, a change Talos takes without a reboot; the next talos-upgrade
installs it (one to the version the cluster runs installs just the new schematic).`,
		Example: `  ichor -n demo schematic demo --extension siderolabs/iscsi-tools --extension siderolabs/util-linux-tools
  ichor -n demo schematic demo --machine rpi-1 --overlay-name rpi_generic --overlay-image siderolabs/sbc-raspberrypi
  ichor -n demo schematic demo --clear`,
		GroupID: "machines",
		Args:    cobra.ExactArgs(1),
	}
	p := newPrinter(cmd, "schematic set")
	cmd.Flags().StringVar(&machine, "machine", "", "set this TalosMachine's own schematic instead of the cluster's")
	cmd.Flags().StringArrayVar(&extensions, "extension", nil, "an official system extension (siderolabs/iscsi-tools); repeat for more, in order")
	cmd.Flags().StringArrayVar(&kernelArgs, "kernel-arg", nil, "an extra kernel argument; repeat for more")
	cmd.Flags().StringVar(&overlayName, "overlay-name", "", "a board overlay's name (rpi_generic)")
	cmd.Flags().StringVar(&overlayImage, "overlay-image", "", "the board overlay's image (siderolabs/sbc-raspberrypi)")
	cmd.Flags().StringVar(&overlayOptions, "overlay-options-file", "", "a YAML file of the overlay's options")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the schematic")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var s *v1alpha1.Schematic
		switch {
		case clear && (len(extensions) > 0 || len(kernelArgs) > 0 || overlayName != "" || overlayImage != "" || overlayOptions != ""):
			return errors.New("--clear removes the schematic: give it alone")
		case !clear && len(extensions) == 0 && len(kernelArgs) == 0 && overlayName == "" && overlayImage == "":
			return errors.New("give the schematic (--extension, --kernel-arg, --overlay-name and --overlay-image), or --clear")
		case !clear:
			s = &v1alpha1.Schematic{SystemExtensions: extensions, ExtraKernelArgs: kernelArgs}
			if overlayName != "" || overlayImage != "" || overlayOptions != "" {
				s.Overlay = &v1alpha1.SchematicOverlay{Name: overlayName, Image: overlayImage}
				if overlayOptions != "" {
					data, err := os.ReadFile(overlayOptions)
					if err != nil {
						return err
					}
					s.Overlay.Options = string(data)
				}
			}
		}
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		if machine != "" {
			m, err := c.IchorV1alpha1().TalosMachines(ns).Get(cmd.Context(), machine, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if m.Spec.ClusterName != args[0] {
				return fmt.Errorf("TalosMachine %s/%s is not a machine of TalosCluster %s", ns, machine, args[0])
			}
			m.Spec.Schematic = s
			if m, err = c.IchorV1alpha1().TalosMachines(ns).UpdateSchematic(cmd.Context(), m.Name, m, metav1.UpdateOptions{}); err != nil {
				return err
			}
			return p.print(o, m)
		}
		tc, err := c.IchorV1alpha1().TalosClusters(ns).Get(cmd.Context(), args[0], metav1.GetOptions{})
		if err != nil {
			return err
		}
		tc.Spec.Schematic = s
		if tc, err = c.IchorV1alpha1().TalosClusters(ns).UpdateSchematic(cmd.Context(), tc.Name, tc, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return p.print(o, tc)
	}
	return cmd
}
