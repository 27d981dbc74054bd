package mgmtnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"ichor.dev/ichor/test/ociimage"
)

// podRun is one pod on the node, from its first sight to its deletion.
type podRun struct {
	node    *Node
	pod     *corev1.Pod
	dir     string
	netns   string
	ip      netip.Addr
	fsGroup *int64
	volumes map[string]*volume
	tokens  map[string]issuedToken

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	dirty  chan struct{}

	mu sync.Mutex
	// grace is how long its containers get between SIGTERM and SIGKILL.
	grace      time.Duration
	started    time.Time
	sandbox    bool
	containers []*containerRun
}

// containerRun is one container of a pod and what the kubelet reports of it.
type containerRun struct {
	spec    corev1.Container
	id      string
	image   v1.Image
	imageID string
	rootfs  string
	log     string

	exited    chan struct{}
	running   bool
	startedAt time.Time
	ready     bool
	started   bool
	restarts  int32
	waiting   *corev1.ContainerStateWaiting
	last      *corev1.ContainerStateTerminated
}

func newPodRun(n *Node, pod *corev1.Pod) *podRun {
	ctx, cancel := context.WithCancel(n.ctx)
	p := &podRun{
		node: n, pod: pod.DeepCopy(), dir: filepath.Join(n.opts.Dir, "pods", string(pod.UID)),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), dirty: make(chan struct{}, 1),
		tokens: map[string]issuedToken{}, grace: 30 * time.Second, started: time.Now(),
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		p.grace = time.Duration(*g) * time.Second
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		p.fsGroup = sc.FSGroup
	}
	for i, c := range pod.Spec.Containers {
		p.containers = append(p.containers, &containerRun{
			spec: c, id: fmt.Sprintf("%s-%d", pod.UID, i), log: filepath.Join(p.dir, "logs", c.Name+".log"),
			waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"},
		})
	}
	return p
}

// run sets the pod up, supervises its containers until it is deleted or
// the node stops, then stops them and tears the sandbox down.
func (p *podRun) run() {
	defer close(p.done)
	go p.reportLoop()
	p.report()
	for {
		err := p.setUp()
		if err == nil {
			break
		}
		p.node.logf("pod %s/%s: %v", p.pod.Namespace, p.pod.Name, err)
		p.mu.Lock()
		for _, c := range p.containers {
			c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		}
		p.mu.Unlock()
		p.report()
		select {
		case <-p.ctx.Done():
			p.tearDown()
			return
		case <-time.After(2 * time.Second):
		}
	}
	var wg sync.WaitGroup
	for _, c := range p.containers {
		wg.Add(1)
		go func() { defer wg.Done(); p.supervise(c) }()
		for _, pr := range []struct {
			kind  string
			probe *corev1.Probe
		}{{"startup", c.spec.StartupProbe}, {"readiness", c.spec.ReadinessProbe}, {"liveness", c.spec.LivenessProbe}} {
			wg.Add(1)
			go func() { defer wg.Done(); p.probeLoop(c, pr.kind, pr.probe) }()
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); p.refreshVolumes() }()
	wg.Wait()
	p.tearDown()
}

