package talossim

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strconv"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/test/internal/proc"
)

// secretboxKey is one key of a secretbox provider.
type secretboxKey struct{ name, secret string }

// withKeys is cfg (of the v1.14 contract) whose KubeServiceAccountConfig signs with signing and
// also accepts accepted (public keys), and whose KubeEtcdEncryptionConfig encrypts Secrets with the
// first of keys and reads them with any, or unencrypted.
func withKeys(t *testing.T, cfg []byte, signing string, accepted []string, keys ...secretboxKey) []byte {
	t.Helper()

	p, err := configloader.NewFromBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}

	var list []any
	for _, k := range keys {
		list = append(list, map[string]any{"name": k.name, "secret": k.secret})
	}

	docs := p.Documents()
	for i, d := range docs {
		switch d := d.(type) {
		case *k8s.KubeServiceAccountConfigV1Alpha1:
			c := d.DeepCopy()
			c.ServiceIssuer.PrivateKey, c.ServiceAccepted.PublicKeys = signing, accepted
			docs[i] = c
		case *k8s.KubeEtcdEncryptionConfigV1Alpha1:
			c := d.DeepCopy()
			c.Config = meta.Unstructured{Object: map[string]any{"resources": []any{map[string]any{
				"resources": []any{"secrets"},
				"providers": []any{map[string]any{"secretbox": map[string]any{"keys": list}}, map[string]any{"identity": map[string]any{}}},
			}}}}
			docs[i] = c
		}
	}

	out, err := container.New(docs...)
	if err != nil {
		t.Fatal(err)
	}

	b, err := out.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// newServiceAccountKey is a new ECDSA signing key and its public key, PEM-encoded.
func newServiceAccountKey(t *testing.T) (private, public string) {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	der, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}

	pub, err := stdx509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}

	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}

// publicOf is the PEM public key of a PEM private key.
func publicOf(t *testing.T, private []byte) string {
	t.Helper()

	block, _ := pem.Decode(private)
	if block == nil {
		t.Fatal("no PEM private key")
	}

	var pub any

	if k, err := stdx509.ParseECPrivateKey(block.Bytes); err == nil {
		pub = k.Public()
	} else if k, err := stdx509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		pub = k.Public()
	} else {
		t.Fatalf("private key: %v", err)
	}

	der, err := stdx509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}

	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// etcdValue is the value etcd holds at key, behind the cluster's kube-apiserver at endpoint.
func etcdValue(t *testing.T, ctx context.Context, k *Kubernetes, endpoint, key string) []byte {
	t.Helper()

	k.mu.Lock()
	r := k.runs[endpoint]
	k.mu.Unlock()

	tlsConfig, err := r.etcdTLS.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{r.etcdURL}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcd %s: %v, %d values", key, err, len(resp.Kvs))
	}

	return resp.Kvs[0].Value
}

