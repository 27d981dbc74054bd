// Package registry maps every resource path of the ichor.dev API to its REST storage.
package registry

import (
	"maps"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	restclient "k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/registry/ichor/download"
	"ichor.dev/ichor/pkg/registry/ichor/ichorinstallation"
	"ichor.dev/ichor/pkg/registry/ichor/ichoruser"
	"ichor.dev/ichor/pkg/registry/ichor/machinereclaim"
	"ichor.dev/ichor/pkg/registry/ichor/override"
	"ichor.dev/ichor/pkg/registry/ichor/talosbackup"
	"ichor.dev/ichor/pkg/registry/ichor/taloscluster"
	"ichor.dev/ichor/pkg/registry/ichor/talosconfigpatch"
	"ichor.dev/ichor/pkg/registry/ichor/taloscredentialrequest"
	"ichor.dev/ichor/pkg/registry/ichor/talosmachine"
	"ichor.dev/ichor/pkg/registry/ichor/talosoperation"
	"ichor.dev/ichor/pkg/registry/resource"
	"ichor.dev/ichor/pkg/talos"
)

// Deps are what storage needs beyond etcd.
type Deps struct {
	// Recorder records the Events of actions and downloads; nil records none.
	Recorder events.EventRecorder
	// Authorizer decides the custom verbs that storage checks itself: those
	// of downloads, which no admission sees, and those of actions, asked of
	// the object the update changes.
	Authorizer authorizer.Authorizer
	// Loopback is the server's client configuration of its own API, for
	// the TalosCredentialRequests of downloads.
	Loopback *restclient.Config
	// Uploads reaches ichor-controller's upload endpoint; nil refuses uploads.
	Uploads *talosbackup.Forwarder
}

// V1alpha1 returns the storage of every v1alpha1 resource path.
func V1alpha1(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, deps Deps) (map[string]rest.Storage, error) {
	recorder := deps.Recorder
	kindDeps := resource.Deps{Recorder: recorder, Authorizer: deps.Authorizer}
	var firstErr error
	build := func(s *resource.Storage, err error) *resource.Storage {
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return s
	}
	gv := v1alpha1.SchemeGroupVersion
	clusters := build(resource.NewStorage(taloscluster.Definition, scheme, gv, optsGetter, kindDeps))
	machines := build(resource.NewStorage(talosmachine.Definition, scheme, gv, optsGetter, kindDeps))
	patches := build(resource.NewStorage(talosconfigpatch.Definition, scheme, gv, optsGetter, kindDeps))
	operations := build(resource.NewStorage(talosoperation.Definition, scheme, gv, optsGetter, kindDeps))
	credentials := build(resource.NewStorage(taloscredentialrequest.Definition, scheme, gv, optsGetter, kindDeps))
	reclaims := build(resource.NewStorage(machinereclaim.Definition, scheme, gv, optsGetter, kindDeps))
	users := build(resource.NewStorage(ichoruser.Definition, scheme, gv, optsGetter, kindDeps))
	backups := build(resource.NewStorage(talosbackup.Definition, scheme, gv, optsGetter, kindDeps))
	installations := build(resource.NewStorage(ichorinstallation.Definition, scheme, gv, optsGetter, kindDeps))
	if firstErr != nil {
		return nil, firstErr
	}

	downloads := download.Deps{
		Clusters: clusters.Store, Machines: machines.Store, Authorizer: deps.Authorizer, Credentials: &download.Credentials{Loopback: deps.Loopback},
		Dialer: talos.Machinery{}, Recorder: recorder,
	}
	storage := map[string]rest.Storage{
		"talosclusters":                    clusters.Store,
		"talosclusters/status":             clusters.Status,
		"talosclusters/cilium-values":      clusters.Subresources["cilium-values"],
		"talosclusters/secret-references":  clusters.Subresources["secret-references"],
		"talosclusters/authentication":     clusters.Subresources["authentication"],
		"talosclusters/kubernetes-version": clusters.Subresources["kubernetes-version"],
		"talosclusters/backup":             clusters.Subresources["backup"],
		"talosclusters/installer-image":    clusters.Subresources["installer-image"],
		"talosclusters/schematic":          clusters.Subresources["schematic"],
		"talosclusters/override":           clusters.Actions[override.Subresource],
		"talosmachines":                    machines.Store,
		"talosmachines/status":             machines.Status,
		"talosmachines/approval":           machines.Subresources[talosmachine.ApprovalSubresource],
		"talosmachines/finalizers":         machines.Subresources["finalizers"],
		"talosmachines/schematic":          machines.Subresources["schematic"],
		"talosmachines/override":           machines.Actions[override.Subresource],
		"talosconfigpatches":               patches.Store,
		"talosconfigpatches/status":        patches.Status,
		"talosconfigpatches/override":      patches.Actions[override.Subresource],
		"talosoperations":                  operations.Store,
		"talosoperations/status":           operations.Status,
		"talosoperations/start":            operations.Actions[talosoperation.StartSubresource],
		"talosoperations/finalizers":       operations.Subresources["finalizers"],
		"taloscredentialrequests":          credentials.Store,
		"taloscredentialrequests/status":   credentials.Status,
		"machinereclaims":                  reclaims.Store,
		"machinereclaims/status":           reclaims.Status,
		"machinereclaims/reclaim":          reclaims.Actions[machinereclaim.ReclaimSubresource],
		"talosbackups":                     backups.Store,
		"talosbackups/status":              backups.Status,
		"talosbackups/finalizers":          backups.Subresources["finalizers"],
		"talosbackups/schedule":            backups.Subresources["schedule"],
		"talosbackups/upload":              &talosbackup.UploadREST{Backups: backups.Store, Forwarder: deps.Uploads},
		"ichorusers":                       users.Store,
		"ichorusers/status":                users.Status,
		"ichorusers/password":              users.Actions[ichoruser.PasswordSubresource],
		"ichorusers/login":                 users.Actions[ichoruser.LoginSubresource],
		"ichorinstallations":               installations.Store,
		"ichorinstallations/status":        installations.Status,
		"ichorinstallations/version":       installations.Subresources["version"],
		"ichorinstallations/settings":      installations.Subresources["settings"],
	}
	maps.Copy(storage, download.Storage(downloads))
	return storage, nil
}
