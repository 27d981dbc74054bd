package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// issuerAt is an issuer served at 127.0.0.1:port with the given certificate.
func issuerAt(port int, certFile, keyFile, caFile string) IssuerEndpoint {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return IssuerEndpoint{URL: "https://" + addr, Address: addr, CertFile: certFile, KeyFile: keyFile, CAFile: caFile}
}

// writeAuthenticationConfig writes artifacts/kube-apiserver/authentication-
// config.yaml with the harness's issuers in place of the examples: Ichor's
// first, the OpenID provider second, each trusted through the issuers' CA.
// Everything else (audiences, claim rules and mappings) is the artifact's.
func (cp *ControlPlane) writeAuthenticationConfig() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	shipped := filepath.Join(root, "artifacts", "kube-apiserver", "authentication-config.yaml")
	data, err := os.ReadFile(shipped)
	if err != nil {
		return "", err
	}
	var cfg apiserverv1.AuthenticationConfiguration
	if err := sigsyaml.UnmarshalStrict(data, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w", shipped, err)
	}
	if len(cfg.JWT) != 2 {
		return "", fmt.Errorf("%s: want two JWT issuers (Ichor's, then the OpenID provider), found %d", shipped, len(cfg.JWT))
	}
	ca, err := os.ReadFile(cp.files.issuersCA)
	if err != nil {
		return "", err
	}
	for i, issuer := range []IssuerEndpoint{cp.Auth, cp.OIDC} {
		cfg.JWT[i].Issuer.URL = issuer.URL
		cfg.JWT[i].Issuer.CertificateAuthority = string(ca)
	}
	out, err := sigsyaml.Marshal(&cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, "authentication-config.yaml")
	return path, os.WriteFile(path, out, 0o600)
}
