package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/pprof/profile"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/test/internal/proc"
)

// Share is one kind of work's part of ichor-apiserver's CPU per request.
type Share struct {
	Work string `json:"work"`
	// PerRequest is its CPU time per request, in microseconds.
	PerRequest float64 `json:"perRequestMicros"`
	// Percent is its part of the profile's samples.
	Percent float64 `json:"percent"`
}

// Profile is where ichor-apiserver's own CPU went during one workload
// through kube-apiserver, per request the workload made.
type Profile struct {
	Workload string `json:"workload"`
	Requests int    `json:"requests"`
	// CPUPerRequest is ichor-apiserver's CPU time (from /proc) per request, in microseconds.
	CPUPerRequest float64 `json:"cpuPerRequestMicros"`
	Shares        []Share `json:"shares"`
	// File is where WriteJSON stored the CPU profile itself, for `go tool pprof`.
	File string `json:"file,omitempty"`
	raw  []byte
}

// works sorts a sample by its innermost frame that names one: a sample in
// the serializer called by the etcd storage is encoding, one in SHA-256
// called by the front proxy's certificate check is that check. A sample
// no frame names is "other".
var works = []struct {
	name     string
	prefixes []string
}{
	{"front proxy's client certificate verified", []string{"k8s.io/apiserver/pkg/authentication/request/x509.(*Verifier)"}},
	{"authentication (rest)", []string{"k8s.io/apiserver/pkg/authentication/", "k8s.io/apiserver/pkg/endpoints/filters.withAuthentication"}},
	{"authorization", []string{"k8s.io/apiserver/pkg/authorization/", "ichor.dev/ichor/pkg/authz.", "k8s.io/apiserver/pkg/endpoints/filters.WithAuthorization"}},
	{"priority and fairness", []string{"k8s.io/apiserver/pkg/util/flowcontrol", "k8s.io/apiserver/pkg/server/filters.(*priorityAndFairnessHandler)"}},
	{"audit", []string{"k8s.io/apiserver/pkg/audit", "k8s.io/apiserver/plugin/pkg/audit", "k8s.io/apiserver/pkg/endpoints/filters.WithAudit"}},
	{"admission", []string{"k8s.io/apiserver/pkg/admission", "ichor.dev/ichor/pkg/admission"}},
	{"encoding and decoding", []string{"k8s.io/apimachinery/pkg/runtime", "encoding/json", "sigs.k8s.io/json", "sigs.k8s.io/structured-merge-diff", "k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager", "k8s.io/apimachinery/pkg/util/managedfields"}},
	{"watch cache", []string{"k8s.io/apiserver/pkg/storage/cacher"}},
	{"etcd client", []string{"go.etcd.io/etcd", "k8s.io/apiserver/pkg/storage", "google.golang.org/grpc"}},
	{"validation, defaulting, strategy", []string{"ichor.dev/ichor/pkg/registry", "ichor.dev/ichor/pkg/apis"}},
	{"metrics", []string{"github.com/prometheus", "k8s.io/component-base/metrics", "k8s.io/apiserver/pkg/endpoints/metrics"}},
	{"tracing", []string{"go.opentelemetry.io", "k8s.io/component-base/tracing"}},
	{"TLS", []string{"crypto/tls"}},
	{"HTTP and HTTP/2", []string{"net/http", "golang.org/x/net/http2"}},
	{"network I/O", []string{"internal/poll", "net.", "syscall"}},
	{"garbage collection", []string{"runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.mallocgc", "runtime.bgsweep", "runtime.bgscavenge"}},
	{"scheduler", []string{"runtime.schedule", "runtime.findRunnable", "runtime.mcall", "runtime.park_m"}},
}

const otherWork = "other"

// workOf names the kind of work of one sample's stack, leaf first.
func workOf(s *profile.Sample) string {
	for _, loc := range s.Location {
		// Inlined frames come innermost first too.
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			fn := line.Function.Name
			for _, w := range works {
				for _, p := range w.prefixes {
					if strings.HasPrefix(fn, p) {
						return w.name
					}
				}
			}
		}
	}
	return otherWork
}

