// Package mgmtnode is a node of the test management cluster. It registers
// a Node and keeps its lease, and runs each Pod the scheduler binds to it
// as a kubelet would: every container from its image in an OCI layout (what
// `make images` writes), in runc, with the command, arguments, environment,
// user, security context, volumes and memory limit of the pod spec; its
// probes decide readiness and restarts; its status is reported to the
// kube-apiserver. So a chart's Deployments run here as on a real node, and
// a wrong argument, a missing mount or an image that cannot run fails a
// test.
//
// Pods have IPs on a network that exists only inside namespaces the node
// creates (veth.go). The test control plane's Service CIDR is on loopback:
// the node listens at each Service's cluster IP and port, on the host (the
// aggregator dials APIServices there) and in its own namespace (where pods'
// traffic to the Service CIDR is routed), and forwards to a ready pod the
// Service selects, or to the kube-apiserver for the kubernetes Service;
// /etc/hosts names every Service. Host addresses a test exposes (simulated
// machines) are routed and forwarded the same way. No traffic leaves this
// machine.
//
// What a kubelet does that this node does not: images come from the
// layout, not a registry; no seccomp profile or CPU limit is applied;
// exec probes, hostPath and CSI volumes are refused with an error saying so.
package mgmtnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Options say where the node keeps its state and what it runs with.
type Options struct {
	// Client is the node's credentials.
	Client kubernetes.Interface
	// Name is the Node's name.
	Name string
	// Dir holds the pods' filesystems, volumes, logs and runc's state.
	Dir string
	// Runc is the runc binary.
	Runc string
	// Images are the OCI layouts the containers' images come from, looked
	// up in turn.
	Images []string
	// APIServer is the kube-apiserver's host:port, where the kubernetes
	// Service leads.
	APIServer string
	// ServiceCIDR is the control plane's Service CIDR, on loopback.
	ServiceCIDR netip.Prefix
	// Logf receives what the node does; nil discards it.
	Logf func(format string, args ...any)
}

// Node is a running node.
type Node struct {
	opts     Options
	client   kubernetes.Interface
	runcRoot string
	ctx      context.Context
	cancel   context.CancelFunc
	net      *network
	// netns is the node's own network namespace.
	netns   string
	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	svcs    corelisters.ServiceLister

	mu      sync.Mutex
	running map[types.UID]*podRun
	// routes are the route addresses of each Service (namespace/name).
	routes map[string][]string
	next   int
	// exposed are the host addresses pods reach; ips, the pod IPs in use.
	exposed []netip.Prefix
	// gone describes the pods the node ran and deleted, with their logs' end.
	gone  []string
	ips   map[netip.Addr]bool
	veths int
	wg    sync.WaitGroup
}

// Start registers the Node and runs the pods bound to it until Stop.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	n := &Node{opts: opts, client: opts.Client, runcRoot: filepath.Join(opts.Dir, "runc"),
		running: map[types.UID]*podRun{}, routes: map[string][]string{}, ips: map[netip.Addr]bool{}}
	if !opts.ServiceCIDR.Addr().IsLoopback() {
		return nil, fmt.Errorf("the Service CIDR %s is not on loopback: dialing a Service would leave this machine", opts.ServiceCIDR)
	}
	for _, d := range []string{n.runcRoot, filepath.Join(opts.Dir, "pods"), filepath.Join(opts.Dir, "volumes")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	n.netns = filepath.Join(opts.Dir, "netns")
	if err := newNetns(n.netns); err != nil {
		return nil, err
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.net = newNetwork(n.ctx, opts.Logf, n.netns)
	if err := n.register(ctx); err != nil {
		n.cancel()
		return nil, err
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.heartbeat() }()

	n.factory = informers.NewSharedInformerFactory(n.client, 0)
	podInformer := informers.NewSharedInformerFactoryWithOptions(n.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.Name).String()
	})).Core().V1().Pods()
	n.pods = podInformer.Lister()
	svcInformer := n.factory.Core().V1().Services()
	n.svcs = svcInformer.Lister()
	claims := n.factory.Core().V1().PersistentVolumeClaims()
	_, _ = svcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n.serviceChanged(o) },
		UpdateFunc: func(_, o any) { n.serviceChanged(o) },
		DeleteFunc: func(o any) { n.serviceChanged(o) },
	})
	_, _ = claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n.provision(o) },
		UpdateFunc: func(_, o any) { n.provision(o) },
	})
	_, _ = podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n.podChanged(o) },
		UpdateFunc: func(_, o any) { n.podChanged(o) },
		DeleteFunc: func(o any) { n.podChanged(o) },
	})
	// Services first: a pod's environment and /etc/hosts name them.
	n.factory.Start(n.ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInformer.Informer().HasSynced, claims.Informer().HasSynced) {
		n.Stop()
		return nil, errors.New("the node's Service and claim informers did not sync")
	}
	go podInformer.Informer().Run(n.ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		n.Stop()
		return nil, errors.New("the node's pod informer did not sync")
	}
	return n, nil
}

