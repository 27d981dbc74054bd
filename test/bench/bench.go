package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/internal/proc"
)

// Run measures both paths on cp, whose ichor-apiserver must run as a binary
// (harness.Options.IchorBinary) so that its memory can be read. It installs
// the CRDs itself. logf receives progress.
func Run(ctx context.Context, cp *harness.ControlPlane, cfg Config, logf func(string, ...any)) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cp.IchorPID() == 0 {
		return nil, errors.New("ichor-apiserver runs in this process; start the control plane with Options.IchorBinary to measure it")
	}
	r := &Report{Started: time.Now(), Config: cfg}
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return nil, err
	}
	// The machines' addresses lie in the provisioning network an admin set,
	// as in an installation: outside it only admins may place machines.
	logf("setting the provisioning networks %s", strings.Join(provisioningNetworks(), ", "))
	if err := setProvisioningNetwork(ctx, cp); err != nil {
		return nil, err
	}
	clients := cp.AdminConfig
	if cfg.Identity == IdentityRBAC {
		logf("granting the machines of both groups to %s", clientUser)
		if err := grantMachines(ctx, kube); err != nil {
			return nil, err
		}
		clients = cp.ConfigFor(clientUser)
	}
	ichor, err := newPath("Ichor", clients, v1alpha1.SchemeGroupVersion, runtime.ContentTypeJSON)
	if err != nil {
		return nil, err
	}
	ichorProtobuf, err := newPath("Ichor (protobuf)", clients, v1alpha1.SchemeGroupVersion, runtime.ContentTypeProtobuf)
	if err != nil {
		return nil, err
	}
	crd, err := newPath("CRD", clients, schema.GroupVersion{Group: BenchGroup, Version: v1alpha1.SchemeGroupVersion.Version}, runtime.ContentTypeJSON)
	if err != nil {
		return nil, err
	}
	logf("installing the CRDs of %s", BenchGroup)
	if err := installCRDs(ctx, cp); err != nil {
		return nil, err
	}
	b := &run{cfg: cfg, ichor: ichor, ichorProtobuf: ichorProtobuf, crd: crd, r: r, logf: logf, kube: kube, kubePID: cp.KubeAPIServerPID(), ichorPID: cp.IchorPID(),
		ichorDirect: cp.IchorAdminConfig()}
	profile := func(ctx context.Context) error { return b.profiles(ctx, b.ichor) }
	for _, step := range []func(context.Context) error{b.creates, b.lists, b.watches, b.applies, b.informers, b.encodings, profile} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	r.Duration = time.Since(r.Started).Round(time.Millisecond)
	return r, nil
}

// run is one benchmark run in progress. Every step measures Ichor and the
// CRD on the same namespaces with the same objects, both in JSON; where the
// client's encoding matters it also measures Ichor spoken in protobuf, which
// custom resources cannot serve, against the same CRD figures. Creates,
// LISTs, watches and applies alternate between the paths in rounds, each
// round starting with the next path, so a slow patch of the shared machine
// (or the first measurement after a heavy step) falls on all of them alike;
// fills and informers run one path after the other.
type run struct {
	cfg        Config
	ichor, crd *path
	// ichorProtobuf is ichor.dev spoken in protobuf.
	ichorProtobuf     *path
	kube              kubernetes.Interface
	kubePID, ichorPID int
	// ichorDirect reaches ichor-apiserver itself, as an admin, for its profile.
	ichorDirect *rest.Config
	r           *Report
	logf        func(string, ...any)
}

func (b *run) paths() [2]*path { return [2]*path{b.ichor, b.crd} }

// withProtobuf is every path, Ichor spoken in protobuf included.
func (b *run) withProtobuf() []*path { return []*path{b.ichor, b.crd, b.ichorProtobuf} }

// interleave calls f for every path in each of rounds rounds; round r
// starts with path r (mod len(paths)).
func interleave(rounds int, paths []*path, f func(round int, p *path) error) error {
	for r := range rounds {
		for i := range paths {
			if err := f(r, paths[(r+i)%len(paths)]); err != nil {
				return err
			}
		}
	}
	return nil
}

