package download

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/talos"
)

// CredentialTimeout bounds the wait for the controller's answer.
const CredentialTimeout = 30 * time.Second

// Credentials gets the server a Talos client certificate for one download
// through a TalosCredentialRequest, like any other requester: the key is
// made here, lives only in memory, and the controller signs the least role
// the purpose needs for at most ten minutes. ichor-apiserver holds no
// long-lived Talos key and never reads a cluster's secrets.
type Credentials struct {
	// Client is the server's loopback client.
	Client versioned.Interface
	// Timeout bounds the wait for an answer; CredentialTimeout when zero.
	Timeout time.Duration
}

// Request asks for a credential for purpose on machines of cluster and
// waits for the answer. The request is deleted once answered.
func (c *Credentials) Request(ctx context.Context, namespace, cluster string, machines []string, purpose v1alpha1.CredentialPurpose) (talos.Credentials, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return talos.Credentials{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return talos.Credentials{}, err
	}
	requests := c.Client.IchorV1alpha1().TalosCredentialRequests(namespace)
	req, err := requests.Create(ctx, &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ichor-apiserver-" + string(purpose) + "-"},
		Spec: v1alpha1.TalosCredentialRequestSpec{
			ClusterName: cluster, Machines: machines, Purpose: purpose,
			PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return talos.Credentials{}, fmt.Errorf("request a %s Talos credential: %w", purpose, err)
	}
	defer func() {
		_ = requests.Delete(context.WithoutCancel(ctx), req.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(req.UID))})
	}()

	answered, err := c.wait(ctx, namespace, req)
	if err != nil {
		return talos.Credentials{}, err
	}
	if d := meta.FindStatusCondition(answered.Status.Conditions, v1alpha1.CredentialRequestDenied); d != nil && d.Status == metav1.ConditionTrue {
		return talos.Credentials{}, apierrors.NewForbidden(ichor.Resource("taloscredentialrequests"), req.Name,
			fmt.Errorf("the controller denied the Talos credential: %s: %s", d.Reason, d.Message))
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return talos.Credentials{}, err
	}
	return talos.Credentials{
		CA:          []byte(answered.Status.CABundle),
		Certificate: []byte(answered.Status.Certificate),
		Key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// wait watches the request until it is issued or denied.
func (c *Credentials) wait(ctx context.Context, namespace string, req *v1alpha1.TalosCredentialRequest) (*v1alpha1.TalosCredentialRequest, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = CredentialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := c.Client.IchorV1alpha1().TalosCredentialRequests(namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", req.Name).String(), ResourceVersion: req.ResourceVersion,
	})
	if err != nil {
		return nil, fmt.Errorf("watch TalosCredentialRequest %s: %w", req.Name, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"no answer to TalosCredentialRequest %s/%s within %s: is ichor-controller running?", namespace, req.Name, timeout))
		case e, ok := <-w.ResultChan():
			if !ok {
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the watch of TalosCredentialRequest %s/%s ended before an answer", namespace, req.Name))
			}
			if e.Type == watch.Error {
				return nil, apierrors.FromObject(e.Object)
			}
			r, ok := e.Object.(*v1alpha1.TalosCredentialRequest)
			if !ok {
				continue
			}
			if meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.CredentialRequestIssued) || meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.CredentialRequestDenied) {
				return r, nil
			}
		}
	}
}
