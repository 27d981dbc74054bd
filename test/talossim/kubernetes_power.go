package talossim

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/config"
)

// A cluster's control plane runs on its control-plane nodes: when a majority of the control planes a
// cluster has had are powered off, etcd has lost its quorum and the cluster's Kubernetes API is down, so
// Kubernetes stops the cluster's processes (their data stays), and starts them again from the same data
// once a majority runs again, as a cluster shut down and powered on comes back. A control plane wiped
// back to maintenance mode has left: it no longer counts. Reboots and upgrades are not modelled as
// downtime: the control plane keeps running through them.

// controlPlanePower is the power state of one cluster's control-plane nodes.
type controlPlanePower struct {
	on map[string]bool // by node address; every control plane that ever booted
	// parked is the control plane stopped for lack of a quorum, to start again from its directory.
	parked *kubeRun
}

func (p *controlPlanePower) quorum() bool {
	up := 0
	for _, on := range p.on {
		if on {
			up++
		}
	}

	return up >= len(p.on)/2+1
}

// controlPlaneOn records that the control-plane node at addr, configured with cfg, booted; it starts
// the cluster's parked control plane again once a majority of its control planes runs.
func (k *Kubernetes) controlPlaneOn(cfg config.Provider, addr string) {
	ep := clusterEndpoint(cfg)
	if ep == nil {
		return
	}

	endpoint := ep.String()

	k.mu.Lock()
	defer k.mu.Unlock()

	p := k.powerLocked(endpoint)
	p.on[addr] = true

	old := p.parked
	if k.stopped || old == nil || !p.quorum() || k.runs[endpoint] != nil {
		return
	}

	p.parked = nil
	ctx, cancel := context.WithCancel(context.Background())
	r := newKubeRun(old.ca, cancel, old.dir)
	k.runs[endpoint] = r
	k.notifyLocked()
	k.logf("talossim: a majority of the control planes of %s runs again; starting its control plane from its data", endpoint)

	go func() {
		<-old.done
		k.start(ctx, r, cfg, r.dir)
	}()
}

// controlPlaneOff records that the control-plane node at addr of the cluster at endpoint powered off;
// once a majority of its control planes is off, the cluster's control plane stops and is parked.
func (k *Kubernetes) controlPlaneOff(endpoint, addr string) {
	k.mu.Lock()
	defer k.mu.Unlock()

	k.powerLocked(endpoint).on[addr] = false
	k.parkWithoutQuorumLocked(endpoint)
}

// controlPlaneLeft records that the node at addr is no longer a control plane of the cluster at
// endpoint (it was wiped): it no longer counts towards the majority.
func (k *Kubernetes) controlPlaneLeft(endpoint, addr string) {
	k.mu.Lock()
	defer k.mu.Unlock()

	delete(k.powerLocked(endpoint).on, addr)
	k.parkWithoutQuorumLocked(endpoint)
}

// parkWithoutQuorumLocked stops and parks the cluster's control plane at endpoint when a majority of
// its control planes is not running.
func (k *Kubernetes) parkWithoutQuorumLocked(endpoint string) {
	p := k.powerLocked(endpoint)
	r := k.runs[endpoint]
	if r == nil || p.quorum() {
		return
	}

	k.logf("talossim: a majority of the control planes of %s is powered off; stopping its control plane", endpoint)
	r.cancel()
	delete(k.runs, endpoint)
	p.parked = r
	k.notifyLocked()
}

func (k *Kubernetes) powerLocked(endpoint string) *controlPlanePower {
	if k.power == nil {
		k.power = map[string]*controlPlanePower{}
	}

	p := k.power[endpoint]
	if p == nil {
		p = &controlPlanePower{on: map[string]bool{}}
		k.power[endpoint] = p
	}

	return p
}