// share is the first index and the count of round r's part when n items
// are split over rounds rounds.
func share(n, rounds, r int) (first, count int) {
	first = r * n / rounds
	return first, (r+1)*n/rounds - first
}

// overProtobuf marks the rows where Ichor's client speaks protobuf; the CRD's
// figures are the same JSON ones as in the row without it.
const overProtobuf = " (Ichor in protobuf)"

func listNamespace(size int) string { return fmt.Sprintf("bench-list-%d", size) }

// creates measures create throughput and latency at each concurrency.
func (b *run) creates(ctx context.Context) error {
	for _, clients := range b.cfg.CreateClients {
		ns := fmt.Sprintf("bench-create-%d", clients)
		if err := b.namespace(ctx, ns); err != nil {
			return err
		}
		// Ichor's two clients write different names into the same store.
		prefix := map[*path]string{b.ichor: "machine", b.crd: "machine", b.ichorProtobuf: "protobuf"}
		res := map[*path]*writeResult{b.ichor: {}, b.crd: {}, b.ichorProtobuf: {}}
		b.logf("creating %d machines with %d clients on each path, in %d rounds", b.cfg.Creates, clients, b.cfg.Rounds)
		err := interleave(b.cfg.Rounds, b.withProtobuf(), func(r int, p *path) error {
			first, n := share(b.cfg.Creates, b.cfg.Rounds, r)
			w, err := writeMachines(ctx, p, ns, prefix[p], first, n, clients)
			if err == nil {
				res[p].merge(w)
			}
			return err
		})
		if err != nil {
			return err
		}
		ichor, crd, proto := res[b.ichor], res[b.crd], res[b.ichorProtobuf]
		label := fmt.Sprintf("create, %d client(s)", clients)
		b.r.add(label+": throughput (POST + PUT /status)", UnitPerSec, ichor.perSecond(), crd.perSecond())
		b.r.addDurations(label+": POST p50", ichor.create.quantile(0.5), crd.create.quantile(0.5))
		b.r.addDurations(label+": POST p99", ichor.create.quantile(0.99), crd.create.quantile(0.99))
		b.r.addDurations(label+": PUT /status p50", ichor.status.quantile(0.5), crd.status.quantile(0.5))
		b.r.addDurations(label+": PUT /status p99", ichor.status.quantile(0.99), crd.status.quantile(0.99))
		b.r.add(label+": throughput"+overProtobuf, UnitPerSec, proto.perSecond(), crd.perSecond())
		b.r.addDurations(label+": POST p50"+overProtobuf, proto.create.quantile(0.5), crd.create.quantile(0.5))
		b.r.addDurations(label+": PUT /status p50"+overProtobuf, proto.status.quantile(0.5), crd.status.quantile(0.5))
	}
	return nil
}

// lists fills one namespace per list size on both paths, recording the
// servers' RSS around the largest fill, then times LISTs of each.
func (b *run) lists(ctx context.Context) error {
	sizes := slices.Sorted(slices.Values(b.cfg.ListSizes))
	largest := sizes[len(sizes)-1]
	for _, size := range sizes {
		ns := listNamespace(size)
		if err := b.namespace(ctx, ns); err != nil {
			return err
		}
		if size == largest {
			if err := b.fillMeasuringRSS(ctx, ns, size); err != nil {
				return err
			}
			continue
		}
		for _, p := range b.paths() {
			b.logf("%s: filling %s with %d machines", p.name, ns, size)
			if _, err := writeMachines(ctx, p, ns, "machine", 0, size, b.cfg.FillClients); err != nil {
				return err
			}
		}
	}
	for _, size := range sizes {
		ns := listNamespace(size)
		res := map[*path]*listResult{b.ichor: {}, b.crd: {}, b.ichorProtobuf: {}}
		b.logf("listing %d machines on each path, %d times", size, b.cfg.ListRepeats)
		err := interleave(b.cfg.ListRepeats, b.withProtobuf(), func(_ int, p *path) error {
			l, err := listMachines(ctx, p, ns, size, b.cfg.PageSize, 1)
			if err == nil {
				res[p].merge(l)
			}
			return err
		})
		if err != nil {
			return err
		}
		ichor, crd, proto := res[b.ichor], res[b.crd], res[b.ichorProtobuf]
		label := fmt.Sprintf("LIST %d", size)
		b.r.add(label+": response size", UnitKiB, float64(ichor.bytes)/1024, float64(crd.bytes)/1024)
		b.r.add(label+": response size"+overProtobuf, UnitKiB, float64(proto.bytes)/1024, float64(crd.bytes)/1024)
		b.r.addDurations(label+": full p50", ichor.full.quantile(0.5), crd.full.quantile(0.5))
		b.r.addDurations(label+": full p99", ichor.full.quantile(0.99), crd.full.quantile(0.99))
		b.r.addDurations(label+": full p50"+overProtobuf, proto.full.quantile(0.5), crd.full.quantile(0.5))
		paged := fmt.Sprintf("%s: paginated (limit=%d), all pages", label, b.cfg.PageSize)
		b.r.addDurations(paged+" p50", ichor.paged.quantile(0.5), crd.paged.quantile(0.5))
		b.r.addDurations(paged+" p99", ichor.paged.quantile(0.99), crd.paged.quantile(0.99))
	}
	return nil
}

