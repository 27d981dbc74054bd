package itest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/test/harness"
	"ichor.dev/ichor/test/talossim"
)

// SnapshotSize is the size of the simulated cluster's etcd snapshots: big
// enough that holding one in memory anywhere on the way would show.
const SnapshotSize = 256 << 20

// DownloadInFlightBound is how many bytes of a download may be on their way
// between the node and the client at once: kube-apiserver's proxy,
// ichor-apiserver and the gRPC and HTTP/2 windows between them hold a few
// MiB each; a hop that buffers a response holds it all.
const DownloadInFlightBound = 64 << 20

// DownloadHeapBound is how much the live heap of the process serving
// ichor-apiserver may grow while a snapshot streams through it: half a
// snapshot. DownloadInFlightBound checks the streaming exactly; this catches
// what still streams but keeps a copy (a tee into a buffer holds the whole
// snapshot), above the collector's noise on two busy cores, which has
// reached 69 MiB in the smaller of two measures.
const DownloadHeapBound = SnapshotSize / 2

// CheckEtcdSnapshotDownload downloads cp-1's etcd snapshot with kubectl get
// --raw into a file, through kube-apiserver and ichor-apiserver, as an
// admin; checks it is a whole etcd snapshot; measures the heap of this
// process (which runs ichor-apiserver) while it streams; and checks who may
// download, the Event and that a dry run is refused.
func CheckEtcdSnapshotDownload(ctx context.Context, t *testing.T, ns string, etcd *talossim.EtcdCluster) {
	path := "/apis/ichor.dev/v1alpha1/namespaces/" + ns + "/talosmachines/cp-1/etcd-snapshot"
	admin := []string{"--as=carol", "--as-group=ichor:admin"}
	download := func(file string) (time.Duration, error) {
		f, err := os.Create(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() //nolint:errcheck
		var stderr bytes.Buffer
		cmd := KubectlCmd(ctx, t, append(admin, "get", "--raw", path)...)
		cmd.Stdout, cmd.Stderr = f, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, errors.New(err.Error() + ": " + stderr.String())
		}
		return time.Since(start), nil
	}

	// The simulator builds the snapshot first: a real node streams at once,
	// and kube-apiserver cuts a download at its one-minute request timeout.
	start := time.Now()
	if err := etcd.PrepareSnapshot(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the simulator built the %d MiB snapshot in %s", SnapshotSize>>20, time.Since(start).Round(time.Millisecond))
	// A first download, which also warms connections and caches on the way,
	// checks that the bytes stream: the node pauses half way through, and
	// the client must get all but DownloadInFlightBound of what it sent.
	dir := t.TempDir()
	CheckSnapshotStreams(ctx, t, etcd, append(admin, "get", "--raw", path))

	// What the process holds is the live heap the collector last marked
	// (/gc/heap/live): garbage, such as every chunk of a stream once passed
	// on, does not count once a cycle passed it by. What is allocated while
	// a cycle marks does count (the runtime allocates black), and under the
	// race detector on two busy cores a cycle can mark for seconds while
	// the stream passes a whole snapshot's worth of chunks through: one
	// measure once showed 299 MiB of growth, the other 41 MiB. The process
	// also runs the controller and the simulated nodes. A stream that holds
	// its bytes grows the heap every time, so the smaller growth of two
	// downloads is compared with the bound.
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	readLive := func() uint64 {
		metrics.Read(live)
		return live[0].Value.Uint64()
	}
	file := filepath.Join(dir, "etcd.snapshot")
	measure := func() (growth int64, baseline uint64, took time.Duration) {
		runtime.GC()
		baseline = readLive()
		var peak uint64
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					peak = max(peak, readLive())
				}
			}
		})
		took, err := download(file)
		close(stop)
		sampler.Wait()
		if err != nil {
			t.Fatalf("kubectl get --raw %s: %v", path, err)
		}
		return int64(peak) - int64(baseline), baseline, took
	}
	growth, baseline, took := measure()
	if again, base2, took2 := measure(); again < growth {
		growth, baseline, took = again, base2, took2
	}
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("streamed %d MiB in %s (%.0f MiB/s); the live heap grew by at most %.1f MiB over %.1f MiB (the smaller of two downloads)",
		info.Size()>>20, took.Round(time.Millisecond), float64(info.Size())/(1<<20)/took.Seconds(), float64(growth)/(1<<20), float64(baseline)/(1<<20))
	if growth > DownloadHeapBound {
		t.Errorf("the heap grew by %d MiB while a %d MiB snapshot streamed, more than the %d MiB bound: something holds the stream",
			growth>>20, info.Size()>>20, DownloadHeapBound>>20)
	}

	// A whole etcd snapshot: the database, then the SHA-256 of the database.
	if info.Size() < SnapshotSize || info.Size()%512 != 32 {
		t.Fatalf("snapshot of %d bytes, want at least %d with size%%512 == 32", info.Size(), SnapshotSize)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() //nolint:errcheck
	h := sha256.New()
	if _, err := io.CopyN(h, f, info.Size()-sha256.Size); err != nil {
		t.Fatal(err)
	}
	sum, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(sum, h.Sum(nil)) {
		t.Fatalf("the snapshot's checksum does not match its database: %v", err)
	}

	WaitEventSaying(ctx, t, ns, "cp-1", corev1.EventTypeNormal, "Downloaded", "carol downloaded the etcd-snapshot of TalosMachine cp-1")
	CheckDownloadAudited(t, "carol", "etcd-snapshot", "cp-1")

	// Operators may not; a dry run is refused; a worker has no etcd.
	_, err = CP.Kubectl(ctx, "--as=olivia", "--as-group=ichor:operator", "get", "--raw", path)
	var kerr *harness.KubectlError
	if !errors.As(err, &kerr) || !strings.Contains(kerr.Stderr, "Forbidden") {
		t.Errorf("operator download: %v", err)
	}
	_, err = CP.Kubectl(ctx, append(admin, "get", "--raw", path+"?dryRun=All")...)
	if !errors.As(err, &kerr) || !strings.Contains(kerr.Stderr, "cannot be a dry run") {
		t.Errorf("dry-run download: %v", err)
	}
	_, err = CP.Kubectl(ctx, append(admin, "get", "--raw", strings.Replace(path, "cp-1", "worker-1", 1))...)
	if !errors.As(err, &kerr) || !strings.Contains(kerr.Stderr, "etcd runs on control planes only") {
		t.Errorf("worker download: %v", err)
	}
}

