package mgmtnode

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
)

// defaultCapabilities are what a container runtime (containerd, CRI-O)
// grants a container whose security context drops none.
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// runtimeSpec is the OCI runtime spec of container c from image img
// unpacked at rootfs: the command, arguments, environment, user, security
// context, mounts and memory limit the pod spec gives, as a container
// runtime would write it.
func (p *podRun) runtimeSpec(c *corev1.Container, img v1.Image, rootfs string, env []string) (*specs.Spec, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	pod := p.pod
	psc := cmp.Or(pod.Spec.SecurityContext, &corev1.PodSecurityContext{})
	csc := cmp.Or(c.SecurityContext, &corev1.SecurityContext{})

	args := c.Command
	if len(args) == 0 {
		args = slices.Clone(cfg.Config.Entrypoint)
		if len(c.Args) == 0 {
			args = append(args, cfg.Config.Cmd...)
		}
	}
	args = append(slices.Clone(args), c.Args...)
	vars := envMap(env)
	for i := range args {
		args[i] = expand(args[i], vars)
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("no command: the image has no entrypoint and the container none")
	}

	uid, gid, err := imageUser(cfg.Config.User, rootfs)
	if err != nil && (csc.RunAsUser == nil && psc.RunAsUser == nil) {
		if nonRoot(psc, csc) {
			return nil, fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", cfg.Config.User)
		}
		return nil, err
	}
	if u := cmp.Or(csc.RunAsUser, psc.RunAsUser); u != nil {
		uid = *u
	}
	if g := cmp.Or(csc.RunAsGroup, psc.RunAsGroup); g != nil {
		gid = *g
	}
	if uid == 0 && nonRoot(psc, csc) {
		return nil, fmt.Errorf("container has runAsNonRoot and image will run as root")
	}
	var groups []uint32
	for _, g := range psc.SupplementalGroups {
		groups = append(groups, uint32(g)) //nolint:gosec // a group id
	}
	if psc.FSGroup != nil {
		groups = append(groups, uint32(*psc.FSGroup)) //nolint:gosec // a group id
	}

	caps := slices.Clone(defaultCapabilities)
	if csc.Capabilities != nil {
		for _, d := range csc.Capabilities.Drop {
			if d == "ALL" {
				caps = nil
				break
			}
			caps = slices.DeleteFunc(caps, func(c string) bool { return c == "CAP_"+string(d) })
		}
		for _, a := range csc.Capabilities.Add {
			caps = append(caps, "CAP_"+string(a))
		}
	}

	spec := &specs.Spec{
		Version:  "1.0.2",
		Root:     &specs.Root{Path: rootfs, Readonly: csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem},
		Hostname: cmp.Or(pod.Spec.Hostname, pod.Name),
		Process: &specs.Process{
			Args: args,
			Env:  env,
			Cwd:  cmp.Or(c.WorkingDir, cfg.Config.WorkingDir, "/"),
			User: specs.User{UID: uint32(uid), GID: uint32(gid), AdditionalGids: groups}, //nolint:gosec // ids
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			NoNewPrivileges: csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			// What the kubelet mounts into every container.
			{Destination: "/etc/hosts", Type: "bind", Source: p.hostsFile(), Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/etc/hostname", Type: "bind", Source: filepath.Join(p.dir, "hostname"), Options: []string{"rbind", "rprivate", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: p.netns},
			},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if mem, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		limit := mem.Value()
		spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	if path := c.TerminationMessagePath; path != "" {
		msg := filepath.Join(p.dir, "termination-"+c.Name)
		if err := os.WriteFile(msg, nil, 0o666); err != nil {
			return nil, err
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: path, Type: "bind", Source: msg, Options: []string{"rbind", "rprivate", "rw"}})
	}
	for _, m := range c.VolumeMounts {
		vol, ok := p.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s: no volume of that name", m.Name)
		}
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		if vol.tmpfs {
			tmpfsOpts := []string{"nosuid", "nodev", "mode=1777"}
			if vol.sizeLimit != "" {
				tmpfsOpts = append(tmpfsOpts, "size="+vol.sizeLimit)
			}
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.MountPath, Type: "tmpfs", Source: "tmpfs", Options: tmpfsOpts})
			continue
		}
		src := vol.dir
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.MountPath, Type: "bind", Source: src, Options: opts})
	}
	return spec, nil
}

func nonRoot(psc *corev1.PodSecurityContext, csc *corev1.SecurityContext) bool {
	v := cmp.Or(csc.RunAsNonRoot, psc.RunAsNonRoot)
	return v != nil && *v
}

// imageUser is the uid and gid of an image's configured user: numeric, or
// a name /etc/passwd in the image gives.
func imageUser(user, rootfs string) (uid, gid int64, err error) {
	if user == "" {
		return 0, 0, nil
	}
	name, group, _ := strings.Cut(user, ":")
	if uid, err = strconv.ParseInt(name, 10, 64); err != nil {
		f, ferr := os.Open(filepath.Join(rootfs, "etc", "passwd"))
		if ferr != nil {
			return 0, 0, fmt.Errorf("image user %q: %w", user, ferr)
		}
		defer f.Close() //nolint:errcheck
		found := false
		for s := bufio.NewScanner(f); s.Scan(); {
			fields := strings.Split(s.Text(), ":")
			if len(fields) > 3 && fields[0] == name {
				uid, _ = strconv.ParseInt(fields[2], 10, 64)
				gid, _ = strconv.ParseInt(fields[3], 10, 64)
				found = true
			}
		}
		if !found {
			return 0, 0, fmt.Errorf("image user %q is not in the image's /etc/passwd", user)
		}
	} else {
		gid = uid
	}
	if group != "" {
		if gid, err = strconv.ParseInt(group, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("image group %q is not numeric", group)
		}
	}
	return uid, gid, nil
}

// envMap indexes NAME=value pairs.
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// expand replaces $(VAR) with VAR's value when it is defined, and $$ with
// $, as Kubernetes expands a container's command, arguments and env.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
