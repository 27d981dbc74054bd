package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"ichor.dev/ichor/test/internal/proc"
)

// IchorReplicas is how many ichor-apiservers the HA shape runs, and
// IchorEtcdMembers how many members their etcd cluster has: what
// artifacts/ha installs.
const (
	IchorReplicas    = 2
	IchorEtcdMembers = 3
)

// haShape is ichor-apiserver as artifacts/ha runs it: IchorReplicas
// processes of the binary behind one Service, sharing an etcd cluster of
// IchorEtcdMembers members of its own (TLS, client certificates), apart
// from the management cluster's.
type haShape struct {
	members  []proc.EtcdMember
	etcd     []*proc.Process
	replicas []*ichorReplica
	svc      *service
}

// ichorReplica is one ichor-apiserver of the HA shape.
type ichorReplica struct {
	addr string
	args []string
	proc *proc.Process
}

func (h *haShape) etcdServers() string {
	urls := make([]string, 0, len(h.members))
	for _, m := range h.members {
		urls = append(urls, m.ClientURL)
	}
	return strings.Join(urls, ",")
}

// startHA starts the HA shape's etcd cluster, its replicas and the Service
// in front of them, whose address becomes IchorURL.
func (cp *ControlPlane) startHA(ctx context.Context, opts Options) error {
	if opts.IchorBinary == "" {
		return fmt.Errorf("the HA shape runs ichor-apiserver as processes: set IchorBinary")
	}
	ports, err := proc.FreePorts("127.0.0.1", 2*IchorEtcdMembers+IchorReplicas+1)
	if err != nil {
		return err
	}
	h := &haShape{}
	cp.ha = h
	for i := range IchorEtcdMembers {
		name := "ichor-etcd-" + strconv.Itoa(i)
		h.members = append(h.members, proc.EtcdMember{
			Name: name, DataDir: filepath.Join(cp.Dir, name),
			ClientURL: "https://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "https://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
		})
	}
	h.etcd = make([]*proc.Process, IchorEtcdMembers)
	// The members start together: none is healthy before a quorum is.
	for i := range h.members {
		if err := cp.startEtcdMember(i); err != nil {
			return err
		}
	}
	for i := range h.members {
		if err := cp.waitEtcdMember(ctx, i); err != nil {
			return err
		}
	}

	var backends []string
	for i := range IchorReplicas {
		port := ports[2*IchorEtcdMembers+i]
		args, err := cp.ichorArgs(port, filepath.Join(cp.Dir, fmt.Sprintf("ichor-audit-%d.log", i)), opts)
		if err != nil {
			return err
		}
		r := &ichorReplica{addr: "127.0.0.1:" + strconv.Itoa(port), args: append([]string{opts.IchorBinary}, args...)}
		h.replicas = append(h.replicas, r)
		backends = append(backends, r.addr)
	}
	for i := range h.replicas {
		if err := cp.StartIchorReplica(ctx, i); err != nil {
			return err
		}
	}
	cp.AuditLog = filepath.Join(cp.Dir, "ichor-audit-0.log")
	svcAddr := "127.0.0.1:" + strconv.Itoa(ports[len(ports)-1])
	if h.svc, err = startService(svcAddr, backends); err != nil {
		return err
	}
	cp.IchorURL = "https://" + svcAddr
	return nil
}

func (cp *ControlPlane) startEtcdMember(i int) error {
	f, h := cp.files, cp.ha
	p, err := proc.Start(cp.Dir, h.members[i].Name, cp.bin("etcd"),
		proc.EtcdMemberArgs(h.members[i], h.members, f.etcdCA, f.etcdServerCert, f.etcdServerKey)...)
	if err != nil {
		return err
	}
	h.etcd[i] = p
	return nil
}

func (cp *ControlPlane) waitEtcdMember(ctx context.Context, i int) error {
	f, h := cp.files, cp.ha
	client, err := tlsClient(f.etcdCA, f.etcdClientCert, f.etcdClientKey)
	if err != nil {
		return err
	}
	cp.logf("waiting for %s at %s", h.members[i].Name, h.members[i].ClientURL)
	return proc.WaitHealthy(ctx, h.etcd[i], client, h.members[i].ClientURL+"/health", startTimeout)
}

// HA reports whether the control plane runs the HA shape.
func (cp *ControlPlane) HA() bool { return cp.ha != nil }

// StopIchorEtcdMember stops member i of the HA shape's etcd cluster
// gracefully.
func (cp *ControlPlane) StopIchorEtcdMember(i int) error {
	return cp.ha.etcd[i].Stop(10 * time.Second)
}

// StartIchorEtcdMember starts member i again, with its data, and waits
// until it is healthy.
func (cp *ControlPlane) StartIchorEtcdMember(ctx context.Context, i int) error {
	if err := cp.startEtcdMember(i); err != nil {
		return err
	}
	return cp.waitEtcdMember(ctx, i)
}

// KillIchorReplica kills ichor-apiserver replica i at once (SIGKILL): its
// open connections break, as a pod's do when its node fails.
func (cp *ControlPlane) KillIchorReplica(i int) {
	cp.ha.replicas[i].proc.Kill()
}

// StartIchorReplica starts replica i (again) and waits until it is ready.
func (cp *ControlPlane) StartIchorReplica(ctx context.Context, i int) error {
	r := cp.ha.replicas[i]
	p, err := proc.Start(cp.Dir, fmt.Sprintf("ichor-apiserver-%d", i), r.args[0], r.args[1:]...)
	if err != nil {
		return err
	}
	r.proc = p
	client, err := tlsClient(cp.files.ichorCA, "", "")
	if err != nil {
		return err
	}
	cp.logf("waiting for ichor-apiserver replica %d at %s", i, r.addr)
	return proc.WaitHealthy(ctx, p, client, "https://"+r.addr+"/readyz", startTimeout)
}

// IchorReplicaConnections counts the Service's open connections to
// replica i: which replica the aggregator's requests go to.
func (cp *ControlPlane) IchorReplicaConnections(i int) int {
	return cp.ha.svc.connections(cp.ha.replicas[i].addr)
}

// stop stops the replicas, the Service and the etcd members.
func (h *haShape) stop() {
	if h == nil {
		return
	}
	var wg sync.WaitGroup
	for _, r := range h.replicas {
		if r.proc != nil {
			wg.Go(func() { _ = r.proc.Stop(15 * time.Second) })
		}
	}
	wg.Wait()
	if h.svc != nil {
		h.svc.close()
	}
	for _, p := range h.etcd {
		if p != nil {
			wg.Go(func() { _ = p.Stop(10 * time.Second) })
		}
	}
	wg.Wait()
}
