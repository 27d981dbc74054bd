package objectstore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/backup/archive"
	"ichor.dev/ichor/pkg/backup/store"
)

// benchBucket holds what the benchmark writes.
const benchBucket = "bench"

// BenchmarkBackupToS3 streams a snapshot-sized file (1 GiB; 64 MiB with
// -short) into SeaweedFS's S3 API the way a backup does (digest, optional
// zstd, age, through the gocloud bucket of pkg/backup/store) and, as the
// anchor measured in the same run, uploads the same bytes with the S3
// client's own transfer manager. It reports both throughputs, their ratio
// (the goal: at least 0.8) and the backup path's peak heap above what the
// process held before (the goal: flat within 64 MiB, whatever the size).
// Run: go test ./test/objectstore -run '^$' -bench BackupToS3 -benchtime 1x
func BenchmarkBackupToS3(b *testing.B) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 64 << 20
	}
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Minute)
	defer cancel()
	srv, err := Start(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	if err := srv.CreateBucket(ctx, benchBucket); err != nil {
		b.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	target := &v1alpha1.BackupTarget{S3: &v1alpha1.S3Target{
		Bucket: benchBucket, Region: Region, Endpoint: srv.Endpoint, ForcePathStyle: true, CABundle: string(srv.CAPEM),
		CredentialsRef: &v1alpha1.LocalSecretReference{Name: "unused"},
	}}
	creds := map[string][]byte{store.KeyS3AccessKeyID: []byte(srv.Admin.AccessKeyID), store.KeyS3SecretAccessKey: []byte(srv.Admin.SecretAccessKey)}

	for _, c := range []v1alpha1.BackupCompression{v1alpha1.BackupCompressionNone, v1alpha1.BackupCompressionZstd} {
		b.Run("compression="+string(c), func(b *testing.B) {
			for i := range b.N {
				anchor := timed(b, srv, func() error {
					tm := transfermanager.New(srv.Client(srv.Admin))
					_, err := tm.UploadObject(ctx, &transfermanager.UploadObjectInput{
						Bucket: aws.String(benchBucket), Key: aws.String(fmt.Sprintf("anchor-%s-%d", c, i)), Body: newSnapshotLike(size),
					})
					return err
				})
				var stored int64
				heap := peakHeap(func() {
					backup := timed(b, srv, func() error {
						t, err := store.Open(ctx, target, store.Options{Credentials: creds})
						if err != nil {
							return err
						}
						defer t.Close()
						w, err := t.NewWriter(ctx, fmt.Sprintf("backup-%s-%d", c, i), store.WriterOptions)
						if err != nil {
							return err
						}
						sum, err := archive.Write(w, newSnapshotLike(size), []age.Recipient{id.Recipient()}, c)
						if err != nil {
							_ = w.Close()
							return err
						}
						stored = sum.Size
						return w.Close()
					})
					mb := float64(size) / (1 << 20)
					b.ReportMetric(mb/anchor.Seconds(), "anchor-MiB/s")
					b.ReportMetric(mb/backup.Seconds(), "backup-MiB/s")
					b.ReportMetric(anchor.Seconds()/backup.Seconds(), "backup/anchor")
				})
				b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
				b.ReportMetric(float64(stored)/float64(size), "stored/content")
			}
		})
	}
}

func timed(b *testing.B, srv *Server, f func() error) time.Duration {
	b.Helper()
	start := time.Now()
	if err := f(); err != nil {
		b.Fatalf("%v\nobject store log:\n%s", err, srv.LogTail())
	}
	return time.Since(start)
}

// peakHeap runs f and returns the most heap it saw in use above what was
// in use before, sampled every 20 ms.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	stop, peak := make(chan struct{}), make(chan uint64, 1)
	go func() {
		var top uint64
		var ms runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			top = max(top, ms.HeapAlloc)
			select {
			case <-stop:
				peak <- top
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	top := <-peak
	if top < base {
		return 0
	}
	return top - base
}

// snapshotLike is n bytes shaped like an etcd database: 4 KiB pages, half
// of them random (values) and half runs of repeated bytes (free space,
// keys), from a fixed seed so every run writes the same bytes.
type snapshotLike struct {
	left int64
	rng  *rand.ChaCha8
	page int
	buf  [4096]byte
	off  int
}

func newSnapshotLike(n int64) io.Reader {
	var seed [32]byte
	copy(seed[:], "ichor backup benchmark")
	return &snapshotLike{left: n, rng: rand.NewChaCha8(seed), off: 4096}
}

func (s *snapshotLike) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && s.left > 0 {
		if s.off == len(s.buf) {
			s.page++
			if s.page%2 == 0 {
				_, _ = s.rng.Read(s.buf[:])
			} else {
				for i := range s.buf {
					s.buf[i] = byte(s.page)
				}
			}
			s.off = 0
		}
		k := copy(p[n:], s.buf[s.off:])
		k = int(min(int64(k), s.left))
		s.off += k
		n += k
		s.left -= int64(k)
	}
	return n, nil
}