// fillMeasuringRSS fills ns with size machines on each path in turn and
// reports how much each server's RSS grew while each path's objects arrived:
// ichor-apiserver holds Ichor's objects, kube-apiserver the custom resources
// (and proxies Ichor's requests).
func (b *run) fillMeasuringRSS(ctx context.Context, ns string, size int) error {
	var kube, ichor [3]int64
	sample := func(i int) error {
		var err error
		if kube[i], err = proc.RSS(b.kubePID); err != nil {
			return fmt.Errorf("kube-apiserver RSS: %w", err)
		}
		if ichor[i], err = proc.RSS(b.ichorPID); err != nil {
			return fmt.Errorf("ichor-apiserver RSS: %w", err)
		}
		return nil
	}
	if err := sample(0); err != nil {
		return err
	}
	for i, p := range b.paths() {
		b.logf("%s: filling %s with %d machines, measuring RSS", p.name, ns, size)
		if _, err := writeMachines(ctx, p, ns, "machine", 0, size, b.cfg.FillClients); err != nil {
			return err
		}
		if err := sample(i + 1); err != nil {
			return err
		}
	}
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	label := fmt.Sprintf("RSS growth holding %d objects", size)
	// Each server's own growth is context: it holds one path's objects
	// and proxies or idles through the other's, so only the sum compares.
	b.r.addContext(label+": ichor-apiserver", UnitMiB, mib(ichor[1]-ichor[0]), mib(ichor[2]-ichor[1]))
	b.r.addContext(label+": kube-apiserver", UnitMiB, mib(kube[1]-kube[0]), mib(kube[2]-kube[1]))
	b.r.add(label+": both servers", UnitMiB, mib(ichor[1]-ichor[0]+kube[1]-kube[0]), mib(ichor[2]-ichor[1]+kube[2]-kube[1]))
	return nil
}