// Stop stops every pod (each container gets SIGTERM, then SIGKILL after at
// most five seconds) and the node's listeners; the Node object stays.
func (n *Node) Stop() {
	n.mu.Lock()
	runs := make([]*podRun, 0, len(n.running))
	for _, p := range n.running {
		p.setGrace(func(g time.Duration) time.Duration { return min(g, 5*time.Second) })
		runs = append(runs, p)
	}
	n.mu.Unlock()
	n.cancel()
	for _, p := range runs {
		<-p.done
	}
	n.wg.Wait()
	n.net.close()
	removeNetns(n.netns)
}

// Expose makes each host address (ip:port) reachable at the same address
// from inside every pod: the route from the management cluster's pods to
// the machines and servers a test runs on the host.
func (n *Node) Expose(addrs ...string) error {
	var errs []error
	for _, addr := range addrs {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().IsLoopback() {
			errs = append(errs, fmt.Errorf("expose %q: not a loopback address and port", addr))
			continue
		}
		errs = append(errs, n.net.set(route{addr: addr, dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}}))
		prefix := netip.PrefixFrom(ap.Addr(), 32)
		n.mu.Lock()
		if !slices.Contains(n.exposed, prefix) {
			n.exposed = append(n.exposed, prefix)
		}
		runs := n.all()
		n.mu.Unlock()
		for _, p := range runs {
			if netns, ip := p.network(); netns != "" {
				errs = append(errs, routeInPod(netns, ip, prefix))
			}
		}
	}
	return errors.Join(errs...)
}

// all is every pod on the node; n.mu is held.
func (n *Node) all() []*podRun {
	runs := make([]*podRun, 0, len(n.running))
	for _, p := range n.running {
		runs = append(runs, p)
	}
	return runs
}

// attach gives a pod an IP and joins its namespace to the node's.
func (n *Node) attach(podNetns string) (netip.Addr, error) {
	n.mu.Lock()
	ip := gateway.Next()
	for n.ips[ip] {
		ip = ip.Next()
	}
	if !podCIDR.Contains(ip) {
		n.mu.Unlock()
		return netip.Addr{}, fmt.Errorf("the pod network %s is full", podCIDR)
	}
	n.ips[ip] = true
	n.veths++
	index := n.veths
	routed := append([]netip.Prefix{n.opts.ServiceCIDR}, n.exposed...)
	n.mu.Unlock()
	if err := n.plug(podNetns, index, ip, routed); err != nil {
		n.release(ip)
		return netip.Addr{}, err
	}
	return ip, nil
}

// release returns a pod's IP.
func (n *Node) release(ip netip.Addr) {
	n.mu.Lock()
	delete(n.ips, ip)
	n.mu.Unlock()
}

// Describe is every pod's containers' states and the end of their logs,
// the deleted pods' first.
func (n *Node) Describe() string {
	n.mu.Lock()
	runs := n.all()
	gone := strings.Join(n.gone, "")
	n.mu.Unlock()
	slices.SortFunc(runs, func(a, b *podRun) int { return strings.Compare(a.pod.Name, b.pod.Name) })
	var b strings.Builder
	b.WriteString(gone)
	for _, p := range runs {
		b.WriteString(p.describe())
	}
	return b.String()
}

// Logs is what a pod's container printed, every run of it.
func (n *Node) Logs(namespace, pod, container string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.running {
		if p.pod.Namespace == namespace && p.pod.Name == pod {
			data, err := os.ReadFile(filepath.Join(p.dir, "logs", container+".log"))
			return string(data), err
		}
	}
	return "", fmt.Errorf("no pod %s/%s on this node", namespace, pod)
}

