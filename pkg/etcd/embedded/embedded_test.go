package embedded

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func loopbackPorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return addrs
}

func client(t *testing.T, e *Etcd, withCert bool) *clientv3.Client {
	t.Helper()
	info := transport.TLSInfo{TrustedCAFile: e.CAFile}
	if withCert {
		info.CertFile, info.KeyFile = e.CertFile, e.KeyFile
	}
	tlsConfig, err := info.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, TLS: tlsConfig, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestEmbeddedEtcdServesTLSAndKeepsData(t *testing.T) {
	addrs := loopbackPorts(t, 2)
	opts := Options{DataDir: t.TempDir(), ClientAddress: addrs[0], PeerAddress: addrs[1]}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	e, err := Start(opts, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.Endpoint, "https://127.0.0.1:") {
		t.Errorf("endpoint %q is not https on loopback", e.Endpoint)
	}
	if _, err := client(t, e, true).Put(ctx, "/registry/ichor.dev/probe", "kept"); err != nil {
		t.Fatalf("put with the client certificate: %v", err)
	}
	// Without a client certificate the server refuses the connection.
	shortCtx, shortCancel := context.WithTimeout(ctx, 3*time.Second)
	if _, err := client(t, e, false).Get(shortCtx, "/registry/ichor.dev/probe"); err == nil {
		t.Error("a client without a certificate read from etcd")
	}
	shortCancel()
	e.Close()

	// A restart on the same directory (new certificates) still has the data.
	e, err = Start(opts, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	resp, err := client(t, e, true).Get(ctx, "/registry/ichor.dev/probe")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "kept" {
		t.Fatalf("after restart got %v, want the value written before", resp.Kvs)
	}
}

func TestEmbeddedEtcdRefusesNonLoopbackAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:2379", "10.0.0.1:2379", "localhost:2379", "2379"} {
		_, err := Start(Options{DataDir: t.TempDir(), ClientAddress: addr, PeerAddress: "127.0.0.1:2380"}, time.Second)
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("client address %q: got %v, want an error naming it", addr, err)
		}
	}
}