// watches measures write-to-event latency with many watchers, and the CPU
// both servers spent per write while they delivered the events. The writes
// alternate between the paths in rounds; each round opens its own watchers.
func (b *run) watches(ctx context.Context) error {
	const ns = "bench-watch"
	if err := b.namespace(ctx, ns); err != nil {
		return err
	}
	// Ichor's two clients write different names into the same store.
	prefix := map[*path]string{b.ichor: "json", b.crd: "json", b.ichorProtobuf: "protobuf"}
	res := map[*path]*latencies{b.ichor: {}, b.crd: {}, b.ichorProtobuf: {}}
	// cpu is the CPU time of ichor-apiserver and kube-apiserver during each
	// path's rounds, the opening of their watches included; writeCPU only
	// while the writes were delivered to open watches.
	cpu := map[*path]*[2]time.Duration{b.ichor: {}, b.crd: {}, b.ichorProtobuf: {}}
	writeCPU := map[*path]*[2]time.Duration{b.ichor: {}, b.crd: {}, b.ichorProtobuf: {}}
	b.logf("%d writes to %d watchers on each path, in %d rounds", b.cfg.WatchEvents, b.cfg.Watchers, b.cfg.Rounds)
	err := interleave(b.cfg.Rounds, b.withProtobuf(), func(r int, p *path) error {
		first, n := share(b.cfg.WatchEvents, b.cfg.Rounds, r)
		before, err := b.serverCPU()
		if err != nil {
			return err
		}
		l, writes, err := watchLatency(ctx, p, ns, prefix[p], first, b.cfg.Watchers, n, nil, b.serverCPU)
		if err != nil {
			return err
		}
		after, err := b.serverCPU()
		if err != nil {
			return err
		}
		res[p].merge(l)
		for i := range after {
			cpu[p][i] += after[i] - before[i]
			writeCPU[p][i] += writes[i]
		}
		return nil
	})
	if err != nil {
		return err
	}
	ichor, crd, proto := res[b.ichor], res[b.crd], res[b.ichorProtobuf]
	label := fmt.Sprintf("watch, %d watchers: write to event", b.cfg.Watchers)
	b.r.addDurations(label+" p50", ichor.quantile(0.5), crd.quantile(0.5))
	b.r.addDurations(label+" p99", ichor.quantile(0.99), crd.quantile(0.99))
	b.r.addDurations(label+" p50"+overProtobuf, proto.quantile(0.5), crd.quantile(0.5))
	b.r.addDurations(label+" p99"+overProtobuf, proto.quantile(0.99), crd.quantile(0.99))
	// Each server's CPU is context: kube-apiserver proxies Ichor's events
	// to the watchers and serves the CRD's itself, so only the sum compares.
	for _, m := range []struct {
		label string
		cpu   map[*path]*[2]time.Duration
	}{
		{fmt.Sprintf("watch, %d watchers: server CPU per write", b.cfg.Watchers), cpu},
		{fmt.Sprintf("watch, %d watchers open: server CPU per write", b.cfg.Watchers), writeCPU},
	} {
		perWrite := func(p *path, server int) float64 {
			return millis(m.cpu[p][server] / time.Duration(b.cfg.WatchEvents))
		}
		both := func(p *path) float64 { return perWrite(p, 0) + perWrite(p, 1) }
		b.r.addContext(m.label+": ichor-apiserver", UnitCPU, perWrite(b.ichor, 0), perWrite(b.crd, 0))
		b.r.addContext(m.label+": kube-apiserver", UnitCPU, perWrite(b.ichor, 1), perWrite(b.crd, 1))
		b.r.add(m.label+": both servers", UnitCPU, both(b.ichor), both(b.crd))
		b.r.add(m.label+": both servers"+overProtobuf, UnitCPU, both(b.ichorProtobuf), both(b.crd))
	}
	return nil
}

// serverCPU is the CPU time ichor-apiserver and kube-apiserver have used so far.
func (b *run) serverCPU() ([2]time.Duration, error) {
	var t [2]time.Duration
	var err error
	if t[0], err = proc.CPUTime(b.ichorPID); err != nil {
		return t, fmt.Errorf("ichor-apiserver CPU time: %w", err)
	}
	if t[1], err = proc.CPUTime(b.kubePID); err != nil {
		return t, fmt.Errorf("kube-apiserver CPU time: %w", err)
	}
	return t, nil
}

// applies measures server-side apply of a status change on existing machines.
func (b *run) applies(ctx context.Context) error {
	ns := listNamespace(slices.Min(b.cfg.ListSizes))
	res := map[*path]*latencies{b.ichor: {}, b.crd: {}}
	b.logf("%d server-side applies to /status on each path, in %d rounds", b.cfg.Applies, b.cfg.Rounds)
	err := interleave(b.cfg.Rounds, []*path{b.ichor, b.crd}, func(r int, p *path) error {
		first, n := share(b.cfg.Applies, b.cfg.Rounds, r)
		l, err := applyStatuses(ctx, p, ns, "machine", first, n)
		if err == nil {
			res[p].merge(l)
		}
		return err
	})
	if err != nil {
		return err
	}
	ichor, crd := res[b.ichor], res[b.crd]
	b.r.addDurations("server-side apply of a status condition p50", ichor.quantile(0.5), crd.quantile(0.5))
	b.r.addDurations("server-side apply of a status condition p99", ichor.quantile(0.99), crd.quantile(0.99))
	return nil
}