func (n *Node) logf(format string, args ...any) { n.opts.Logf("node: "+format, args...) }

// register creates the Node, Ready, with room for the pods of a test.
func (n *Node) register(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name, Labels: map[string]string{
			"kubernetes.io/hostname": n.opts.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}},
	}
	if _, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", n.opts.Name, err)
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := n.client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status = corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "runc pods on loopback", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.opts.Name}},
			NodeInfo:  corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", ContainerRuntimeVersion: "runc://", KubeletVersion: "mgmtnode"},
		}
		_, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// heartbeat renews the node's Lease every ten seconds, as the kubelet does,
// so the node lifecycle controller keeps it Ready.
func (n *Node) heartbeat() {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		now := metav1.NewMicroTime(time.Now())
		lease, err := leases.Get(n.ctx, n.opts.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = leases.Create(n.ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.opts.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
			}, metav1.CreateOptions{})
		case err == nil:
			lease.Spec.RenewTime = &now
			_, err = leases.Update(n.ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil && n.ctx.Err() == nil {
			n.logf("lease: %v", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// podChanged starts a pod bound here, and stops one being deleted, then
// deletes it for good as the kubelet does once its containers ended.
func (n *Node) podChanged(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, known := n.running[pod.UID]
	gone := pod.DeletionTimestamp != nil
	if _, err := n.pods.Pods(pod.Namespace).Get(pod.Name); apierrors.IsNotFound(err) {
		gone = true
	}
	switch {
	case !known && !gone:
		p = newPodRun(n, pod)
		n.running[pod.UID] = p
		n.logf("pod %s/%s bound here: starting it", pod.Namespace, pod.Name)
		go p.run()
	case known && gone && p.ctx.Err() == nil:
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			p.setGrace(func(time.Duration) time.Duration { return time.Duration(*g) * time.Second })
		}
		p.cancel()
		go func() {
			<-p.done
			n.logf("pod %s/%s stopped", pod.Namespace, pod.Name)
			err := n.client.CoreV1().Pods(pod.Namespace).Delete(n.ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && n.ctx.Err() == nil {
				n.logf("delete pod %s/%s: %v", pod.Namespace, pod.Name, err)
			}
			described := p.describe()
			_ = os.RemoveAll(p.dir)
			n.mu.Lock()
			delete(n.running, pod.UID)
			n.gone = append(n.gone, described)
			n.mu.Unlock()
		}()
	}
}

// services is every Service.
func (n *Node) services() []*corev1.Service {
	svcs, _ := n.svcs.List(labels.Everything())
	slices.SortFunc(svcs, func(a, b *corev1.Service) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return svcs
}

// serviceChanged routes each port of a Service's cluster IP to its
// endpoints, and rewrites every pod's /etc/hosts.
func (n *Node) serviceChanged(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	svc, ok := o.(*corev1.Service)
	if !ok {
		return
	}
	key := svc.Namespace + "/" + svc.Name
	cur, err := n.svcs.Services(svc.Namespace).Get(svc.Name)
	var want []route
	if err == nil && cur.Spec.ClusterIP != "" && cur.Spec.ClusterIP != corev1.ClusterIPNone {
		for _, port := range cur.Spec.Ports {
			if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
				continue
			}
			want = append(want, route{addr: net.JoinHostPort(cur.Spec.ClusterIP, strconv.Itoa(int(port.Port))), onHost: true,
				dial: n.serviceDialer(cur, port)})
		}
	}
	n.mu.Lock()
	old := n.routes[key]
	n.routes[key] = nil
	for _, r := range want {
		n.routes[key] = append(n.routes[key], r.addr)
	}
	runs := make([]*podRun, 0, len(n.running))
	for _, p := range n.running {
		runs = append(runs, p)
	}
	n.mu.Unlock()
	for _, addr := range old {
		if !slices.ContainsFunc(want, func(r route) bool { return r.addr == addr }) {
			n.net.remove(addr)
		}
	}
	for _, r := range want {
		if err := n.net.set(r); err != nil {
			n.logf("service %s: %v", key, err)
		}
	}
	for _, p := range runs {
		if err := n.writeHosts(p); err != nil {
			n.logf("pod %s/%s /etc/hosts: %v", p.pod.Namespace, p.pod.Name, err)
		}
	}
}

// serviceDialer connects to one of the Service's ready endpoints on this
// node, in turn; the kubernetes Service's endpoint is the kube-apiserver.
func (n *Node) serviceDialer(svc *corev1.Service, port corev1.ServicePort) func(context.Context) (net.Conn, error) {
	if svc.Namespace == metav1.NamespaceDefault && svc.Name == "kubernetes" {
		return func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", n.opts.APIServer)
		}
	}
	selector := labels.SelectorFromSet(svc.Spec.Selector)
	return func(ctx context.Context) (net.Conn, error) {
		n.mu.Lock()
		var ready []*podRun
		for _, p := range n.running {
			if len(svc.Spec.Selector) > 0 && p.pod.Namespace == svc.Namespace && selector.Matches(labels.Set(p.pod.Labels)) && p.ready() {
				ready = append(ready, p)
			}
		}
		slices.SortFunc(ready, func(a, b *podRun) int { return strings.Compare(a.pod.Name, b.pod.Name) })
		n.next++
		next := n.next
		n.mu.Unlock()
		if len(ready) == 0 {
			return nil, fmt.Errorf("service %s/%s has no ready endpoint", svc.Namespace, svc.Name)
		}
		p := ready[next%len(ready)]
		target := port.TargetPort.IntValue()
		if target == 0 && port.TargetPort.StrVal == "" {
			target = int(port.Port)
		}
		if port.TargetPort.StrVal != "" {
			target = 0
			for _, c := range p.pod.Spec.Containers {
				if t, err := containerPort(c, port.TargetPort); err == nil {
					target = t
				}
			}
			if target == 0 {
				return nil, fmt.Errorf("pod %s has no port %s", p.pod.Name, port.TargetPort.StrVal)
			}
		}
		_, ip := p.network()
		return dialIn(ctx, n.netns, net.JoinHostPort(ip.String(), strconv.Itoa(target)))
	}
}

// ready says whether every container of the pod is ready.
func (p *podRun) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.containers {
		if !c.ready {
			return false
		}
	}
	return p.sandbox && p.ctx.Err() == nil
}

func (p *podRun) hostsFile() string { return filepath.Join(p.dir, "hosts") }

// writeHosts writes the pod's /etc/hosts in place (the containers
// bind-mount the file): loopback, the pod's name, and each Service's names
// at its cluster IP, as cluster DNS would answer them.
func (n *Node) writeHosts(p *podRun) error {
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (test/mgmtnode).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	fmt.Fprintf(&b, "127.0.0.1\t%s\n", p.pod.Name)
	for _, svc := range n.services() {
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone {
			continue
		}
		names := []string{svc.Name + "." + svc.Namespace + ".svc.cluster.local", svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace}
		if svc.Namespace == p.pod.Namespace {
			names = append(names, svc.Name)
		}
		fmt.Fprintf(&b, "%s\t%s\n", ip, strings.Join(names, " "))
	}
	f, err := os.OpenFile(p.hostsFile(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// provision gives a pending claim without a storage class a local volume
// on this node, as a local-path provisioner does; kube-controller-manager
// binds them.
func (n *Node) provision(o any) {
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok || pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" ||
		pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName != "" {
		return
	}
	name := "pvc-" + string(pvc.UID)
	path := filepath.Join(n.opts.Dir, "volumes", name)
	if err := os.MkdirAll(path, 0o777); err != nil {
		n.logf("claim %s/%s: %v", pvc.Namespace, pvc.Name, err)
		return
	}
	_ = os.Chmod(path, 0o777)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes: pvc.Spec.AccessModes,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{n.opts.Name}}},
			}}}},
		},
	}
	if _, err := n.client.CoreV1().PersistentVolumes().Create(n.ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) && n.ctx.Err() == nil {
		n.logf("claim %s/%s: %v", pvc.Namespace, pvc.Name, err)
	}
}

// claimPath is the directory of a bound claim's local volume.
func (n *Node) claimPath(ctx context.Context, namespace, claim string) (string, error) {
	pvc, err := n.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("claim %s is %s, not Bound", claim, pvc.Status.Phase)
	}
	pv, err := n.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pv.Spec.Local == nil {
		return "", fmt.Errorf("volume %s is not a local volume of this node", pv.Name)
	}
	return pv.Spec.Local.Path, nil
}
