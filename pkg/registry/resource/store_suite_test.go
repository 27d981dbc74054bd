package resource_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistrytest "k8s.io/apiserver/pkg/registry/generic/testing"
	etcd3testing "k8s.io/apiserver/pkg/storage/etcd3/testing"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/registry/ichor/ichoruser"
	"ichor.dev/ichor/pkg/registry/ichor/machinereclaim"
	"ichor.dev/ichor/pkg/registry/ichor/taloscluster"
	"ichor.dev/ichor/pkg/registry/ichor/talosconfigpatch"
	"ichor.dev/ichor/pkg/registry/ichor/taloscredentialrequest"
	"ichor.dev/ichor/pkg/registry/ichor/talosmachine"
	"ichor.dev/ichor/pkg/registry/ichor/talosoperation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// The generic registry's conformance suites (k8s.io/apiserver's
// registry/generic/testing) against each kind's store on a real etcd: create,
// update, delete, get, list and watch behave as for any Kubernetes resource.

// optsGetter serves resources from one etcd, under a prefix of their own:
// each suite expects a store with no objects yet.
type optsGetter struct {
	config *storagebackend.Config
	prefix string
}

func (o optsGetter) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{
		StorageConfig:           o.config.ForResource(resource),
		Decorator:               generic.UndecoratedStorage,
		DeleteCollectionWorkers: 1,
		ResourcePrefix:          o.prefix + "/" + resource.Group + "/" + resource.Resource,
	}, nil
}

func newEtcd(t *testing.T) optsGetter {
	t.Helper()
	server, config := etcd3testing.NewUnsecuredEtcd3TestClientServer(t)
	t.Cleanup(func() { server.Terminate(t) })
	config.Codec = apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)
	return optsGetter{config: config}
}

// store returns a function that makes a tester of a new, empty store of def.
func store[T resource.Object](t *testing.T, def *resource.Definition[T], opts optsGetter) func() *genericregistrytest.Tester {
	n := 0
	return func() *genericregistrytest.Tester {
		t.Helper()
		n++
		opts.prefix = fmt.Sprintf("%s-%d", t.Name(), n)
		return newTester(t, def, opts)
	}
}

func newTester[T resource.Object](t *testing.T, def *resource.Definition[T], opts optsGetter) *genericregistrytest.Tester {
	t.Helper()
	s, err := resource.NewStorage(def, apiserver.Scheme, v1alpha1.SchemeGroupVersion, opts, resource.Deps{Authorizer: allowAll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Store.Destroy)
	tester := genericregistrytest.New(t, s.Store.Store)
	if !def.NamespaceScoped {
		tester = tester.ClusterScope()
	}
	return tester
}

func cluster() *ichor.TalosCluster {
	return &ichor.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "alpha", Labels: map[string]string{"team": "a"}},
		Spec: ichor.TalosClusterSpec{TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
			ControlPlane: ichor.ControlPlaneSpec{Endpoint: "https://10.5.0.2:6443"},
			// What the versioned API's defaults fill in.
			Network: ichor.ClusterNetwork{PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/12"},
				DNSDomain: "cluster.local", CNI: ichor.CNISpec{Name: ichor.CNIFlannel}}},
	}
}

