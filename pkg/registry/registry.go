// Package registry maps every resource path of the ichor.dev API to its REST storage.
package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/events"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/registry/ichor/ichorinstallation"
	"ichor.dev/ichor/pkg/registry/ichor/ichoruser"
	"ichor.dev/ichor/pkg/registry/ichor/machinereclaim"
	"ichor.dev/ichor/pkg/registry/ichor/override"
	"ichor.dev/ichor/pkg/registry/ichor/taloscluster"
	"ichor.dev/ichor/pkg/registry/ichor/talosconfigpatch"
	"ichor.dev/ichor/pkg/registry/ichor/taloscredentialrequest"
	"ichor.dev/ichor/pkg/registry/ichor/talosmachine"
	"ichor.dev/ichor/pkg/registry/ichor/talosoperation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// V1alpha1 returns the storage of every v1alpha1 resource path. recorder
// records the Events of actions (start, reclaim, override).
func V1alpha1(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, recorder events.EventRecorder) (map[string]rest.Storage, error) {
	var firstErr error
	build := func(s *resource.Storage, err error) *resource.Storage {
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return s
	}
	gv := v1alpha1.SchemeGroupVersion
	clusters := build(resource.NewStorage(taloscluster.Definition, scheme, gv, optsGetter, recorder))
	machines := build(resource.NewStorage(talosmachine.Definition, scheme, gv, optsGetter, recorder))
	patches := build(resource.NewStorage(talosconfigpatch.Definition, scheme, gv, optsGetter, recorder))
	operations := build(resource.NewStorage(talosoperation.Definition, scheme, gv, optsGetter, recorder))
	credentials := build(resource.NewStorage(taloscredentialrequest.Definition, scheme, gv, optsGetter, recorder))
	reclaims := build(resource.NewStorage(machinereclaim.Definition, scheme, gv, optsGetter, recorder))
	users := build(resource.NewStorage(ichoruser.Definition, scheme, gv, optsGetter, recorder))
	installations := build(resource.NewStorage(ichorinstallation.Definition, scheme, gv, optsGetter, recorder))
	if firstErr != nil {
		return nil, firstErr
	}

	return map[string]rest.Storage{
		"talosclusters":                   clusters.Store,
		"talosclusters/status":            clusters.Status,
		"talosclusters/cilium-values":     clusters.Subresources["cilium-values"],
		"talosclusters/secret-references": clusters.Subresources["secret-references"],
		"talosclusters/authentication":    clusters.Subresources["authentication"],
		"talosclusters/override":          clusters.Actions[override.Subresource],
		"talosmachines":                   machines.Store,
		"talosmachines/status":            machines.Status,
		"talosmachines/approval":          machines.Subresources[talosmachine.ApprovalSubresource],
		"talosmachines/override":          machines.Actions[override.Subresource],
		"talosconfigpatches":              patches.Store,
		"talosconfigpatches/status":       patches.Status,
		"talosconfigpatches/override":     patches.Actions[override.Subresource],
		"talosoperations":                 operations.Store,
		"talosoperations/status":          operations.Status,
		"talosoperations/start":           operations.Actions[talosoperation.StartSubresource],
		"taloscredentialrequests":         credentials.Store,
		"taloscredentialrequests/status":  credentials.Status,
		"machinereclaims":                 reclaims.Store,
		"machinereclaims/status":          reclaims.Status,
		"machinereclaims/reclaim":         reclaims.Actions[machinereclaim.ReclaimSubresource],
		"ichorusers":                      users.Store,
		"ichorusers/status":               users.Status,
		"ichorusers/password":             users.Actions[ichoruser.PasswordSubresource],
		"ichorinstallations":              installations.Store,
		"ichorinstallations/status":       installations.Status,
		"ichorinstallations/version":      installations.Subresources["version"],
		"ichorinstallations/settings":     installations.Subresources["settings"],
	}, nil
}
