package mgmtnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// newNetns creates a network namespace with loopback up, where loopback
// addresses may be routed over other interfaces (veth.go), and keeps it
// alive with a bind mount at path, as `ip netns add` does.
func newNetns(path string) error {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	return inThread("", func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare the network namespace: %w", err)
		}
		if err := loopbackUp(); err != nil {
			return err
		}
		if err := enableRouteLocalnet(); err != nil {
			return err
		}
		return unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
	})
}

// removeNetns releases the namespace at path; it ends once nothing in it runs.
func removeNetns(path string) {
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
}

// loopbackUp sets the current network namespace's lo up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd) //nolint:errcheck
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// inThread runs fn on an OS thread locked to it that has joined the
// network namespace at path ("": stays in this process's, for fn to
// unshare). A socket fn opens stays in that namespace after. The thread
// goes back to this process's namespace before it is unlocked: a thread
// that ended instead would take with it every child process it had started
// with a parent-death signal (the control plane's, runc).
func inThread(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return // the thread ends with this goroutine, still locked
		}
		defer unix.Close(home) //nolint:errcheck
		defer func() {
			// Only a thread that is home again goes back to the pool.
			if unix.Setns(home, unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
		}()
		if path != "" {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				errc <- err
				return
			}
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			_ = unix.Close(fd)
			if err != nil {
				errc <- fmt.Errorf("join the network namespace %s: %w", path, err)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

// listenIn listens on addr in the namespace at path ("": this process's).
func listenIn(path, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inThread(path, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// dialIn connects to addr from inside the namespace at path.
func dialIn(ctx context.Context, path, addr string) (net.Conn, error) {
	var c net.Conn
	err := inThread(path, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}
