package issuer

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// secretFile is one data key of a Secret that the issuer reads and writes
// whole: its key set or its sessions. The Secret exists beforehand (the
// installation creates it empty), so the issuer's RBAC names it and grants
// get and update, never create or list.
type secretFile struct {
	client          kubernetes.Interface
	namespace, name string
	key             string
}

// read returns the file's content; an absent key is empty.
func (f *secretFile) read(ctx context.Context) ([]byte, error) {
	s, err := f.client.CoreV1().Secrets(f.namespace).Get(ctx, f.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read Secret %s/%s: %w", f.namespace, f.name, err)
	}
	return s.Data[f.key], nil
}

// update replaces the file's content with what change makes of it, under
// the Secret's resourceVersion, again on a conflict. change returns nil
// when there is nothing to write.
func (f *secretFile) update(ctx context.Context, change func(data []byte) ([]byte, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := f.client.CoreV1().Secrets(f.namespace).Get(ctx, f.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read Secret %s/%s: %w", f.namespace, f.name, err)
		}
		data, err := change(s.Data[f.key])
		if err != nil || data == nil {
			return err
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[f.key] = data
		if _, err := f.client.CoreV1().Secrets(f.namespace).Update(ctx, s, metav1.UpdateOptions{FieldManager: "ichor-auth"}); err != nil {
			return err
		}
		return nil
	})
}
