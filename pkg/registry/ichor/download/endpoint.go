package download

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// endpoints make the endpoint of each download of ichor.Downloads, by its
// path: what the download is of, its query parameters and its stream.
// TestEveryDownloadIsServed checks they are the same downloads.
var endpoints = map[string]func(*Deps, ichor.Download) rest.Storage{
	"talosmachines/etcd-snapshot":      serve(machines, plainOptions, etcdSnapshot),
	"talosmachines/support-bundle":     serve(machines, plainOptions, supportBundle),
	"talosmachines/packet-capture":     serve(machines, captureOptions, packetCapture),
	"talosclusters/talosconfig-reader": serve(clusters, plainOptions, talosconfigReader),
	"talosclusters/credentials":        serve(clusters, plainOptions, credentials),
}

// Storage returns the endpoint of every download of ichor.Downloads, keyed
// by resource/subresource.
func Storage(deps Deps) map[string]rest.Storage {
	storage := make(map[string]rest.Storage, len(ichor.Downloads))
	for _, d := range ichor.Downloads {
		if endpoint, ok := endpoints[d.Path()]; ok {
			storage[d.Path()] = endpoint(&deps, d)
		}
	}
	return storage
}

// endpoint is GET resource/NAME/subresource of one download of
// ichor.Downloads, of an object T with query parameters O. It does what
// every download does: it refuses a dry run, checks the download verb,
// reads the object and returns the download, which opens the stream and
// records who downloaded what. What one download does on its own is its
// stream function.
type endpoint[T object, O runtime.Object] struct {
	deps    *Deps
	row     ichor.Download
	of      kind[T]
	options parameters[O]
	stream  streamFunc[T, O]
}

// serve makes the endpoints of a download of of with options and stream.
func serve[T object, O runtime.Object](of kind[T], options parameters[O], stream streamFunc[T, O]) func(*Deps, ichor.Download) rest.Storage {
	return func(deps *Deps, row ichor.Download) rest.Storage {
		return &endpoint[T, O]{deps: deps, row: row, of: of, options: options, stream: stream}
	}
}

// A streamFunc checks a download's request beyond the download verb and
// says what the user gets ("the etcd-snapshot of TalosMachine cp-1") and
// how its stream opens, when the response asks for it.
type streamFunc[T object, O runtime.Object] func(ctx context.Context, r request[T, O]) (what string, open opener, err error)

// opener starts a download's stream.
type opener func(ctx context.Context) (*opened, error)

// request is a download's GET once the download verb allowed it: the
// download, its object and its query parameters.
type request[T object, O runtime.Object] struct {
	*Deps
	row     ichor.Download
	object  T
	options O
}

// object is what a download is of.
type object interface {
	runtime.Object
	metav1.Object
}

// kind is a resource downloads are of.
type kind[T object] struct {
	// name is its kind, for the Event's reference.
	name string
	// empty is an empty one.
	empty func() T
	// get reads the stored one a download is of.
	get func(d *Deps, ctx context.Context, name string) (T, error)
}

var (
	// machines are the TalosMachines, which must be configured members of
	// their cluster to have anything to download.
	machines = kind[*ichor.TalosMachine]{
		name:  "TalosMachine",
		empty: func() *ichor.TalosMachine { return &ichor.TalosMachine{} },
		get:   (*Deps).configuredMachine,
	}
	// clusters are the TalosClusters.
	clusters = kind[*ichor.TalosCluster]{
		name:  "TalosCluster",
		empty: func() *ichor.TalosCluster { return &ichor.TalosCluster{} },
		get:   (*Deps).cluster,
	}
)

// parameters are a download's query parameters.
type parameters[O runtime.Object] struct {
	empty func() O
	// dryRun is the dryRun parameter, which every download refuses.
	dryRun func(O) []string
	// validate, when set, checks the others before the download verb.
	validate func(name string, o O) error
}

var (
	// plainOptions are the parameters of a download that takes none of
	// its own.
	plainOptions = parameters[*ichor.DownloadOptions]{
		empty:  func() *ichor.DownloadOptions { return &ichor.DownloadOptions{} },
		dryRun: func(o *ichor.DownloadOptions) []string { return o.DryRun },
	}
	// captureOptions are the parameters of a packet capture.
	captureOptions = parameters[*ichor.PacketCaptureOptions]{
		empty:    func() *ichor.PacketCaptureOptions { return &ichor.PacketCaptureOptions{} },
		dryRun:   func(o *ichor.PacketCaptureOptions) []string { return o.DryRun },
		validate: validateCaptureRequest,
	}
)

var (
	_ rest.GetterWithOptions = &endpoint[*ichor.TalosMachine, *ichor.DownloadOptions]{}
	_ rest.StorageMetadata   = &endpoint[*ichor.TalosMachine, *ichor.DownloadOptions]{}
)

// New returns an empty object of the kind the subresource belongs to.
func (e *endpoint[T, O]) New() runtime.Object { return e.of.empty() }

// Destroy does nothing: the main endpoint owns the storage.
func (*endpoint[T, O]) Destroy() {}

// NewGetOptions returns the download's query parameters.
func (e *endpoint[T, O]) NewGetOptions() (runtime.Object, bool, string) {
	return e.options.empty(), false, ""
}

// ProducesMIMETypes is what the stream is served as.
func (e *endpoint[T, O]) ProducesMIMETypes(string) []string { return []string{e.row.ContentType} }

// ProducesObject says the response is a stream, not an object.
func (*endpoint[T, O]) ProducesObject(string) any { return "" }

// Get checks the request and returns the download, whose stream opens when
// the response reads it.
func (e *endpoint[T, O]) Get(ctx context.Context, name string, options runtime.Object) (runtime.Object, error) {
	o := options.(O)
	if err := refuseDryRun(e.options.dryRun(o)); err != nil {
		return nil, err
	}
	if e.options.validate != nil {
		if err := e.options.validate(name, o); err != nil {
			return nil, err
		}
	}
	user, err := e.deps.authorize(ctx, e.row.Resource, e.row.Subresource, name)
	if err != nil {
		return nil, err
	}
	obj, err := e.of.get(e.deps, ctx, name)
	if err != nil {
		return nil, err
	}
	what, open, err := e.stream(ctx, request[T, O]{Deps: e.deps, row: e.row, object: obj, options: o})
	if err != nil {
		return nil, err
	}
	return &download{
		deps: e.deps, user: user, object: reference(e.of.name, obj), contentType: e.row.ContentType,
		what: what, open: open,
	}, nil
}