// TestAPIServerKeysFollowTheConfig: a v1.14 control plane's kube-apiserver encrypts Secrets at rest
// with the first key of its KubeEtcdEncryptionConfig and reads them with any, and accepts
// service-account tokens of its issuing key and of KubeServiceAccountConfig's accepted public keys:
// the three phases of a rotation of both keys keep a Secret written before it and a token issued
// before it working, until the old key is dropped, when only the token stops working.
func TestAPIServerKeysFollowTheConfig(t *testing.T) {
	t.Parallel()

	binDir, err := proc.BinDir()
	if err != nil {
		t.Fatalf("control-plane binaries: %v", err)
	}

	ports, err := proc.FreePorts("127.0.0.1", 1)
	if err != nil {
		t.Fatal(err)
	}

	endpoint := "https://127.0.0.1:" + strconv.Itoa(ports[0])

	cl, err := generateClusterOf("v1.14.1", endpoint)
	if err != nil {
		t.Fatal(err)
	}

	k := &Kubernetes{BinDir: binDir, Logf: t.Logf}
	t.Cleanup(k.Stop)

	ctx, cancel := context.WithTimeout(t.Context(), kubeTimeout)
	t.Cleanup(cancel)

	cp := appliedNode(t, ctx, Options{ListenAddress: "127.0.2.47:0", Hostname: "cp-1", Kubernetes: k, Version: "v1.14.1"}, cl.cp, PhaseRunning)
	admin := certClient(t, cp, cl.bundle.Certs.OS.Crt, roleCert(t, cl.bundle, role.Admin))

	if err = admin.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	restCfg, err := k.WaitReady(ctx, endpoint)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}

	kube := kubernetes.NewForConfigOrDie(restCfg)
	atRest := func(name string) string {
		v := etcdValue(t, ctx, k, endpoint, "/registry/secrets/default/"+name)
		prefix, _, _ := bytes.Cut(v, []byte(":\x00"))

		return string(prefix[:min(len(prefix), 40)])
	}

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "before"}, StringData: map[string]string{"password": "kept"}}
	if _, err = kube.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if got := atRest("before"); !strings.HasPrefix(got, "k8s:enc:secretbox:v1:key2") {
		t.Fatalf("a Secret at rest begins %q, want Talos's secretbox key2", got)
	}

	if _, err = kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	token := func() string {
		tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, "probe", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token request: %v", err)
		}

		return tr.Status.Token
	}
	works := func(token string) error {
		c := rest.AnonymousClientConfig(restCfg)
		c.BearerToken = token

		_, err := kubernetes.NewForConfigOrDie(c).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})

		return err
	}
	readable := func() {
		t.Helper()

		s, err := kube.CoreV1().Secrets("default").Get(ctx, "before", metav1.GetOptions{})
		if err != nil || string(s.Data["password"]) != "kept" {
			t.Fatalf("the Secret written before: %v, %v", s, err)
		}
	}
	apply := func(phase string, cfg []byte) {
		t.Helper()

		if _, err := admin.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cfg, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
			t.Fatalf("%s: apply: %v", phase, err)
		}

		want := loadConfig(t, cfg)
		pollUntil(t, ctx, "kube-apiserver with the keys of "+phase, func() (bool, error) { return k.apiServerSettled(want), nil })
	}

	oldToken := token()
	if err = works(oldToken); err != nil {
		t.Fatalf("a token before the rotation: %v", err)
	}

	oldSigning := string(cl.bundle.Certs.K8sServiceAccount.Key)
	oldPublic := publicOf(t, cl.bundle.Certs.K8sServiceAccount.Key)
	newSigning, newPublic := newServiceAccountKey(t)
	oldKey := secretboxKey{"key2", cl.bundle.Secrets.SecretboxEncryptionSecret}
	secret32 := make([]byte, 32)
	_, _ = rand.Read(secret32)
	newKey := secretboxKey{"key3", base64.StdEncoding.EncodeToString(secret32)}

	// Accept the new keys; the old ones still sign and encrypt.
	apply("AcceptNew", withKeys(t, cl.cp, oldSigning, []string{newPublic}, oldKey, newKey))
	readable()

	if err = works(oldToken); err != nil {
		t.Fatalf("AcceptNew: the old token: %v", err)
	}

	// Swap: the new keys sign and encrypt; the old ones are still accepted. Rewriting the Secret
	// encrypts it with the new key.
	apply("IssueFromNew", withKeys(t, cl.cp, newSigning, []string{oldPublic}, newKey, oldKey))
	readable()

	if err = works(oldToken); err != nil {
		t.Fatalf("IssueFromNew: the old token: %v", err)
	}

	newToken := token()
	if err = works(newToken); err != nil {
		t.Fatalf("IssueFromNew: a new token: %v", err)
	}

	s, err := kube.CoreV1().Secrets("default").Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if _, err = kube.CoreV1().Secrets("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if got := atRest("before"); !strings.HasPrefix(got, "k8s:enc:secretbox:v1:key3") {
		t.Fatalf("the rewritten Secret at rest begins %q, want the new key3", got)
	}

	// Drop the old keys: the Secret stays readable, the old token stops working.
	apply("DropOld", withKeys(t, cl.cp, newSigning, nil, newKey))
	readable()

	if err = works(newToken); err != nil {
		t.Fatalf("DropOld: the new token: %v", err)
	}

	if err = works(oldToken); !apierrors.IsUnauthorized(err) {
		t.Fatalf("DropOld: the old token: %v, want Unauthorized", err)
	}
}
