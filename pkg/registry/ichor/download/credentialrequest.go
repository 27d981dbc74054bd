package download

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	ichorv1alpha1 "ichor.dev/ichor/pkg/generated/clientset/versioned/typed/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/talos"
)

// CredentialTimeout bounds the wait for the controller's answer.
const CredentialTimeout = 30 * time.Second

// Credentials gets a Talos client certificate for one download through a
// TalosCredentialRequest made on behalf of the downloading user: the key is
// made here and lives only in memory (or goes to the user, in a
// talosconfig), and the controller signs the least role the purpose needs,
// for the user, whose name the certificate carries. ichor-apiserver holds
// no long-lived Talos key and never reads a cluster's secrets.
type Credentials struct {
	// Loopback is the server's client configuration of its own API. The
	// request is created impersonating the user, so admission and the
	// controller see the user as its requester; the server then waits for
	// the answer and deletes the request as itself.
	Loopback *rest.Config
	// Timeout bounds the wait for an answer; CredentialTimeout when zero.
	Timeout time.Duration

	once   sync.Once
	server versioned.Interface
	err    error
}

// client is the server's own client of its API.
func (c *Credentials) client() (versioned.Interface, error) {
	c.once.Do(func() { c.server, c.err = versioned.NewForConfig(c.Loopback) })
	return c.server, c.err
}

// onBehalfOf is a client of the server's API acting as requester.
func (c *Credentials) onBehalfOf(requester user.Info) (versioned.Interface, error) {
	cfg := rest.CopyConfig(c.Loopback)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: requester.GetName(), UID: requester.GetUID(), Groups: requester.GetGroups(), Extra: requester.GetExtra(),
	}
	return versioned.NewForConfig(cfg)
}

// Issued is a Talos credential and the request that issued it.
type Issued struct {
	talos.Credentials
	// KubernetesCertificate is the PEM Kubernetes client certificate of the
	// same key, for the credentials purpose only.
	KubernetesCertificate []byte
	// Request refers to the TalosCredentialRequest that was answered; it is
	// deleted by the time the credential is used.
	Request *corev1.ObjectReference
}

// Request asks, on behalf of the user of ctx, for a credential for purpose
// on machines of cluster and waits for the answer. The request is deleted
// once answered.
func (c *Credentials) Request(ctx context.Context, namespace, cluster string, machines []string, purpose v1alpha1.CredentialPurpose) (Issued, error) {
	requester, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return Issued{}, apierrors.NewUnauthorized("a Talos credential needs an authenticated requester")
	}
	server, err := c.client()
	if err != nil {
		return Issued{}, fmt.Errorf("loopback client: %w", err)
	}
	asRequester, err := c.onBehalfOf(requester)
	if err != nil {
		return Issued{}, fmt.Errorf("loopback client for %s: %w", requester.GetName(), err)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Issued{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return Issued{}, err
	}
	requests := server.IchorV1alpha1().TalosCredentialRequests(namespace)
	req, err := asRequester.IchorV1alpha1().TalosCredentialRequests(namespace).Create(ctx, &v1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "download-" + string(purpose) + "-"},
		Spec: v1alpha1.TalosCredentialRequestSpec{
			ClusterName: cluster, Machines: machines, Purpose: purpose,
			PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return Issued{}, explain(err, fmt.Sprintf("request a %s Talos credential for %s", purpose, requester.GetName()))
	}
	defer func() {
		_ = requests.Delete(context.WithoutCancel(ctx), req.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(req.UID))})
	}()

	answered, err := wait(ctx, requests, c.timeout(), req)
	if err != nil {
		return Issued{}, err
	}
	if d := meta.FindStatusCondition(answered.Status.Conditions, v1alpha1.CredentialRequestDenied); d != nil && d.Status == metav1.ConditionTrue {
		err := fmt.Errorf("the controller denied the Talos credential: %s: %s", d.Reason, d.Message)
		if d.Reason == v1alpha1.CredentialRequestReasonNoNewCredentials || d.Reason == v1alpha1.CredentialRequestReasonAlreadyServed {
			// The cluster's state, not the requester's rights, stands in the way.
			return Issued{}, apierrors.NewConflict(ichor.Resource("taloscredentialrequests"), req.Name, err)
		}
		return Issued{}, apierrors.NewForbidden(ichor.Resource("taloscredentialrequests"), req.Name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{
		Credentials: talos.Credentials{
			CA:          []byte(answered.Status.CABundle),
			Certificate: []byte(answered.Status.Certificate),
			Key:         pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		},
		KubernetesCertificate: []byte(answered.Status.KubernetesCertificate),
		Request:               reference("TalosCredentialRequest", answered),
	}, nil
}

func (c *Credentials) timeout() time.Duration {
	if c.Timeout == 0 {
		return CredentialTimeout
	}
	return c.Timeout
}

// wait watches the request until it is issued or denied.
func wait(ctx context.Context, requests ichorv1alpha1.TalosCredentialRequestInterface, timeout time.Duration, req *v1alpha1.TalosCredentialRequest) (*v1alpha1.TalosCredentialRequest, error) {
	namespace := req.Namespace
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := requests.Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", req.Name).String(), ResourceVersion: req.ResourceVersion,
	})
	if err != nil {
		return nil, explain(err, "watch TalosCredentialRequest "+req.Name)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"no answer to TalosCredentialRequest %s/%s within %s: is ichor-controller running?", namespace, req.Name, timeout))
		case e, ok := <-w.ResultChan():
			if !ok {
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the watch of TalosCredentialRequest %s/%s ended before an answer", namespace, req.Name))
			}
			switch e.Type {
			case watch.Error:
				return nil, explain(apierrors.FromObject(e.Object), "watch TalosCredentialRequest "+req.Name)
			case watch.Deleted:
				return nil, apierrors.NewConflict(ichor.Resource("taloscredentialrequests"), req.Name,
					errors.New("it was deleted before the controller answered it"))
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

// explain prefixes an error with what was being done, keeping the status of
// an API error (the server answers a plain error with a 500).
func explain(err error, doing string) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		s.Message = doing + ": " + s.Message
		return &apierrors.StatusError{ErrStatus: s}
	}
	return fmt.Errorf("%s: %w", doing, err)
}