// profiles profiles ichor-apiserver during two workloads on p: one client
// creating machines one after another, and one writing machines that
// b.cfg.Watchers watches follow.
func (b *run) profiles(ctx context.Context, p *path) error {
	if b.cfg.ProfileSeconds <= 0 {
		return nil
	}
	const ns = "bench-profile"
	if err := b.namespace(ctx, ns); err != nil {
		return err
	}
	creates := func(ctx context.Context, done *atomic.Int64) error {
		for i := 0; ; i++ {
			if _, err := p.create(ctx, machine(ns, fmt.Sprintf("post-%d", i), i), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: create in %s: %w", p.name, ns, err)
			}
			done.Add(1)
		}
	}
	watched := func(ctx context.Context, done *atomic.Int64) error {
		// More writes than the profile can see at one a millisecond; the
		// load is stopped when the profile ends.
		_, _, err := watchLatency(ctx, p, ns, "watched", 0, b.cfg.Watchers, b.cfg.ProfileSeconds*1000, done, nil)
		return err
	}
	for _, w := range []struct {
		name string
		load func(context.Context, *atomic.Int64) error
	}{
		{"POST, one client", creates},
		{fmt.Sprintf("watched write, %d watchers, one writer", b.cfg.Watchers), watched},
	} {
		b.logf("%s: profiling ichor-apiserver for %ds: %s", p.name, b.cfg.ProfileSeconds, w.name)
		prof, err := b.profile(ctx, w.load)
		if err != nil {
			return fmt.Errorf("profile of %s: %w", w.name, err)
		}
		prof.Workload = w.name
		b.r.Profiles = append(b.r.Profiles, prof)
	}
	return nil
}

// profile runs load while it takes a CPU profile of ichor-apiserver, and
// splits the CPU per request load counted by work.
func (b *run) profile(ctx context.Context, load func(context.Context, *atomic.Int64) error) (*Profile, error) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var requests atomic.Int64
	done := make(chan error, 1)
	go func() { done <- load(lctx, &requests) }()
	cpu0, err := proc.CPUTime(b.ichorPID)
	if err != nil {
		return nil, err
	}
	n0 := requests.Load()
	raw, perr := cpuProfile(ctx, b.ichorDirect, b.cfg.ProfileSeconds)
	n := requests.Load() - n0
	cpu1, err := proc.CPUTime(b.ichorPID)
	cancel()
	if lerr := <-done; lctx.Err() == nil || ctx.Err() != nil {
		// The load ended before it was stopped: that is the failure.
		return nil, fmt.Errorf("the load ended: %w", lerr)
	}
	if perr != nil {
		return nil, fmt.Errorf("ichor-apiserver's CPU profile: %w", perr)
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("no request finished while ichor-apiserver was profiled")
	}
	prof, err := profile.ParseData(raw)
	if err != nil {
		return nil, fmt.Errorf("parse ichor-apiserver's CPU profile: %w", err)
	}
	return &Profile{Requests: int(n), CPUPerRequest: float64((cpu1 - cpu0).Microseconds()) / float64(n),
		Shares: shares(prof, int(n)), raw: raw}, nil
}

// shares splits prof's CPU samples by work, per request of n, largest first.
func shares(prof *profile.Profile, n int) []Share {
	cpu := slices.IndexFunc(prof.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" })
	if cpu < 0 {
		return nil
	}
	by := map[string]int64{}
	var total int64
	for _, s := range prof.Sample {
		by[workOf(s)] += s.Value[cpu]
		total += s.Value[cpu]
	}
	var out []Share
	for w, v := range by {
		out = append(out, Share{Work: w, PerRequest: float64(v) / 1e3 / float64(n), Percent: 100 * float64(v) / float64(max(total, 1))})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if c := int(b.Percent*1000) - int(a.Percent*1000); c != 0 {
			return c
		}
		return strings.Compare(a.Work, b.Work)
	})
	return out
}

// cpuProfile asks the server of cfg for a CPU profile of seconds.
func cpuProfile(ctx context.Context, cfg *rest.Config, seconds int) ([]byte, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// writeProfile prints p below the table.
func writeProfile(w io.Writer, p *Profile) {
	fmt.Fprintf(w, "\nichor-apiserver's CPU per request through kube-apiserver, %s (%d requests): %.0f µs\n", p.Workload, p.Requests, p.CPUPerRequest)
	for _, s := range p.Shares {
		fmt.Fprintf(w, "  %5.1f%%  %6.0f µs  %s\n", s.Percent, s.PerRequest, s.Work)
	}
	if p.File != "" {
		fmt.Fprintf(w, "profile: %s\n", p.File)
	}
}
