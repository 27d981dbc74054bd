package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	ctrlcmd "ichor.dev/ichor/pkg/cmd/controller"
)

// BenchmarkKubeletServingApproval measures how long a kubelet serving
// request waits for Ichor's approval when every node of a Ready cluster
// asks at once: kubelet serving certificates are switched on for a cluster
// of one control plane and n-1 workers, every kubelet restarts and requests
// its certificate, and the time from each request's creation to its
// approval is taken from a watch in the cluster's real kube-apiserver. It
// reports p50 and p99 (ms). Run: go test ./test/integration -run '^$' -bench KubeletServing -benchtime 1x
func BenchmarkKubeletServingApproval(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				p50, p99 := approvalLatency(b, n)
				b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
				b.ReportMetric(float64(p99.Milliseconds()), "p99-ms")
			}
		})
	}
}

func approvalLatency(b *testing.B, n int) (p50, p99 time.Duration) {
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	installControllerRBAC(ctx, b)
	ns := cp.Namespace(b)
	bindControllerSecrets(ctx, b, ns)
	runController(b, func(o *ctrlcmd.Options) {
		o.MachineRecheckInterval = time.Minute // first contacts pin; rechecks would only add load
		o.MachineHealthInterval = time.Minute
		o.MachineConcurrency = 16
		o.KubeletServingPollInterval = time.Hour // only the CSR watch wakes the approver
	})
	_, kube, endpoint := benchCluster(ctx, b, ns, benchClusterSpec{name: "bench", endpointIP: "127.0.4.250", firstAddr: "127.0.5.0",
		controlPlanes: 1, workers: n - 1, rebootDelay: 10 * time.Millisecond})

	rc, err := kube.WaitReady(ctx, endpoint)
	if err != nil {
		b.Fatal(err)
	}
	wl := kubernetes.NewForConfigOrDie(rc)
	w, err := wl.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created, approved := map[string]time.Time{}, map[string]time.Time{}
	go func() {
		for ev := range w.ResultChan() {
			csr, ok := ev.Object.(*certv1.CertificateSigningRequest)
			if !ok || csr.Spec.SignerName != certv1.KubeletServingSignerName || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, seen := created[csr.Name]; !seen {
				created[csr.Name] = now
			}
			for _, c := range csr.Status.Conditions {
				if c.Type == certv1.CertificateApproved && c.Status == corev1.ConditionTrue {
					if _, seen := approved[csr.Name]; !seen {
						approved[csr.Name] = now
					}
				}
			}
			mu.Unlock()
		}
	}()

	b.ResetTimer()
	start := time.Now()
	mustKubectl(ctx, b, "-n", ns, "patch", "taloscluster", "bench", "--type=merge", "-p",
		`{"spec":{"security":{"kubeletServingCertificates":{"enabled":true}}}}`)
	waitClusterFor(ctx, b, ns, "bench", 20*time.Minute, v1alpha1.ClusterConditionKubeletServingCertificates, metav1.ConditionTrue, v1alpha1.ClusterReasonAllIssued)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(approved) >= n, nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatalf("%d of %d requests seen approved: %v", len(approved), n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var latencies []time.Duration
	var createdAt, approvedAt []time.Duration
	for name, at := range approved {
		latencies = append(latencies, at.Sub(created[name]))
		createdAt, approvedAt = append(createdAt, created[name].Sub(start)), append(approvedAt, at.Sub(start))
	}
	slices.Sort(latencies)
	slices.Sort(createdAt)
	slices.Sort(approvedAt)
	b.Logf("%d nodes: requests created %v…%v and approved %v…%v after the option was switched on",
		n, createdAt[0].Round(time.Millisecond), createdAt[len(createdAt)-1].Round(time.Millisecond),
		approvedAt[0].Round(time.Millisecond), approvedAt[len(approvedAt)-1].Round(time.Millisecond))
	return latencies[len(latencies)/2], latencies[(len(latencies)*99)/100]
}
