// Package objectstore runs a real S3-compatible object store for tests:
// SeaweedFS's weed server (hack/build-seaweedfs.sh), on loopback, serving
// S3 over TLS with a CA of its own, with two identities: one that may do
// anything and one that may only read and list.
package objectstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"ichor.dev/ichor/pkg/pki"
	"ichor.dev/ichor/test/internal/proc"
)

// Region is the region the server answers for; any name works with it.
const Region = "us-east-1"

// Credentials are an S3 access key pair.
type Credentials struct {
	AccessKeyID, SecretAccessKey string
}

// Server is a running SeaweedFS with its S3 API.
type Server struct {
	// Endpoint is the https URL of the S3 API.
	Endpoint string
	// CAPEM issues the S3 API's certificate.
	CAPEM []byte
	// Admin may do anything; ReadOnly may only read and list.
	Admin, ReadOnly Credentials

	p *proc.Process
}

// Start starts a server keeping its data in dir, and waits until it
// stores objects.
func Start(ctx context.Context, dir string) (*Server, error) {
	binDir, err := proc.SeaweedFSBinDir()
	if err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("objectstore test CA")
	if err != nil {
		return nil, err
	}
	kp, err := ca.Issue(pki.Leaf{CommonName: "127.0.0.1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.ServerAuth, Validity: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := kp.WriteFiles(dir, "s3")
	if err != nil {
		return nil, err
	}
	s := &Server{CAPEM: ca.CertPEM(), Admin: newCredentials(), ReadOnly: newCredentials()}
	config, err := json.Marshal(map[string]any{"identities": []any{
		identity("admin", s.Admin, "Admin", "Read", "Write", "List", "Tagging"),
		identity("reader", s.ReadOnly, "Read", "List"),
	}})
	if err != nil {
		return nil, err
	}
	configFile := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(configFile, config, 0o600); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts("127.0.0.1", 8)
	if err != nil {
		return nil, err
	}
	port := func(i int) string { return strconv.Itoa(ports[i]) }
	s.p, err = proc.Start(dir, "seaweedfs", filepath.Join(binDir, "weed"), "-logdir="+dir, "server",
		"-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+port(0), "-master.port.grpc="+port(1),
		"-volume.port="+port(2), "-volume.port.grpc="+port(3), "-volume.max=200",
		"-master.volumeSizeLimitMB=1024",
		"-filer.port="+port(4), "-filer.port.grpc="+port(5),
		"-s3", "-s3.port="+port(6), "-s3.port.grpc="+port(7),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config="+configFile, "-s3.cert.file="+certFile, "-s3.key.file="+keyFile,
	)
	if err != nil {
		return nil, err
	}
	s.Endpoint = "https://127.0.0.1:" + port(6)
	if err := s.waitWritable(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func newCredentials() Credentials {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return Credentials{AccessKeyID: "AK" + strings.ToUpper(hex.EncodeToString(b[:8])), SecretAccessKey: hex.EncodeToString(b[8:])}
}

func identity(name string, c Credentials, actions ...string) map[string]any {
	return map[string]any{
		"name":        name,
		"credentials": []any{map[string]string{"accessKey": c.AccessKeyID, "secretKey": c.SecretAccessKey}},
		"actions":     actions,
	}
}

// HTTPClient trusts the server's CA.
func (s *Server) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CAPEM)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}
}

// Client is an S3 client of the server, signed in with c: the server's
// own client, as a user of the store would have one.
func (s *Server) Client(c Credentials) *s3.Client {
	return s3.New(s3.Options{
		Region:                     Region,
		BaseEndpoint:               aws.String(s.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, ""),
		HTTPClient:                 s.HTTPClient(),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateBucket creates a bucket as the admin identity.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	_, err := s.Client(s.Admin).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// Keys lists the keys under prefix in bucket, as the admin identity.
func (s *Server) Keys(ctx context.Context, bucket, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.Client(s.Admin), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// waitWritable polls until an object can be written and read back: the
// volume server has registered with the master.
func (s *Server) waitWritable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c := s.Client(s.Admin)
	const bucket = "objectstore-ready"
	var last error
	for {
		if err := s.p.Exited(); err != nil {
			return fmt.Errorf("seaweedfs exited: %w\n%s", err, s.p.LogTail())
		}
		last = func() error {
			if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil && !alreadyOwned(err) {
				return err
			}
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe"), Body: strings.NewReader("ok")}); err != nil {
				return err
			}
			_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe")})
			return err
		}()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("seaweedfs stores no object after 60s: %v\n%s", last, s.p.LogTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func alreadyOwned(err error) bool {
	var owned interface{ ErrorCode() string }
	return errors.As(err, &owned) && (owned.ErrorCode() == "BucketAlreadyOwnedByYou" || owned.ErrorCode() == "BucketAlreadyExists")
}

// LogTail is the end of the server's log, for a test that failed.
func (s *Server) LogTail() string { return s.p.LogTail() }

// Stop stops the server.
func (s *Server) Stop() {
	if s.p != nil {
		s.p.Stop(10 * time.Second) //nolint:errcheck
	}
}
