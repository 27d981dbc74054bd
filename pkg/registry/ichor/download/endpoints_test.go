package download

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestEveryDownloadIsServed: an endpoint serves each download of
// ichor.Downloads, and every endpoint is one of them.
func TestEveryDownloadIsServed(t *testing.T) {
	storage := Storage(Deps{})
	for _, d := range ichor.Downloads {
		s, ok := storage[d.Path()]
		if !ok {
			t.Errorf("%s is a download no endpoint serves: add one to endpoints", d.Path())
			continue
		}
		if got := s.(rest.StorageMetadata).ProducesMIMETypes("GET"); len(got) != 1 || got[0] != d.ContentType {
			t.Errorf("%s is served as %v, not %s", d.Path(), got, d.ContentType)
		}
		if got, want := reflect.TypeOf(s.New()), reflect.TypeOf(objectOf[d.Resource]); got != want {
			t.Errorf("%s belongs to %v, not %v", d.Path(), got, want)
		}
	}
	for path := range endpoints {
		if _, ok := storage[path]; !ok {
			t.Errorf("endpoints serve %s, which is not in ichor.Downloads", path)
		}
	}
}

// objectOf is the kind of each resource downloads are of.
var objectOf = map[string]runtime.Object{"talosmachines": &ichor.TalosMachine{}, "talosclusters": &ichor.TalosCluster{}}

// TestEveryDownloadChecksTheRequest: each download of ichor.Downloads
// refuses a dry run, asks the download verb on its subresource for the
// requester and, when allowed, hands out a download of its object as its
// content type.
func TestEveryDownloadChecksTheRequest(t *testing.T) {
	for _, d := range ichor.Downloads {
		t.Run(d.Path(), func(t *testing.T) {
			var asked []authorizer.Attributes
			allow := authorizer.DecisionAllow
			deps := Deps{
				Clusters: objects{"c1": rotatedCluster()},
				Machines: objects{"cp-1": configuredControlPlane()},
				Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
					asked = append(asked, a)
					return allow, "", nil
				}),
			}
			s, ok := Storage(deps)[d.Path()].(rest.GetterWithOptions)
			if !ok {
				t.Fatal("no endpoint serves it")
			}
			name := map[string]string{"talosmachines": "cp-1", "talosclusters": "c1"}[d.Resource]
			ctx := genericapirequest.WithNamespace(genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"}), "ns")
			get := func(dryRun bool) (runtime.Object, error) {
				options, _, _ := s.NewGetOptions()
				switch o := options.(type) {
				case *ichor.DownloadOptions:
					if dryRun {
						o.DryRun = []string{metav1.DryRunAll}
					}
				case *ichor.PacketCaptureOptions:
					o.Interface = "eth0"
					if dryRun {
						o.DryRun = []string{metav1.DryRunAll}
					}
				default:
					t.Fatalf("options %T", options)
				}
				return s.Get(ctx, name, options)
			}

			if _, err := get(true); !apierrors.IsBadRequest(err) {
				t.Errorf("a dry run: %v, want it refused", err)
			}
			if len(asked) != 0 {
				t.Errorf("a refused dry run asked the authorizer %v", asked)
			}

			obj, err := get(false)
			if err != nil {
				t.Fatalf("an allowed download: %v", err)
			}
			if len(asked) != 1 {
				t.Fatalf("asked the authorizer %d times", len(asked))
			}
			if a := asked[0]; a.GetVerb() != ichor.VerbDownload || a.GetResource() != d.Resource || a.GetSubresource() != d.Subresource ||
				a.GetName() != name || a.GetNamespace() != "ns" || a.GetUser().GetName() != "alice" || a.GetAPIGroup() != ichor.GroupName {
				t.Errorf("asked %+v", a)
			}
			dl, ok := obj.(*download)
			if !ok {
				t.Fatalf("Get returned %T", obj)
			}
			if dl.user != "alice" || dl.contentType != d.ContentType || dl.object.Name != name ||
				dl.object.Kind != reflect.TypeOf(objectOf[d.Resource]).Elem().Name() || !strings.Contains(dl.what, name) || dl.open == nil {
				t.Errorf("the download is %+v of %+v", dl, dl.object)
			}

			allow = authorizer.DecisionDeny
			if _, err := get(false); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `the "download" verb on resource "`+d.Resource+`", subresource "`+d.Subresource+`"`) {
				t.Errorf("a denied download: %v", err)
			}
		})
	}
}

// rotatedCluster is a cluster whose new admin credentials wait to be taken.
func rotatedCluster() *ichor.TalosCluster {
	c := &ichor.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns"}}
	c.Status.Credentials = &ichor.ClusterCredentialsStatus{Rotation: "rotate-1"}
	c.Status.KubernetesCA = "ca"
	return c
}

// configuredControlPlane is a control plane of cluster c1 that runs its config.
func configuredControlPlane() *ichor.TalosMachine {
	m := &ichor.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: "ns"}}
	m.Spec.ClusterName, m.Spec.Role, m.Spec.Address = "c1", ichor.MachineRoleControlPlane, "10.0.0.1"
	m.Status.AppliedConfig = &ichor.AppliedConfigStatus{}
	m.Status.Approval = &ichor.ApprovalStatus{Decision: ichor.ApprovalApproved}
	return m
}

// objects is a store of machines or clusters by name.
type objects map[string]runtime.Object

func (o objects) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if obj, ok := o[name]; ok {
		return obj, nil
	}
	return nil, errors.New("not found")
}

func (o objects) NewList() runtime.Object { return &ichor.TalosMachineList{} }

func (o objects) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	list := &ichor.TalosMachineList{}
	for _, obj := range o {
		list.Items = append(list.Items, *obj.(*ichor.TalosMachine))
	}
	return list, nil
}

func (o objects) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, errors.New("not a table")
}
