package mgmtnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeLoop runs one of a container's probes, as the kubelet does: after
// its initial delay, every period, while the container runs; a startup
// probe holds the others back until it succeeds, a failing liveness or
// startup probe restarts the container, readiness sets Ready.
func (p *podRun) probeLoop(c *containerRun, kind string, pr *corev1.Probe) {
	if pr == nil {
		if kind == "readiness" || kind == "startup" {
			p.waitRunning(c, func() {
				if kind == "startup" {
					c.started = true
				} else {
					c.ready = true
				}
			})
		}
		return
	}
	period := seconds(pr.PeriodSeconds, 10)
	timeout := seconds(pr.TimeoutSeconds, 1)
	failures, successes := int32(0), int32(0)
	failureThreshold, successThreshold := pr.FailureThreshold, max(pr.SuccessThreshold, 1)
	if failureThreshold <= 0 {
		failureThreshold = 3
	}
	var runningSince time.Time
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := time.Time{}
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		running, since, started := c.running, c.startedAt, c.started
		p.mu.Unlock()
		if !running {
			failures, successes = 0, 0
			continue
		}
		if since != runningSince {
			runningSince, failures, successes, last = since, 0, 0, time.Time{}
		}
		if time.Since(since) < seconds(pr.InitialDelaySeconds, 0) || time.Since(last) < period {
			continue
		}
		if kind != "startup" && !started {
			continue
		}
		if kind == "startup" && started {
			continue
		}
		last = time.Now()
		ctx, cancel := context.WithTimeout(p.ctx, timeout)
		err := p.probe(ctx, c, pr)
		cancel()
		if err == nil {
			failures, successes = 0, successes+1
		} else {
			failures, successes = failures+1, 0
		}
		switch kind {
		case "readiness":
			p.mu.Lock()
			ready := c.ready
			if successes >= successThreshold {
				ready = true
			} else if failures >= failureThreshold {
				ready = false
			}
			changed := c.ready != ready && c.running
			if changed {
				c.ready = ready
			}
			p.mu.Unlock()
			if changed {
				p.node.logf("pod %s/%s container %s ready %v (%v)", p.pod.Namespace, p.pod.Name, c.spec.Name, ready, err)
				p.report()
			}
		case "startup":
			if successes >= 1 {
				p.mu.Lock()
				c.started = true
				p.mu.Unlock()
				p.report()
			} else if failures >= failureThreshold {
				p.node.logf("pod %s/%s container %s failed its startup probe: %v", p.pod.Namespace, p.pod.Name, c.spec.Name, err)
				p.kill(c)
			}
		case "liveness":
			if failures >= failureThreshold {
				p.node.logf("pod %s/%s container %s failed its liveness probe: %v", p.pod.Namespace, p.pod.Name, c.spec.Name, err)
				failures = 0
				p.kill(c)
			}
		}
	}
}

// waitRunning calls mark (under the pod's lock) each time the container
// starts, for a probe the container does not have: it succeeds at once.
func (p *podRun) waitRunning(c *containerRun, mark func()) {
	var seen time.Time
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		fresh := c.running && c.startedAt != seen
		if fresh {
			seen = c.startedAt
			mark()
		}
		p.mu.Unlock()
		if fresh {
			p.report()
		}
	}
}

func seconds(v, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

// probe runs an httpGet or tcpSocket probe against the pod's IP, from the
// node, as the kubelet does.
func (p *podRun) probe(ctx context.Context, c *containerRun, pr *corev1.Probe) error {
	switch {
	case pr.HTTPGet != nil:
		port, err := containerPort(c.spec, pr.HTTPGet.Port)
		if err != nil {
			return err
		}
		_, ip := p.network()
		addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
		transport := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialIn(ctx, p.node.netns, addr)
			},
			// The kubelet does not verify a probe's certificate (Kubernetes'
			// probe documentation): the probe asks whether the server
			// answers, not who it is.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet probes
			DisableKeepAlives: true,
		}
		scheme := "http"
		if pr.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, addr, pr.HTTPGet.Path), nil)
		if err != nil {
			return err
		}
		for _, h := range pr.HTTPGet.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		resp, err := transport.RoundTrip(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	case pr.TCPSocket != nil:
		port, err := containerPort(c.spec, pr.TCPSocket.Port)
		if err != nil {
			return err
		}
		_, ip := p.network()
		conn, err := dialIn(ctx, p.node.netns, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	default:
		return fmt.Errorf("only httpGet and tcpSocket probes run on this node")
	}
}

// containerPort resolves a port by number or by the name of one of the
// container's ports.
func containerPort(c corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, port.StrVal)
}
