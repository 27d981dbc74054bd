// Package render turns a TalosCluster, one of its TalosMachines, the cluster's
// TalosConfigPatches and its secrets bundle into the machine config that machine
// should run, and tells how disruptive a change between two rendered configs is.
//
// Rendering is deterministic: the same inputs give byte-identical output and the
// same SHA-256, so a hash in TalosMachine status says exactly which config a node
// holds, and a controller restart never mistakes an unchanged config for a new one.
//
// # Patch order
//
// The base config comes from machinery's generator. Patches that target the
// machine are then applied one after the other, so a later patch wins where two
// set the same field:
//
//  1. cluster-wide patches (empty target),
//  2. role patches (target.role equal to the machine's role),
//  3. machine patches (target.machines naming the machine, or target.selector
//     matching its labels),
//
// and inside each group by ascending spec.priority, then by name. Disabled
// patches and patches of other clusters or namespaces are skipped. A patch is a
// Talos strategic-merge patch or a JSON6902 patch, as machinery's configpatcher
// accepts them; JSON6902 paths address the v1alpha1 document.
//
// # Failure
//
// Rendering either returns a complete, validated config or an error and nothing
// else: a *PatchError names the patch that could not be read, could not be
// applied, or left the config invalid; an *InputError names the cluster or
// machine field at fault.
package render
