package initializer

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	listers "ichor.dev/ichor/pkg/generated/listers/ichor/v1alpha1"
)

// Installation reads the IchorInstallation singleton for a plugin: from
// its informer, or fresh from storage when the informer may lag (a setting
// an admin just changed, an informer not yet synced).
type Installation struct {
	Lister listers.IchorInstallationLister
	Client versioned.Interface
}

// Get returns the installation, nil when there is none (yet).
func (i Installation) Get(ctx context.Context, fresh bool) (*v1alpha1.IchorInstallation, error) {
	var in *v1alpha1.IchorInstallation
	var err error
	if fresh {
		in, err = i.Client.IchorV1alpha1().IchorInstallations().Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
	} else {
		in, err = i.Lister.Get(v1alpha1.InstallationName)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read IchorInstallation %s: %w", v1alpha1.InstallationName, err)
	}
	return in, nil
}