// CheckSnapshotStreams runs kubectl with args, which downloads an etcd
// snapshot of etcd, pausing the node's stream half way through, and checks
// that the client receives all but DownloadInFlightBound of what the node
// sent before it goes on.
func CheckSnapshotStreams(ctx context.Context, t *testing.T, etcd *talossim.EtcdCluster, args []string) {
	t.Helper()
	const at = SnapshotSize / 2
	hold := etcd.HoldSnapshot(at)
	defer hold.Release()
	received := &countingWriter{threshold: at - DownloadInFlightBound, reached: make(chan struct{})}
	var stderr bytes.Buffer
	cmd := KubectlCmd(ctx, t, args...)
	cmd.Stdout, cmd.Stderr = received, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// kube-apiserver ends the request after a minute; well before then a
	// stream has reached the client.
	timeout := time.NewTimer(45 * time.Second)
	defer timeout.Stop()
	for _, step := range []struct {
		what string
		c    <-chan struct{}
	}{{"the node to send half the snapshot", hold.Reached()}, {"the client to receive it", received.reached}} {
		select {
		case <-step.c:
		case err := <-done:
			t.Fatalf("kubectl %v ended while waiting for %s: %v: %s", args, step.what, err, stderr.String())
		case <-timeout.C:
			t.Fatalf("waiting for %s: the node sent %d MiB and stopped; the client has %d MiB: more than %d MiB is held on the way",
				step.what, at>>20, received.count()>>20, DownloadInFlightBound>>20)
		}
	}
	hold.Release()
	if err := <-done; err != nil {
		t.Fatalf("kubectl %v: %v: %s", args, err, stderr.String())
	}
	if received.count() < SnapshotSize {
		t.Fatalf("the download ended after %d bytes, want at least %d", received.count(), SnapshotSize)
	}
}

// countingWriter counts what it is given and closes reached once that is at
// least threshold bytes.
type countingWriter struct {
	threshold int64
	reached   chan struct{}
	mu        sync.Mutex
	n         int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.n
	w.n += int64(len(p))
	if before < w.threshold && w.n >= w.threshold {
		close(w.reached)
	}
	return len(p), nil
}

func (w *countingWriter) count() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// CheckDownloadAudited finds user's download of subresource of name in
// ichor-apiserver's audit log, at Metadata level with its annotation.
func CheckDownloadAudited(t *testing.T, user, subresource, name string) {
	t.Helper()
	for _, e := range AuditEvents(t) {
		if e.User.Username != user || e.ObjectRef.Subresource != subresource || e.ObjectRef.Name != name || e.Stage != "ResponseComplete" {
			continue
		}
		if e.Level != "Metadata" || !strings.Contains(e.Annotations[ichor.AuditAnnotationDownload], user) {
			t.Errorf("%s's download of %s/%s is audited at %s with annotations %v", user, name, subresource, e.Level, e.Annotations)
		}
		return
	}
	t.Errorf("no audit event for %s's download of %s/%s", user, name, subresource)
}
