// Package apiserver is ichor-apiserver's command line: its options, and how
// they become a running server (Complete, Validate, Config, Run).
package apiserver

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	baseversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"

	ichoradmission "ichor.dev/ichor/pkg/admission"
	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/authz"
	"ichor.dev/ichor/pkg/etcd/embedded"
	"ichor.dev/ichor/pkg/frontproxy"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
	ichoropenapi "ichor.dev/ichor/pkg/generated/openapi"
	"ichor.dev/ichor/pkg/registry/ichor/download"
	"ichor.dev/ichor/pkg/registry/ichor/talosbackup"
)

// EtcdPathPrefix is where Ichor's objects live in etcd.
const EtcdPathPrefix = "/registry/ichor.dev"

// embeddedEtcdReadyTimeout bounds how long start-up waits for the embedded etcd.
const embeddedEtcdReadyTimeout = time.Minute

// Options are everything ichor-apiserver can be told on its command line.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
	// EmbeddedEtcd is used when no --etcd-servers is given.
	EmbeddedEtcd embedded.Options
	// AskCollectionFirst wraps the delegated authorizer in authz.CollectionFirst.
	AskCollectionFirst bool
	// Controller is ichor-controller's upload endpoint.
	Controller talosbackup.Controller
	// BootstrapInstallationFile holds the IchorInstallation to create when
	// there is none.
	BootstrapInstallationFile string
}

// NewOptions returns options with Ichor's defaults.
func NewOptions() *Options {
	o := &Options{
		// The storage codec depends on --storage-media-type: Config sets it.
		Recommended: genericoptions.NewRecommendedOptions(EtcdPathPrefix, nil),
		EmbeddedEtcd: embedded.Options{
			DataDir:       "/var/lib/ichor/etcd",
			ClientAddress: "127.0.0.1:2379",
			PeerAddress:   "127.0.0.1:2380",
		},
		AskCollectionFirst: true,
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	// Objects are stored as protobuf, as kube-apiserver stores its own: smaller
	// in etcd and quicker to encode and decode than JSON.
	o.Recommended.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	// Ichor's admission plugins run after the generic ones, in their declared order.
	ichoradmission.Register(o.Recommended.Admission.Plugins)
	o.Recommended.Admission.RecommendedPluginOrder = append(o.Recommended.Admission.RecommendedPluginOrder, ichoradmission.OrderedPlugins()...)
	return o
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Recommended.AddFlags(fs)
	fs.StringVar(&o.EmbeddedEtcd.DataDir, "embedded-etcd-data-dir", o.EmbeddedEtcd.DataDir,
		"Directory of the embedded etcd, used when --etcd-servers is empty.")
	fs.StringVar(&o.EmbeddedEtcd.ClientAddress, "embedded-etcd-client-address", o.EmbeddedEtcd.ClientAddress,
		"Loopback host:port the embedded etcd serves clients on.")
	fs.StringVar(&o.EmbeddedEtcd.PeerAddress, "embedded-etcd-peer-address", o.EmbeddedEtcd.PeerAddress,
		"Loopback host:port of the embedded etcd's peer listener.")
	fs.BoolVar(&o.AskCollectionFirst, "authorization-ask-collection-first", o.AskCollectionFirst,
		"Authorize a request for one ichor.dev object by first asking kube-apiserver whether the user may do the same "+
			"to every object of its resource (one cached answer for all objects), and only then about the named object. "+
			"Turn it off if an authorization webhook denies requests by object name while having no opinion about all objects.")
	fs.StringVar(&o.Controller.URL, "controller-upload-url", o.Controller.URL,
		"https URL of ichor-controller's upload endpoint (its --upload-bind-address), which talosbackups/NAME/upload streams snapshots to; empty refuses uploads.")
	fs.StringVar(&o.Controller.CAFile, "controller-upload-ca-file", o.Controller.CAFile,
		"CA certificates that issue the upload endpoint's serving certificate.")
	fs.StringVar(&o.BootstrapInstallationFile, "bootstrap-installation-file", o.BootstrapInstallationFile,
		"An IchorInstallation (YAML or JSON) to create once the server serves, unless one exists; an existing one is never changed. "+
			"The server is not ready until the installation exists.")
}

// UsesEmbeddedEtcd is true when no external etcd was named.
func (o *Options) UsesEmbeddedEtcd() bool {
	return len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) == 0
}