// informers measures a typed informer over the largest namespace.
func (b *run) informers(ctx context.Context) error {
	size := slices.Max(b.cfg.ListSizes)
	var res [2]*informerResult
	for i, p := range b.paths() {
		b.logf("%s: typed informer over %d machines", p.name, size)
		var err error
		if res[i], err = informerMemory(ctx, p, listNamespace(size), size); err != nil {
			return err
		}
	}
	b.logf("%s: typed informer over %d machines", b.ichorProtobuf.name, size)
	proto, err := informerMemory(ctx, b.ichorProtobuf, listNamespace(size), size)
	if err != nil {
		return err
	}
	label := fmt.Sprintf("typed informer (controller-runtime cache), %d objects", size)
	b.r.add(label+": live heap", UnitMiB, float64(res[0].heap)/(1<<20), float64(res[1].heap)/(1<<20))
	b.r.add(label+": time to sync", UnitSeconds, res[0].sync.Seconds(), res[1].sync.Seconds())
	b.r.add(label+": time to sync"+overProtobuf, UnitSeconds, proto.sync.Seconds(), res[1].sync.Seconds())
	return nil
}

// encodings records which media types each path answers in.
func (b *run) encodings(ctx context.Context) error {
	ns := listNamespace(slices.Min(b.cfg.ListSizes))
	var served [2]map[string]bool
	for i, p := range b.paths() {
		var err error
		if served[i], err = negotiate(ctx, p, ns); err != nil {
			return err
		}
	}
	for _, enc := range encodings {
		b.r.add("encoding "+enc, UnitServed, boolValue(served[0][enc]), boolValue(served[1][enc]))
	}
	return nil
}

func boolValue(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// namespace creates ns and waits until both paths admit objects into it:
// ichor-apiserver learns of namespaces through its own informer.
func (b *run) namespace(ctx context.Context, ns string) error {
	_, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	for _, p := range b.paths() {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, last = p.create(ctx, machine(ns, "probe", 0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("%s: namespace %s not usable: %v (last: %v)", p.name, ns, err, last)
		}
	}
	return nil
}

// clientUser is the user the clients of an IdentityRBAC run act as.
const clientUser = "ichor-bench"

// grantMachines lets clientUser do everything to the machines of both groups
// through a ClusterRole, as RBAC grants a controller or a person: each of
// its requests is then authorized as theirs would be, where a member of
// system:masters is let through before any authorizer runs.
func grantMachines(ctx context.Context, kube kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clientUser},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupName, BenchGroup},
			Resources: []string{resource, resource + "/status"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clientUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: clientUser}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

// installCRDs applies test/bench/crds and waits until they are served.
// setProvisioningNetwork creates the installation with the benchmark's
// provisioningNetworks (object.go), or adds them to the installation's networks.
func setProvisioningNetwork(ctx context.Context, cp *harness.ControlPlane) error {
	client, err := versioned.NewForConfig(cp.AdminConfig)
	if err != nil {
		return err
	}
	installations := client.IchorV1alpha1().IchorInstallations()
	in, err := installations.Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = installations.Create(ctx, &v1alpha1.IchorInstallation{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
			Spec:       v1alpha1.IchorInstallationSpec{Settings: v1alpha1.InstallationSettings{ProvisioningNetworks: provisioningNetworks()}},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	missing := slices.DeleteFunc(provisioningNetworks(), func(n string) bool { return slices.Contains(in.Spec.Settings.ProvisioningNetworks, n) })
	if len(missing) == 0 {
		return nil
	}
	in.Spec.Settings.ProvisioningNetworks = append(in.Spec.Settings.ProvisioningNetworks, missing...)
	_, err = installations.UpdateSettings(ctx, in.Name, in, metav1.UpdateOptions{})
	return err
}

func installCRDs(ctx context.Context, cp *harness.ControlPlane) error {
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "test", "bench", "crds")
	if _, err := cp.Kubectl(ctx, "apply", "--server-side", "--field-manager=ichor-bench", "-f", dir); err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	if _, err := cp.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", dir); err != nil {
		return fmt.Errorf("CRDs not established: %w", err)
	}
	return nil
}