func TestStoreSuites(t *testing.T) {
	opts := newEtcd(t)

	t.Run("TalosCluster", func(t *testing.T) {
		tester := store(t, taloscluster.Definition, opts)
		invalid := cluster()
		invalid.Spec.TalosVersion = "latest"
		tester().TestCreate(cluster(), invalid)
		tester().TestUpdate(cluster(),
			func(o runtime.Object) runtime.Object { c := o.(*ichor.TalosCluster); c.Spec.Paused = true; return c },
			func(o runtime.Object) runtime.Object {
				c := o.(*ichor.TalosCluster)
				c.Spec.ControlPlane.Endpoint = "not a url"
				return c
			})
		tester().TestDelete(cluster())
		tester().TestGet(cluster())
		tester().TestList(cluster())
		tester().TestWatch(cluster(),
			[]labels.Set{{"team": "a"}}, []labels.Set{{"team": "b"}},
			[]fields.Set{{"metadata.name": "alpha"}}, []fields.Set{{"metadata.name": "beta"}, {"status.phase": "Ready"}})
	})

	t.Run("TalosMachine", func(t *testing.T) {
		machine := func() *ichor.TalosMachine {
			return &ichor.TalosMachine{
				ObjectMeta: metav1.ObjectMeta{Name: "m1"},
				Spec: ichor.TalosMachineSpec{ClusterName: "alpha", Role: ichor.MachineRoleWorker, Address: "10.5.0.10:50000",
					Install: ichor.InstallSpec{Disk: "/dev/sda"}},
			}
		}
		tester := store(t, talosmachine.Definition, opts)
		invalid := machine()
		invalid.Spec.Address = "no port"
		tester().TestCreate(machine(), invalid)
		tester().TestUpdate(machine(),
			func(o runtime.Object) runtime.Object {
				m := o.(*ichor.TalosMachine)
				m.Spec.Install.Disk = "/dev/vda"
				return m
			},
			func(o runtime.Object) runtime.Object {
				m := o.(*ichor.TalosMachine)
				m.Spec.ClusterName = "beta"
				return m
			})
		tester().TestDelete(machine())
		tester().TestGet(machine())
		tester().TestList(machine())
	})

	t.Run("TalosConfigPatch", func(t *testing.T) {
		patch := func() *ichor.TalosConfigPatch {
			return &ichor.TalosConfigPatch{
				ObjectMeta: metav1.ObjectMeta{Name: "p1"},
				Spec:       ichor.TalosConfigPatchSpec{ClusterName: "alpha", Patch: "machine:\n  sysctls:\n    net.core.somaxconn: \"65535\"\n"},
			}
		}
		tester := store(t, talosconfigpatch.Definition, opts)
		invalid := patch()
		invalid.Spec.Patch = "- not a mapping"
		tester().TestCreate(patch(), invalid)
		tester().TestUpdate(patch(),
			func(o runtime.Object) runtime.Object { p := o.(*ichor.TalosConfigPatch); p.Spec.Priority = 5; return p },
			func(o runtime.Object) runtime.Object { p := o.(*ichor.TalosConfigPatch); p.Spec.Patch = ""; return p })
		tester().TestDelete(patch())
		tester().TestGet(patch())
		tester().TestList(patch())
	})

	t.Run("TalosOperation", func(t *testing.T) {
		operation := func() *ichor.TalosOperation {
			return &ichor.TalosOperation{
				ObjectMeta: metav1.ObjectMeta{Name: "o1"},
				Spec:       ichor.TalosOperationSpec{ClusterName: "alpha", Type: ichor.OperationEtcdDefrag},
			}
		}
		tester := store(t, talosoperation.Definition, opts)
		invalid := operation()
		invalid.Spec.Type = "format-disks"
		tester().TestCreate(operation(), invalid)
		tester().TestDelete(operation())
		tester().TestGet(operation())
		tester().TestList(operation())
	})

	t.Run("MachineReclaim", func(t *testing.T) {
		reclaim := func() *ichor.MachineReclaim {
			return &ichor.MachineReclaim{
				ObjectMeta: metav1.ObjectMeta{Name: "r1"},
				Spec: ichor.MachineReclaimSpec{ClusterName: "alpha", MachineRef: &ichor.MachineReference{Namespace: "elsewhere", Name: "m1"},
					Role: ichor.MachineRoleWorker},
			}
		}
		tester := store(t, machinereclaim.Definition, opts)
		invalid := reclaim()
		invalid.Spec.MachineRef = nil
		tester().TestCreate(reclaim(), invalid)
		tester().TestDelete(reclaim())
		tester().TestGet(reclaim())
		tester().TestList(reclaim())
	})

	t.Run("TalosCredentialRequest", func(t *testing.T) {
		key := rsaPublicKey(t)
		request := func() *ichor.TalosCredentialRequest {
			return &ichor.TalosCredentialRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "c1"},
				Spec:       ichor.TalosCredentialRequestSpec{ClusterName: "alpha", Purpose: ichor.PurposeTalosconfigReader, PublicKey: key},
			}
		}
		tester := store(t, taloscredentialrequest.Definition, opts)
		withRequester := func() *genericregistrytest.Tester {
			tt := tester()
			tt.SetUserInfo(&user.DefaultInfo{Name: "olivia", Groups: []string{ichor.GroupOperator}})
			return tt
		}
		invalid := request()
		invalid.Spec.Purpose = "root-shell"
		withRequester().TestCreate(request(), invalid)
		withRequester().TestDelete(request())
		// Get and List create their objects without a requester, which a
		// credential request cannot have: Create and Delete cover its store.
	})

	t.Run("IchorUser", func(t *testing.T) {
		user := func() *ichor.IchorUser {
			return &ichor.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: "dana"}, Spec: ichor.IchorUserSpec{Role: ichor.UserRoleViewer}}
		}
		tester := store(t, ichoruser.Definition, opts)
		invalid := user()
		invalid.Spec.Role = "root"
		tester().TestCreate(user(), invalid)
		tester().TestUpdate(user(),
			func(o runtime.Object) runtime.Object {
				u := o.(*ichor.IchorUser)
				u.Spec.DisplayName = "Dana"
				return u
			},
			func(o runtime.Object) runtime.Object { u := o.(*ichor.IchorUser); u.Spec.Role = "root"; return u })
		tester().TestDelete(user())
		tester().TestGet(user())
		tester().TestList(user())
	})
}

// allowAll lets every action's verb through: the suites exercise the store,
// not the authorization (which the integration tests do through RBAC).
var allowAll = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
})

// rsaPublicKey is a PEM RSA public key a credential request may carry.
func rsaPublicKey(t *testing.T) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}