func (p *podRun) setUp() error {
	p.tearDown()
	for _, d := range []string{"logs", "volumes", "rootfs"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(p.dir, "hostname"), []byte(p.pod.Name+"\n"), 0o644); err != nil {
		return err
	}
	if err := p.node.writeHosts(p); err != nil {
		return err
	}
	netns := filepath.Join(p.dir, "netns")
	if err := newNetns(netns); err != nil {
		return err
	}
	p.mu.Lock()
	p.netns = netns
	p.mu.Unlock()
	ip, err := p.node.attach(netns)
	if err != nil {
		return fmt.Errorf("the pod's network: %w", err)
	}
	p.mu.Lock()
	p.ip = ip
	p.mu.Unlock()
	if err := p.setUpVolumes(p.ctx); err != nil {
		return err
	}
	platform := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	for _, c := range p.containers {
		img, err := p.node.image(c.spec.Image, platform)
		if err != nil {
			return fmt.Errorf("container %s: %w", c.spec.Name, err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		rootfs := filepath.Join(p.dir, "rootfs", c.spec.Name)
		p.mu.Lock()
		c.image, c.imageID, c.rootfs = img, digest.String(), rootfs
		p.mu.Unlock()
		if err := ociimage.Unpack(img, rootfs); err != nil {
			return fmt.Errorf("container %s: unpack %s: %w", c.spec.Name, c.spec.Image, err)
		}
	}
	p.mu.Lock()
	p.sandbox = true
	p.mu.Unlock()
	return nil
}

// image finds ref in the node's layouts.
func (n *Node) image(ref string, platform v1.Platform) (v1.Image, error) {
	var errs []error
	for _, dir := range n.opts.Images {
		img, err := ociimage.Find(dir, ref, platform)
		if err == nil {
			return img, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("pull %s: %w", ref, errors.Join(errs...))
}

// setGrace changes the grace period (a deletion's, or the node stopping).
func (p *podRun) setGrace(f func(time.Duration) time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.grace = f(p.grace)
}

func (p *podRun) gracePeriod() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grace
}

// tearDown releases the pod's network namespace and listeners.
func (p *podRun) tearDown() {
	p.mu.Lock()
	netns, ip := p.netns, p.ip
	p.netns, p.ip, p.sandbox = "", netip.Addr{}, false
	p.mu.Unlock()
	if ip.IsValid() {
		p.node.release(ip)
	}
	if netns != "" {
		removeNetns(netns)
	}
}

// network is the pod's namespace and IP, or "" before it has them.
func (p *podRun) network() (string, netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.netns, p.ip
}

// supervise runs a container and starts it again each time it ends, after
// a back-off that doubles up to 30 s (the restart policy of a Deployment's
// pods, Always).
func (p *podRun) supervise(c *containerRun) {
	backoff := time.Second
	for p.ctx.Err() == nil {
		began := time.Now()
		err := p.runContainer(c)
		if p.ctx.Err() != nil {
			return
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		p.node.logf("pod %s/%s container %s ended: %s", p.pod.Namespace, p.pod.Name, c.spec.Name, msg)
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		p.mu.Lock()
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container %s", backoff, c.spec.Name)}
		p.mu.Unlock()
		p.report()
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// runContainer runs the container once, in runc, until it ends or the pod
// is stopped (then SIGTERM, and SIGKILL after the grace period).
func (p *podRun) runContainer(c *containerRun) error {
	env, err := p.env(c)
	if err == nil {
		var spec any
		if spec, err = p.runtimeSpec(&c.spec, c.image, c.rootfs, env); err == nil {
			err = p.writeBundle(c, spec)
		}
	}
	if err != nil {
		p.mu.Lock()
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		p.mu.Unlock()
		p.report()
		return err
	}
	n := p.node
	_ = exec.Command(n.opts.Runc, "--root", n.runcRoot, "delete", "--force", c.id).Run()
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() //nolint:errcheck
	cmd := exec.Command(n.opts.Runc, "--root", n.runcRoot, "run", "--bundle", p.bundleDir(c), c.id)
	cmd.Stdout, cmd.Stderr = logf, logf
	// runc in the foreground ends with the container. If this process dies
	// runc dies with it, but the container does not: Node.Stop, not a
	// crash, is what removes containers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	p.mu.Lock()
	c.exited, c.running, c.startedAt, c.waiting, c.ready, c.started = exited, true, time.Now(), nil, false, false
	p.mu.Unlock()
	p.report()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait(); close(exited) }()
	select {
	case err = <-waitErr:
	case <-p.ctx.Done():
		p.signal(c, "TERM")
		select {
		case err = <-waitErr:
		case <-time.After(p.gracePeriod()):
			p.signal(c, "KILL")
			err = <-waitErr
		}
	}
	_ = exec.Command(n.opts.Runc, "--root", n.runcRoot, "delete", "--force", c.id).Run()
	code := int32(0)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = int32(exit.ExitCode()) //nolint:gosec // an exit code
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	p.mu.Lock()
	c.running, c.ready, c.started = false, false, false
	c.restarts++
	c.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
		StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now(), ContainerID: "runc://" + c.id}
	p.mu.Unlock()
	if p.ctx.Err() == nil {
		return fmt.Errorf("exit code %d", code)
	}
	return nil
}

func (p *podRun) bundleDir(c *containerRun) string {
	return filepath.Join(p.dir, "bundles", c.spec.Name)
}

func (p *podRun) writeBundle(c *containerRun, spec any) error {
	dir := p.bundleDir(c)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}

// signal sends sig to the container's processes.
func (p *podRun) signal(c *containerRun, sig string) {
	_ = exec.Command(p.node.opts.Runc, "--root", p.node.runcRoot, "kill", "--all", c.id, sig).Run()
}

// kill stops a running container as a failed liveness probe does: its
// supervisor starts it again.
func (p *podRun) kill(c *containerRun) {
	p.mu.Lock()
	exited := c.exited
	p.mu.Unlock()
	p.signal(c, "TERM")
	select {
	case <-exited:
	case <-time.After(p.gracePeriod()):
		p.signal(c, "KILL")
	}
}

// refreshVolumes writes the pod's secret, configMap and projected volumes
// again when what they hold changes, as the kubelet's periodic sync does.
func (p *podRun) refreshVolumes() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		for name, v := range p.volumes {
			if v.refresh == nil {
				continue
			}
			if err := v.refresh(p.ctx); err != nil && p.ctx.Err() == nil {
				p.node.logf("pod %s/%s volume %s: %v", p.pod.Namespace, p.pod.Name, name, err)
			}
		}
	}
}

// report asks for the pod's status to be written.
func (p *podRun) report() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

// reportLoop writes the pod's status each time it changes, until the pod
// is stopped.
func (p *podRun) reportLoop() {
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.dirty:
		}
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			pods := p.node.client.CoreV1().Pods(p.pod.Namespace)
			cur, err := pods.Get(p.ctx, p.pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.UID != p.pod.UID {
				return apierrors.NewNotFound(corev1.Resource("pods"), p.pod.Name)
			}
			p.status(&cur.Status)
			_, err = pods.UpdateStatus(p.ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil && p.ctx.Err() == nil && !apierrors.IsNotFound(err) {
			p.node.logf("pod %s/%s status: %v", p.pod.Namespace, p.pod.Name, err)
		}
	}
}

// status fills s as the kubelet would.
func (p *podRun) status(s *corev1.PodStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := metav1.NewTime(p.started)
	s.StartTime = &start
	s.HostIP, s.HostIPs = "127.0.0.1", []corev1.HostIP{{IP: "127.0.0.1"}}
	s.PodIP, s.PodIPs = "", nil
	if p.ip.IsValid() {
		s.PodIP, s.PodIPs = p.ip.String(), []corev1.PodIP{{IP: p.ip.String()}}
	}
	s.ContainerStatuses = nil
	allReady, anyRunning := true, false
	for _, c := range p.containers {
		started := c.started
		cs := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.imageID, RestartCount: c.restarts,
			Ready: c.ready, Started: &started, LastTerminationState: corev1.ContainerState{Terminated: c.last}}
		switch {
		case c.running:
			anyRunning = true
			cs.ContainerID = "runc://" + c.id
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		case c.waiting != nil:
			cs.State.Waiting = c.waiting
		}
		allReady = allReady && c.ready
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	s.Phase = corev1.PodPending
	if anyRunning || p.sandbox && hasRestarts(p.containers) {
		s.Phase = corev1.PodRunning
	}
	now := metav1.Now()
	set := func(t corev1.PodConditionType, ok bool, reason string) {
		st := corev1.ConditionFalse
		if ok {
			st = corev1.ConditionTrue
			reason = ""
		}
		for i := range s.Conditions {
			if s.Conditions[i].Type == t {
				if s.Conditions[i].Status != st {
					s.Conditions[i].Status, s.Conditions[i].LastTransitionTime, s.Conditions[i].Reason = st, now, reason
				}
				return
			}
		}
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: st, LastTransitionTime: now, Reason: reason})
	}
	set(corev1.PodReadyToStartContainers, p.sandbox, "")
	set(corev1.PodInitialized, true, "")
	set(corev1.ContainersReady, allReady, "ContainersNotReady")
	set(corev1.PodReady, allReady, "ContainersNotReady")
}

func hasRestarts(cs []*containerRun) bool {
	for _, c := range cs {
		if c.restarts > 0 {
			return true
		}
	}
	return false
}

// describe is the pod's containers' states and the end of their logs, for a
// failing test.
func (p *podRun) describe() string {
	var b strings.Builder
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(&b, "pod %s/%s (sandbox %v)\n", p.pod.Namespace, p.pod.Name, p.sandbox)
	for _, c := range p.containers {
		fmt.Fprintf(&b, "  container %s: running %v ready %v restarts %d waiting %+v last %+v\n", c.spec.Name, c.running, c.ready, c.restarts, c.waiting, c.last)
		if data, err := os.ReadFile(c.log); err == nil {
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			for _, l := range lines[max(0, len(lines)-40):] {
				fmt.Fprintf(&b, "    | %s\n", l)
			}
		}
	}
	return b.String()
}
