package uploadserver

import (
	"context"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap in which kube-apiserver publishes the CA of its client
// certificates, which every delegating server reads.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMapName      = "extension-apiserver-authentication"
	clientCAKey            = "client-ca-file"
)

// delegate authenticates and authorizes callers through kube-apiserver,
// the way an aggregated API server does: client certificates against the
// cluster's client CA, tokens through TokenReviews, and every decision
// through a SubjectAccessReview. It needs the system:auth-delegator
// ClusterRole and the extension-apiserver-authentication-reader Role.
func (s *Server) delegate(ctx context.Context, kube kubernetes.Interface) error {
	clientCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", authConfigMapNamespace, authConfigMapName, clientCAKey, kube)
	if err != nil {
		return err
	}
	// A first read now, so that a missing ConfigMap or right is an error
	// at start, not a refused upload later.
	if err := clientCA.RunOnce(ctx); err != nil {
		return err
	}
	go clientCA.Run(ctx, 1)

	backoff := genericoptions.DefaultAuthWebhookRetryBackoff()
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:            kube.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                backoff,
		CacheTTL:                           10 * time.Second,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		return err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             10 * time.Second,
		DenyCacheTTL:              10 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return err
	}
	s.Authenticator, s.Authorizer = authn, authz
	return nil
}
