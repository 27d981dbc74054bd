// Package installation reads the IchorInstallation's run-time settings for
// the controllers, from their cache.
package installation

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Settings are the installation's settings; the zero value when there is
// no IchorInstallation (every setting has its default then).
func Settings(ctx context.Context, c client.Reader) (v1alpha1.InstallationSettings, error) {
	var inst v1alpha1.IchorInstallation
	err := c.Get(ctx, types.NamespacedName{Name: v1alpha1.InstallationName}, &inst)
	if apierrors.IsNotFound(err) {
		return v1alpha1.InstallationSettings{}, nil
	}
	if err != nil {
		return v1alpha1.InstallationSettings{}, fmt.Errorf("read IchorInstallation %s: %w", v1alpha1.InstallationName, err)
	}
	return inst.Spec.Settings, nil
}