// Complete fills in what the flags left open: a self-signed serving
// certificate when none was given.
func (o *Options) Complete() error {
	return o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	if o.UsesEmbeddedEtcd() {
		// What the etcd options' validation would have said of the media
		// type, before the embedded etcd starts.
		if _, err := o.storageCodec(); err != nil {
			errs = append(errs, err)
		}
		// The embedded etcd fills --etcd-servers at Run; validate everything else now.
		saved := o.Recommended.Etcd
		o.Recommended.Etcd = nil
		defer func() { o.Recommended.Etcd = saved }()
		if o.EmbeddedEtcd.DataDir == "" {
			errs = append(errs, fmt.Errorf("--embedded-etcd-data-dir is required when --etcd-servers is empty"))
		}
	}
	if o.Controller.URL != "" && o.Controller.CAFile == "" {
		errs = append(errs, fmt.Errorf("--controller-upload-url needs --controller-upload-ca-file"))
	}
	if o.BootstrapInstallationFile != "" {
		if _, err := apiserver.ReadBootstrapInstallation(o.BootstrapInstallationFile); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, o.Recommended.Validate()...)
	return utilerrors.NewAggregate(errs)
}

// Config turns the options into a server configuration.
func (o *Options) Config() (*apiserver.Config, error) {
	cfg := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	cfg.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString(baseversion.DefaultKubeBinaryVersion, "", "")
	cfg.FeatureGate = utilfeature.DefaultFeatureGate
	// Downloads stream for as long as the file takes; they are not cut at
	// the request timeout (kube-apiserver, which proxies them, applies its
	// own --request-timeout to them: raise it for large snapshots).
	cfg.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"),
		sets.NewString(append(download.Subresources, v1alpha1.UploadSubresource)...))

	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(ichoropenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = "Ichor"
	cfg.OpenAPIConfig.Info.Version = v1alpha1.SchemeGroupVersion.Version
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(ichoropenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = "Ichor"
	cfg.OpenAPIV3Config.Info.Version = v1alpha1.SchemeGroupVersion.Version

	// Informers on Ichor's own API for admission, started by the server.
	var informers externalversions.SharedInformerFactory
	o.Recommended.ExtraAdmissionInitializers = func(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		// ApplyTo calls this after it built the delegated authorizer and
		// before it hands that to admission: wrapped here, the handler
		// chain, admission and the downloads all ask the same one.
		if o.AskCollectionFirst {
			c.Authorization.Authorizer = authz.CollectionFirst(c.Authorization.Authorizer, v1alpha1.GroupName)
		}
		client, err := versioned.NewForConfig(c.LoopbackClientConfig)
		if err != nil {
			return nil, fmt.Errorf("loopback client for admission: %w", err)
		}
		informers = externalversions.NewSharedInformerFactory(client, 0)
		return []admission.PluginInitializer{initializer.New(client, informers)}, nil
	}
	if err := o.applyStorageCodec(); err != nil {
		return nil, err
	}
	if err := o.Recommended.ApplyTo(cfg); err != nil {
		return nil, err
	}
	if rh := cfg.Authentication.RequestHeaderConfig; rh != nil && cfg.Authentication.Authenticator != nil {
		cfg.Authentication.Authenticator = frontproxy.New(rh, cfg.Authentication.Authenticator)
	}
	c := &apiserver.Config{GenericConfig: cfg, IchorInformers: informers, Controller: o.Controller}
	if o.BootstrapInstallationFile != "" {
		var err error
		if c.BootstrapInstallation, err = apiserver.ReadBootstrapInstallation(o.BootstrapInstallationFile); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// applyStorageCodec makes etcd values v1alpha1 objects in the
// --storage-media-type encoding. Values in any other encoding Ichor has
// (JSON, from before protobuf was the default) still decode, and are
// rewritten in this one on their next write.
func (o *Options) applyStorageCodec() error {
	codec, err := o.storageCodec()
	if err != nil {
		return err
	}
	o.Recommended.Etcd.StorageConfig.Codec = codec
	return nil
}

func (o *Options) storageCodec() (runtime.Codec, error) {
	codec, _, err := serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType:  o.Recommended.Etcd.DefaultStorageMediaType,
		StorageSerializer: apiserver.Codecs,
		StorageVersion:    v1alpha1.SchemeGroupVersion,
		MemoryVersion:     ichor.SchemeGroupVersion,
		Config:            o.Recommended.Etcd.StorageConfig,
	})
	if err != nil {
		return nil, fmt.Errorf("--storage-media-type: %w", err)
	}
	return codec, nil
}

// Run starts the embedded etcd if needed, then serves until ctx ends, then
// shuts down gracefully: the API first, etcd last.
func (o *Options) Run(ctx context.Context) error {
	if o.UsesEmbeddedEtcd() {
		etcd, err := embedded.Start(o.EmbeddedEtcd, embeddedEtcdReadyTimeout)
		if err != nil {
			return err
		}
		defer etcd.Close()
		t := &o.Recommended.Etcd.StorageConfig.Transport
		t.ServerList = []string{etcd.Endpoint}
		t.TrustedCAFile, t.CertFile, t.KeyFile = etcd.CAFile, etcd.CertFile, etcd.KeyFile
		klog.InfoS("Started embedded etcd", "endpoint", etcd.Endpoint, "dataDir", o.EmbeddedEtcd.DataDir)
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	server, err := cfg.Complete().New()
	if err != nil {
		return err
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
