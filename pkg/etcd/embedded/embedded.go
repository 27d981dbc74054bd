// Package embedded runs a single-member etcd inside ichor-apiserver, so one
// binary works without an etcd cluster. It listens on loopback only and
// speaks TLS with client-certificate authentication, with a CA made afresh
// at every start that only this process trusts.
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"ichor.dev/ichor/pkg/pki"
)

// Options say where the embedded etcd keeps its data and listens.
type Options struct {
	// DataDir holds the member's data and, under pki/, its certificates.
	DataDir string
	// ClientAddress is the loopback host:port clients connect to.
	ClientAddress string
	// PeerAddress is the loopback host:port of the (unused) peer listener etcd requires.
	PeerAddress string
}

// Etcd is a running embedded etcd and the client credentials to reach it.
type Etcd struct {
	Endpoint                  string
	CAFile, CertFile, KeyFile string
	etcd                      *embed.Etcd
}

// Start starts etcd and waits until it serves, or fails within the timeout.
func Start(opts Options, timeout time.Duration) (*Etcd, error) {
	for _, addr := range []string{opts.ClientAddress, opts.PeerAddress} {
		if err := requireLoopback(addr); err != nil {
			return nil, err
		}
	}
	pkiDir := filepath.Join(opts.DataDir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	// MkdirAll leaves an existing directory's mode alone; the keys need it private.
	if err := os.Chmod(pkiDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	creds, err := writeCredentials(pkiDir)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd credentials: %w", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "ichor"
	cfg.Dir = filepath.Join(opts.DataDir, "member-data")
	cfg.LogLevel = "warn"
	clientURL := url.URL{Scheme: "https", Host: opts.ClientAddress}
	peerURL := url.URL{Scheme: "https", Host: opts.PeerAddress}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	tlsInfo := transport.TLSInfo{CertFile: creds.serverCert, KeyFile: creds.serverKey, TrustedCAFile: creds.ca, ClientCertAuth: true}
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = tlsInfo, tlsInfo

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", opts.DataDir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after %s", timeout)
	}
	return &Etcd{Endpoint: clientURL.String(), CAFile: creds.ca, CertFile: creds.clientCert, KeyFile: creds.clientKey, etcd: e}, nil
}

// Close stops etcd, waiting for it to persist what it holds.
func (e *Etcd) Close() { e.etcd.Close() }

type credentials struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func writeCredentials(dir string) (credentials, error) {
	ca, err := pki.NewCA("ichor-embedded-etcd-ca")
	if err != nil {
		return credentials{}, err
	}
	var c credentials
	c.ca = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(c.ca, ca.CertPEM(), 0o644); err != nil {
		return c, err
	}
	server, err := ca.Issue(pki.Leaf{CommonName: "ichor-embedded-etcd", DNSNames: pki.Loopback.DNSNames, IPs: pki.Loopback.IPs, Usage: pki.ServerAuth | pki.ClientAuth})
	if err != nil {
		return c, err
	}
	if c.serverCert, c.serverKey, err = server.WriteFiles(dir, "server"); err != nil {
		return c, err
	}
	client, err := ca.Issue(pki.Leaf{CommonName: "ichor-apiserver", Usage: pki.ClientAuth})
	if err != nil {
		return c, err
	}
	c.clientCert, c.clientKey, err = client.WriteFiles(dir, "client")
	return c, err
}

func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("embedded etcd address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("embedded etcd address %q: must be a loopback IP address", addr)
	}
	return nil
}
