// Package admission is the one place that names Ichor's admission plugins,
// registers them and fixes their order in the chain. The plugins themselves
// live in pkg/admission/plugin/<name>.
package admission

import (
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/admission/plugin/backupbounds"
	"ichor.dev/ichor/pkg/admission/plugin/controlplanequorum"
	"ichor.dev/ichor/pkg/admission/plugin/customverbs"
	"ichor.dev/ichor/pkg/admission/plugin/machineaddresses"
	"ichor.dev/ichor/pkg/admission/plugin/managementaudiences"
	"ichor.dev/ichor/pkg/admission/plugin/patchclasses"
	"ichor.dev/ichor/pkg/admission/plugin/provisioningnetworks"
	"ichor.dev/ichor/pkg/admission/plugin/userroles"
)

// plugin is one of Ichor's admission plugins.
type plugin struct {
	name     string
	register func(*admission.Plugins)
}

// plugins are Ichor's own plugins in the order they run, after the generic
// server's built-in ones (NamespaceLifecycle and the admission webhooks).
var plugins = []plugin{
	// Custom verbs of action subresources (approve, …), against the stored object.
	{customverbs.PluginName, customverbs.Register},
	// TalosMachine addresses stay inside the provisioning networks, but by an admin's decision.
	{provisioningnetworks.PluginName, provisioningnetworks.Register},
	// One TalosMachine per node address, across namespaces.
	{machineaddresses.PluginName, machineaddresses.Register},
	// TalosConfigPatches never touch the secrets bundle; privileged ones are admins'.
	{patchclasses.PluginName, patchclasses.Register},
	// No managed cluster trusts an audience the management plane accepts.
	{managementaudiences.PluginName, managementaudiences.Register},
	// A control plane is not deleted when its cluster's etcd would lose quorum.
	{controlplanequorum.PluginName, controlplanequorum.Register},
	// A cluster's hand-made backups are bounded, in flight and kept.
	{backupbounds.PluginName, backupbounds.Register},
	// IchorUsers grant only roles below the requester's; an admin always remains.
	{userroles.PluginName, userroles.Register},
}

// OrderedPlugins returns the names of Ichor's plugins in chain order.
func OrderedPlugins() []string {
	names := make([]string, len(plugins))
	for i, p := range plugins {
		names[i] = p.name
	}
	return names
}

// Register adds every Ichor plugin to the registry the server's admission options use.
func Register(registry *admission.Plugins) {
	for _, p := range plugins {
		p.register(registry)
	}
}
