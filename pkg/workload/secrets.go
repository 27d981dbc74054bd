package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// KeyRotation is who writes every Secret again during a key rotation: a
// cluster admin, with a certificate that lives for rewriteTTL in
// ichor-controller's memory only, so that the cluster's audit log names
// the rotation. ichor-controller's own role reads no Secret.
var KeyRotation = Identity{User: "ichor:key-rotation", Groups: []string{MastersGroup}}

// rewriteTTL bounds KeyRotation's certificate.
const rewriteTTL = 10 * time.Minute

// rewritePage is how many Secrets a list returns at once.
const rewritePage = 250

// RewriteSecrets writes every Secret of the cluster at endpoint again,
// unchanged, as KeyRotation: kube-apiserver encrypts what it writes with
// the first key of its encryption configuration, and writes a Secret read
// with another key even when nothing changed, so afterwards no Secret
// needs an older key. A Secret deleted meanwhile is skipped; one changed
// meanwhile is read again and written. It returns how many it wrote.
func RewriteSecrets(ctx context.Context, bundle *secrets.Bundle, endpoint string, now time.Time, alsoTrusted ...[]byte) (int, error) {
	cfg, err := ClientConfig(bundle, endpoint, KeyRotation, now, rewriteTTL, alsoTrusted...)
	if err != nil {
		return 0, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, fmt.Errorf("workload client for %s: %w", endpoint, err)
	}
	written, cont := 0, ""
	for {
		list, err := cs.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: rewritePage, Continue: cont})
		if apierrors.IsResourceExpired(err) && cont != "" {
			cont = "" // the list's snapshot was compacted away: start over; writing again is harmless
			continue
		}
		if err != nil {
			return written, fmt.Errorf("list the Secrets at %s: %w", endpoint, err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				_, err := cs.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{FieldManager: fieldManager})
				if apierrors.IsConflict(err) {
					got, gerr := cs.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
					if gerr != nil {
						return gerr
					}
					s = got
				}
				return err
			})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return written, fmt.Errorf("write Secret %s/%s again: %w", s.Namespace, s.Name, err)
			default:
				written++
			}
		}
		if cont = list.Continue; cont == "" {
			return written, nil
		}
	}
}
