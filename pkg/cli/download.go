package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/atomicfile"
	"ichor.dev/ichor/pkg/bytesize"
)

// downloadNames are the downloads the command takes, by subresource name.
func downloadNames() []string {
	names := make([]string, len(ichor.Downloads))
	for i, d := range ichor.Downloads {
		names[i] = d.Subresource
	}
	return names
}

// downloadUse is the command's use line: the downloads, by the object they are of.
func downloadUse() string {
	var parts []string
	for _, resource := range []string{"talosmachines", "talosclusters"} {
		var names []string
		for _, d := range ichor.Downloads {
			if d.Resource == resource {
				names = append(names, d.Subresource)
			}
		}
		parts = append(parts, strings.Join(names, "|")+" "+strings.ToUpper(objectOf(resource)))
	}
	return "download " + strings.Join(parts, " | ")
}

// downloadHelp is a line per download: what it streams and who may.
func downloadHelp() string {
	var b strings.Builder
	for _, d := range ichor.Downloads {
		who := "admins"
		if d.Role == ichor.UserRoleOperator {
			who = "operators and admins"
		}
		fmt.Fprintf(&b, "\n  %-19s %s\n  %-19s %s; read with %s", d.Subresource, d.Streams, "", who, d.TalosRole)
	}
	return b.String()
}

// objectOf is what a download's object is called on the command line.
func objectOf(resource string) string {
	return map[string]string{"talosmachines": "machine", "talosclusters": "cluster"}[resource]
}

func newDownload(o *Options) *cobra.Command {
	var (
		output      string
		iface       string
		promiscuous bool
		snapLength  int64
		duration    time.Duration
	)
	cmd := &cobra.Command{
		Use:   downloadUse(),
		Short: "Download what a node holds, streamed through ichor-apiserver (the download verb)",
		Long: `download streams a download subresource to a file (-O, "-" for standard output), with its
progress on standard error: a bar with bytes, rate and time on a terminal, one line otherwise.
The file appears only once the whole stream arrived: a stream cut by the node or the network is
an error, and no partial file is left. Every download is recorded as an Event naming you.
` + downloadHelp(),
		Example: `  ichor -n demo download etcd-snapshot m1
  ichor -n demo download packet-capture m4 --interface eth0 --duration 30s -O m4.pcap
  ichor -n demo download talosconfig-reader demo -O - > talosconfig
  ichor -n demo download credentials demo -O demo-credentials.zip`,
		GroupID: "machines",
		Args:    cobra.ExactArgs(2),
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return downloadNames(), cobra.ShellCompDirectiveNoFileComp
		},
	}
	cmd.Flags().StringVarP(&output, "output-file", "O", "", `where to save it; "-" for standard output (default: named after the object)`)
	cmd.Flags().StringVar(&iface, "interface", "", "packet-capture: the link to capture on")
	cmd.Flags().BoolVar(&promiscuous, "promiscuous", false, "packet-capture: put the link in promiscuous mode")
	cmd.Flags().Int64Var(&snapLength, "snap-length", 0, "packet-capture: the most bytes kept of each packet (0: the node's default)")
	cmd.Flags().DurationVar(&duration, "duration", 0, "packet-capture: how long to capture (0: the server's default)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name := args[0], args[1]
		i := slices.IndexFunc(ichor.Downloads, func(d ichor.Download) bool { return d.Subresource == kind })
		if i < 0 {
			return fmt.Errorf("%q is not a download: one of %s", kind, strings.Join(downloadNames(), ", "))
		}
		d := ichor.Downloads[i]
		if kind == "packet-capture" && iface == "" {
			return fmt.Errorf("a packet capture needs --interface")
		}
		c, ns, err := o.clientIn()
		if err != nil {
			return err
		}
		req := c.IchorV1alpha1().RESTClient().Get().Namespace(ns).Resource(d.Resource).Name(name).SubResource(d.Subresource)
		if kind == "packet-capture" {
			req = req.Param("interface", iface)
			if promiscuous {
				req = req.Param("promiscuous", "true")
			}
			if snapLength > 0 {
				req = req.Param("snapLength", strconv.FormatInt(snapLength, 10))
			}
			if duration > 0 {
				req = req.Param("durationSeconds", strconv.FormatInt(int64(duration.Round(time.Second)/time.Second), 10))
			}
		}
		stream, err := req.Stream(cmd.Context())
		if err != nil {
			return err
		}
		defer stream.Close() //nolint:errcheck
		if output == "" {
			output = fmt.Sprintf(d.File, name)
		}
		return save(cmd.Context(), o, stream, output, d.Subresource+" "+name)
	}
	return cmd
}

// save copies stream to path ("-": standard output) with its progress on
// standard error. A file is written beside path and renamed onto it only
// once the stream ended cleanly, so a cut stream leaves nothing behind.
func save(ctx context.Context, o *Options, stream io.Reader, path, what string) error {
	start := time.Now()
	progress := newProgress(o, what)
	var n int64
	var err error
	if path == "-" {
		n, err = io.Copy(io.MultiWriter(o.Out, progress), stream)
	} else {
		n, err = saveFile(stream, path, progress)
	}
	_ = progress.Finish()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		if path == "-" {
			return fmt.Errorf("the download of %s was cut after %s: %w", what, bytesize.Format(n), err)
		}
		return fmt.Errorf("the download of %s was cut after %s: %w; nothing was saved to %s", what, bytesize.Format(n), err, path)
	}
	elapsed := time.Since(start)
	rate := float64(n) / max(elapsed.Seconds(), 1e-3)
	dest := path
	if path == "-" {
		dest = "standard output"
	}
	fmt.Fprintf(o.ErrOut, "%s: %s in %s (%s/s) to %s\n", what, bytesize.Format(n), elapsed.Round(time.Millisecond), bytesize.Format(int64(rate)), dest)
	return nil
}

// saveFile saves the stream whole at path, readable by the user only, or
// leaves path as it was.
func saveFile(stream io.Reader, path string, progress io.Writer) (int64, error) {
	var n int64
	err := atomicfile.WriteFile(path, 0o600, func(w io.Writer) error {
		var err error
		n, err = io.Copy(io.MultiWriter(w, progress), stream)
		return err
	})
	return n, err
}

// progressWriter counts what passes, and shows it.
type progressWriter interface {
	io.Writer
	Finish() error
}

// newProgress is a progress bar on standard error when it is a terminal,
// and nothing otherwise (save prints one line at the end).
func newProgress(o *Options, what string) progressWriter {
	if !isTerminal(o.ErrOut) {
		return quiet{}
	}
	return progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(o.ErrOut),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
	)
}

type quiet struct{}

func (quiet) Write(p []byte) (int, error) { return len(p), nil }
func (quiet) Finish() error               { return nil }
