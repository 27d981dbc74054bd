package apiserver

import (
	"context"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// ReadBootstrapInstallation reads the IchorInstallation an installation
// starts with (--bootstrap-installation-file; the chart's ConfigMap
// ichor-installation) and validates it as the API would, so that a wrong
// file stops the server at start-up with every error at once.
func ReadBootstrapInstallation(path string) (*v1alpha1.IchorInstallation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--bootstrap-installation-file: %w", err)
	}
	strict := serializer.NewCodecFactory(Scheme, serializer.EnableStrict).UniversalDeserializer()
	obj, gvk, err := strict.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("--bootstrap-installation-file %s: %w", path, err)
	}
	in, ok := obj.(*v1alpha1.IchorInstallation)
	if !ok {
		return nil, fmt.Errorf("--bootstrap-installation-file %s holds a %s, want an %s", path, gvk, v1alpha1.SchemeGroupVersion.WithKind("IchorInstallation"))
	}
	if in.Name == "" {
		in.Name = v1alpha1.InstallationName
	}
	Scheme.Default(in)
	var internal ichor.IchorInstallation
	if err := Scheme.Convert(in, &internal, nil); err != nil {
		return nil, err
	}
	if errs := validation.ValidateIchorInstallation(&internal); len(errs) > 0 {
		return nil, fmt.Errorf("--bootstrap-installation-file %s: %w", path, errs.ToAggregate())
	}
	return in, nil
}

// bootstrapRetry bounds each attempt's wait while the server's own storage
// comes up; the hook tries until it succeeds or the server stops.
const bootstrapRetry = time.Second

// addInstallationBootstrap creates in, through the loopback client, once
// the server serves, unless an IchorInstallation exists: an installation's
// settings are the admins' from then on (the settings subresource), and a
// restart or an upgrade never overwrites them. The server is not ready
// until it exists.
func addInstallationBootstrap(generic *genericapiserver.GenericAPIServer, in *v1alpha1.IchorInstallation) error {
	return generic.AddPostStartHook("ichor-bootstrap-installation", func(hook genericapiserver.PostStartHookContext) error {
		client, err := versioned.NewForConfig(hook.LoopbackClientConfig)
		if err != nil {
			return err
		}
		installations := client.IchorV1alpha1().IchorInstallations()
		return wait.PollUntilContextCancel(hook, bootstrapRetry, true, func(ctx context.Context) (bool, error) {
			_, err := installations.Create(ctx, in.DeepCopy(), metav1.CreateOptions{FieldManager: "ichor-bootstrap"})
			switch {
			case err == nil:
				klog.InfoS("Created the IchorInstallation from --bootstrap-installation-file", "name", in.Name)
				return true, nil
			case apierrors.IsAlreadyExists(err):
				return true, nil
			case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
				return false, fmt.Errorf("create the IchorInstallation from --bootstrap-installation-file: %w", err)
			default:
				klog.V(2).InfoS("Waiting to create the IchorInstallation", "err", err)
				return false, nil
			}
		})
	})
}
