// Package proc runs the control-plane binaries that tests start as child processes (etcd,
// kube-apiserver, kube-controller-manager): each with its output in a log file, its own process group,
// killed with its parent, and health checks that report the log tail when a process dies early.
package proc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a running child process whose output goes to a log file.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// Start runs binary with args, logging its output to dir/<name>.log.
func Start(dir, name, binary string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")

	// Appended to: a process started again under its name keeps one log.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group, so an interrupted test run does not leave it to the terminal's signals, and
	// killed with the test binary so that nothing outlives a crashed run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		logFile.Close() //nolint:errcheck

		return nil, fmt.Errorf("start %s: %w", name, err)
	}

	p := &Process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}

	go func() {
		p.err = cmd.Wait()
		logFile.Close() //nolint:errcheck
		close(p.done)
	}()

	return p, nil
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited returns nil while the process runs, and once it has ended an error with its exit status and
// log tail.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v):\n%s", p.name, p.err, p.LogTail())
	default:
		return nil
	}
}

// LogTail returns the last lines of the process's log.
func (p *Process) LogTail() string {
	data, _ := os.ReadFile(p.logPath)

	return Tail(string(data), 30)
}

// Stop sends SIGTERM, waits up to grace, then kills, and returns how the process ended (nil for a clean
// exit). A nil Process is a no-op.
func (p *Process) Stop(grace time.Duration) error {
	if p == nil {
		return nil
	}

	select {
	case <-p.done:
		return p.err
	default:
	}

	_ = p.cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}

	return p.err
}

// Kill kills the process at once (SIGKILL), as a node failure or the OOM killer does, and waits for it
// to end.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Liveness is what WaitHealthy watches while it polls: a Process, or a server run in-process.
type Liveness interface {
	// Name names it in errors.
	Name() string
	// Exited is nil while it runs, and why it stopped once it has.
	Exited() error
	// LogTail is the end of its log, for errors.
	LogTail() string
}

var _ Liveness = (*Process)(nil)

// WaitHealthy polls url with client until it answers 200, p exits, or timeout passes.
func WaitHealthy(ctx context.Context, p Liveness, client *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var last error

	for {
		if err := p.Exited(); err != nil {
			return err
		}

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}

		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close() //nolint:errcheck

			if resp.StatusCode == http.StatusOK {
				return nil
			}

			err = fmt.Errorf("%s answered %s", url, resp.Status)
		}

		last = err

		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %s: %v\n%s", p.Name(), timeout, last, p.LogTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePorts returns n distinct ports on ip that are free now, for a child
// process to listen on. They are chosen below the kernel's ephemeral range
// (ip_local_port_range), which the kernel hands to outgoing connections and
// to listeners on port 0: a port from that range, free when chosen, is often
// some connection's source port by the time the child binds it ("address
// already in use"). No port is handed out twice by one process.
func FreePorts(ip string, n int) ([]int, error) {
	lo, hi := childPortRange()

	handed.Lock()
	defer handed.Unlock()

	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 10000 {
			return nil, fmt.Errorf("no %d free ports on %s between %d and %d", n, ip, lo, hi)
		}

		p := lo + rand.IntN(hi-lo)
		if handed.ports[p] {
			continue
		}

		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
		if err != nil {
			continue // in use
		}

		l.Close() //nolint:errcheck
		handed.ports[p] = true
		ports = append(ports, p)
	}

	return ports, nil
}

// handed are the ports FreePorts returned.
var handed = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// childPortRange is where FreePorts chooses: from 10000 up to the start of the
// kernel's ephemeral range (32768 when it cannot be read).
func childPortRange() (lo, hi int) {
	lo, hi = 10000, 32768

	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}

	if f := strings.Fields(string(b)); len(f) == 2 {
		if start, err := strconv.Atoi(f[0]); err == nil && start > lo+1000 {
			hi = start
		}
	}

	return lo, hi
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > n {
		parts = parts[len(parts)-n:]
	}

	return strings.Join(parts, "\n")
}
