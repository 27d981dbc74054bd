// Package apiserver assembles the ichor.dev API server from a generic API
// server configuration and the registry's storage.
package apiserver

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	"ichor.dev/ichor/pkg/registry"
	"ichor.dev/ichor/pkg/registry/ichor/talosbackup"
)

// Name is the API server's component name in logs and health checks.
const Name = v1alpha1.ReporterAPIServer

// Config is the configuration of an ichor-apiserver.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	// IchorInformers are the informers on the server's own API that
	// admission reads; the server starts them once it serves. Nil for none.
	IchorInformers externalversions.SharedInformerFactory
	// Controller is ichor-controller's upload endpoint; a zero URL refuses uploads.
	Controller talosbackup.Controller
	// BootstrapInstallation is created once the server serves, unless an
	// IchorInstallation exists; nil creates none.
	BootstrapInstallation *v1alpha1.IchorInstallation
}

// CompletedConfig is a Config with its defaults filled in.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	// kube is the client configuration of the cluster's kube-apiserver,
	// where the server records Events; nil records none.
	kube       *rest.Config
	informers  externalversions.SharedInformerFactory
	controller talosbackup.Controller
	bootstrap  *v1alpha1.IchorInstallation
}

// Server is a running ichor-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in the defaults the generic server derives.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.GenericConfig.Complete(), kube: c.GenericConfig.ClientConfig, informers: c.IchorInformers, controller: c.Controller,
		bootstrap: c.BootstrapInstallation}
}

// New builds the server and installs the ichor.dev group.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New(Name, genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	// The parameter codec of the scheme decodes Ichor's own query options
	// (DownloadOptions) as well as the standard ones.
	group := genericapiserver.NewDefaultAPIGroupInfo(ichor.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	recorder, err := eventRecorder(generic, c.kube)
	if err != nil {
		return nil, err
	}
	var uploads *talosbackup.Forwarder
	if c.controller.URL != "" {
		if c.kube == nil {
			return nil, fmt.Errorf("uploads to ichor-controller need the server's kube-apiserver identity (--kubeconfig or in-cluster)")
		}
		if uploads, err = talosbackup.NewForwarder(c.controller, c.kube); err != nil {
			return nil, err
		}
	}
	storage, err := registry.V1alpha1(Scheme, c.generic.RESTOptionsGetter, registry.Deps{
		Recorder: recorder, Authorizer: c.generic.Authorization.Authorizer, Loopback: c.generic.LoopbackClientConfig,
		Uploads: uploads,
	})
	if err != nil {
		return nil, fmt.Errorf("build %s storage: %w", v1alpha1.SchemeGroupVersion, err)
	}
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = storage
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("install %s: %w", ichor.GroupName, err)
	}

	if c.informers != nil {
		if err := generic.AddPostStartHook("ichor-admission-informers", func(ctx genericapiserver.PostStartHookContext) error {
			c.informers.Start(ctx.Done())
			return nil
		}); err != nil {
			return nil, err
		}
	}
	if c.bootstrap != nil {
		if err := addInstallationBootstrap(generic, c.bootstrap); err != nil {
			return nil, err
		}
	}
	return &Server{GenericAPIServer: generic}, nil
}
