// Package oidcprovider runs a real OpenID provider for tests and for `make
// run`: zitadel/oidc's example provider (its op package, in-memory storage
// and login pages), with the people and the one client Ichor's tests sign
// in with, served over TLS. It stands for a company's identity provider:
// people sign in there, and kube-apiserver trusts its ID tokens.
package oidcprovider

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// ClientID is the ichor CLI's client: a public (native) client with PKCE,
// the authorization-code flow to a loopback redirect on any port, and the
// device flow. It is also an audience kube-apiserver expects
// (artifacts/kube-apiserver/authentication-config.yaml).
const ClientID = "ichor"

// ConsoleClientID is the web console's client (ichor-ui): public, with
// PKCE, redirected to /oidc/callback on any loopback port over HTTPS, as a
// native client's loopback redirect may be (RFC 8252). kube-apiserver
// accepts both clients' ID tokens (the audiences of
// artifacts/kube-apiserver/authentication-config.yaml).
const ConsoleClientID = "ichor-ui"

// ClusterClientID is the client a managed cluster's kube-apiserver trusts
// (its TalosCluster's spec.authentication.clientID), registered like the
// CLI's: a managed cluster may not trust the management plane's audiences.
const ClusterClientID = "kubernetes"

// Person is someone the provider knows.
type Person struct {
	// Username is what they type in the login form; it is also their
	// subject (the example's device flow takes the one for the other).
	Username, Password, Email string
	EmailVerified             bool
	Groups                    []string
}

// People are the provider's people: an operator, a viewer whose groups name
// nothing of Ichor's, and someone whose email is not verified.
var People = []Person{
	{Username: "olga", Password: "olga's provider password", Email: "olga@example.com", EmailVerified: true, Groups: []string{"ichor-operator", "developers"}},
	{Username: "pat", Password: "pat's provider password", Email: "pat@example.com", EmailVerified: true, Groups: []string{"developers", "system:masters"}},
	{Username: "una", Password: "una's provider password", Email: "una@example.com", EmailVerified: false, Groups: []string{"ichor-admin"}},
}

// Server is a running provider.
type Server struct {
	srv *http.Server
}

// Start serves the provider as issuer (https://ADDRESS) at address with the
// given serving certificate, until Stop. It logs to log, which becomes the
// process's default slog output (the example provider sets it).
func Start(issuer, address, certFile, keyFile string, log io.Writer) (*Server, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	users := userStore{}
	groups := map[string][]string{}
	for _, p := range People {
		users[p.Username] = &storage.User{ID: p.Username, Username: p.Username, Password: p.Password,
			Email: p.Email, EmailVerified: p.EmailVerified, FirstName: p.Username}
		groups[p.Username] = p.Groups
	}
	st := &store{
		Storage: storage.NewStorageWithClients(users, map[string]*storage.Client{
			ClientID:        storage.NativeClient(ClientID, "http://127.0.0.1/callback"),
			ConsoleClientID: storage.NativeClient(ConsoleClientID, "https://127.0.0.1/oidc/callback"),
			ClusterClientID: storage.NativeClient(ClusterClientID, "http://127.0.0.1/callback"),
		}),
		groups: groups,
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	s := &Server{srv: &http.Server{
		Handler:           exampleop.SetupServer(issuer, st, slog.New(slog.NewTextHandler(log, nil)), false),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
	}}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// Stop stops the provider.
func (s *Server) Stop() error {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// userStore is the provider's people, by subject (= username).
type userStore map[string]*storage.User

func (u userStore) GetUserByID(id string) *storage.User { return u[id] }

func (u userStore) GetUserByUsername(name string) *storage.User { return u[name] }

func (u userStore) ExampleClientID() string { return storage.ServiceUserID }

// store is the example's storage with a groups claim in ID tokens, as a
// company's provider adds one.
type store struct {
	*storage.Storage
	groups map[string][]string
}

// GetClientByClientID gives the native client the device grant too, and
// the user's claims in its ID tokens (what kube-apiserver reads).
func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return cliClient{c}, nil
}

func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if g, ok := s.groups[req.GetSubject()]; ok {
		info.AppendClaims("groups", g)
	}
	return nil
}

type cliClient struct{ op.Client }

func (c cliClient) GrantTypes() []oidc.GrantType {
	return append(c.Client.GrantTypes(), oidc.GrantTypeDeviceCode)
}

func (c cliClient) IDTokenUserinfoClaimsAssertion() bool { return true }
