package bench

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

const resource = "talosmachines"

// BenchGroup is the group test/bench/crds serves the ichor.dev schema under.
const BenchGroup = "bench." + v1alpha1.GroupName

// path is one way the TalosMachine schema is served, spoken in one encoding.
// Each has a scheme of its own that knows the v1alpha1 Go types under its
// group only, so typed clients and caches decode every path into the same
// structs.
type path struct {
	name   string
	gv     schema.GroupVersion
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	config *rest.Config
	client *rest.RESTClient
}

// newPath is a client of gv that sends and accepts contentType only.
func newPath(name string, base *rest.Config, gv schema.GroupVersion, contentType string) (*path, error) {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(gv, &v1alpha1.TalosMachine{}, &v1alpha1.TalosMachineList{})
	metav1.AddToGroupVersion(scheme, gv)
	codecs := serializer.NewCodecFactory(scheme)

	cfg := rest.CopyConfig(base)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.ContentType = contentType
	cfg.AcceptContentTypes = contentType
	cfg.NegotiatedSerializer = codecs.WithoutConversion()
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", name, err)
	}
	return &path{name: name, gv: gv, scheme: scheme, codecs: codecs, config: cfg, client: client}, nil
}

// create POSTs m and returns what the server stored; status is dropped on
// create by both paths, as status is a subresource on both.
func (p *path) create(ctx context.Context, m *v1alpha1.TalosMachine, opts metav1.CreateOptions) (*v1alpha1.TalosMachine, error) {
	out := &v1alpha1.TalosMachine{}
	err := p.client.Post().Namespace(m.Namespace).Resource(resource).
		VersionedParams(&opts, metav1.ParameterCodec).Body(m).Do(ctx).Into(out)
	return out, err
}

// updateStatus PUTs m's status through the /status subresource.
func (p *path) updateStatus(ctx context.Context, m *v1alpha1.TalosMachine) (*v1alpha1.TalosMachine, error) {
	out := &v1alpha1.TalosMachine{}
	err := p.client.Put().Namespace(m.Namespace).Resource(resource).Name(m.Name).SubResource("status").
		Body(m).Do(ctx).Into(out)
	return out, err
}

// list reads one page; limit 0 reads everything. It returns the page and its
// size on the wire, decoded as a typed client would.
func (p *path) list(ctx context.Context, ns string, limit int64, cont string) (*v1alpha1.TalosMachineList, int, error) {
	raw, err := p.client.Get().Namespace(ns).Resource(resource).
		VersionedParams(&metav1.ListOptions{Limit: limit, Continue: cont}, metav1.ParameterCodec).DoRaw(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := &v1alpha1.TalosMachineList{}
	if err := runtime.DecodeInto(p.codecs.UniversalDecoder(p.gv), raw, out); err != nil {
		return nil, 0, err
	}
	return out, len(raw), nil
}

// watch watches ns from resourceVersion rv.
func (p *path) watch(ctx context.Context, ns, rv string) (watch.Interface, error) {
	opts := metav1.ListOptions{Watch: true, ResourceVersion: rv, AllowWatchBookmarks: false}
	return p.client.Get().Namespace(ns).Resource(resource).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// applyStatus server-side applies a status-only configuration, as a controller does.
func (p *path) applyStatus(ctx context.Context, ns, name string, body []byte) error {
	opts := metav1.PatchOptions{FieldManager: "ichor-bench", Force: ptr.To(true)}
	return p.client.Patch(types.ApplyPatchType).Namespace(ns).Resource(resource).Name(name).SubResource("status").
		VersionedParams(&opts, metav1.ParameterCodec).Body(body).Do(ctx).Error()
}

// url is the collection URL of TalosMachines in ns, for raw requests.
func (p *path) url(ns string) string {
	return strings.TrimSuffix(p.config.Host, "/") + "/apis/" + p.gv.String() + "/namespaces/" + ns + "/" + resource
}
