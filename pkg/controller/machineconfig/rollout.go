package machineconfig

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/controller/clusterindex"
	"ichor.dev/ichor/pkg/render"
)

// serialized says whether a change of effect e to a machine of role must
// wait until every other machine of its cluster is Ready: a reboot takes the
// node away, so at most one node reboots at a time; an API server restart
// takes a control plane's API server away, so control planes take it one
// at a time and etcd and the Kubernetes API keep their quorum.
func serialized(e v1alpha1.ConfigEffect, role v1alpha1.MachineRole) bool {
	return e == v1alpha1.ConfigEffectReboot ||
		(e == v1alpha1.ConfigEffectAPIServerRestart && role == v1alpha1.MachineRoleControlPlane)
}

// busyMachines are the machines of m's cluster, other than m, that are
// approved but not Ready: while there are any, a serialized change waits.
func busyMachines(m *v1alpha1.TalosMachine, all []v1alpha1.TalosMachine) []string {
	var busy []string
	for i := range all {
		o := &all[i]
		if o.Name == m.Name || o.Spec.ClusterName != m.Spec.ClusterName || !clusterindex.Member(o) {
			continue
		}
		if o.Status.Phase != v1alpha1.MachinePhaseReady {
			busy = append(busy, fmt.Sprintf("%s (%s)", o.Name, o.Status.Phase))
		}
	}
	slices.Sort(busy)
	return busy
}

// clusterLocks serialize rollout decisions per cluster inside one
// controller process: the decision to reboot a node and the status that
// records it happen under the cluster's lock, so a second decision sees
// the first.
type clusterLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (l *clusterLocks) lock(key string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[key]
	if !ok {
		m = &sync.Mutex{}
		l.locks[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// describe summarises a change for an Event: its effect and the fields it touches.
func describe(effect v1alpha1.ConfigEffect, changes []render.Change) string {
	const maxPaths = 5
	paths := make([]string, 0, min(len(changes), maxPaths))
	for i, c := range changes {
		if i == maxPaths {
			paths = append(paths, fmt.Sprintf("and %d more", len(changes)-maxPaths))
			break
		}
		paths = append(paths, c.Path)
	}
	if len(paths) == 0 {
		return string(effect)
	}
	return fmt.Sprintf("%s: %s", effect, strings.Join(paths, ", "))
}
