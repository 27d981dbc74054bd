package mgmtnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// volume is one of a pod's volumes as the node set it up: a directory on
// the host the containers bind-mount, or a tmpfs each mounts.
type volume struct {
	dir       string
	tmpfs     bool
	sizeLimit string
	// refresh writes a secret, configMap or projected volume again when
	// what it holds changed, as the kubelet syncs them.
	refresh func(ctx context.Context) error
}

// file is one file of a secret, configMap or projected volume.
type file struct {
	data []byte
	mode os.FileMode
}

const defaultVolumeMode = 0o644

// setUpVolumes prepares every volume of the pod under dir.
func (p *podRun) setUpVolumes(ctx context.Context) error {
	p.volumes = map[string]*volume{}
	for _, v := range p.pod.Spec.Volumes {
		dir := filepath.Join(p.dir, "volumes", v.Name)
		vol := &volume{dir: dir}
		var files func(ctx context.Context) (map[string]file, error)
		switch s := v.VolumeSource; {
		case s.EmptyDir != nil:
			if s.EmptyDir.Medium == corev1.StorageMediumMemory {
				vol.tmpfs = true
				if s.EmptyDir.SizeLimit != nil {
					vol.sizeLimit = s.EmptyDir.SizeLimit.String()
				}
				break
			}
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				return err
			}
			if err := p.setOwnership(dir, false); err != nil {
				return err
			}
		case s.PersistentVolumeClaim != nil:
			path, err := p.node.claimPath(ctx, p.pod.Namespace, s.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
			vol.dir = path
			if err := p.setOwnership(path, false); err != nil {
				return err
			}
		case s.Secret != nil:
			files = func(ctx context.Context) (map[string]file, error) {
				return p.secretFiles(ctx, s.Secret.SecretName, s.Secret.Items, s.Secret.Optional, mode(s.Secret.DefaultMode))
			}
		case s.ConfigMap != nil:
			files = func(ctx context.Context) (map[string]file, error) {
				return p.configMapFiles(ctx, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, mode(s.ConfigMap.DefaultMode))
			}
		case s.Projected != nil:
			files = func(ctx context.Context) (map[string]file, error) { return p.projectedFiles(ctx, s.Projected) }
		default:
			return fmt.Errorf("volume %s: only emptyDir, persistentVolumeClaim, secret, configMap and projected volumes run on this node", v.Name)
		}
		if files != nil {
			var last string
			vol.refresh = func(ctx context.Context) error {
				fs, err := files(ctx)
				if err != nil {
					return fmt.Errorf("volume %s: %w", v.Name, err)
				}
				if sum := digest(fs); sum != last {
					if err := p.writeAtomic(dir, fs); err != nil {
						return fmt.Errorf("volume %s: %w", v.Name, err)
					}
					last = sum
				}
				return nil
			}
			if err := vol.refresh(ctx); err != nil {
				return err
			}
		}
		p.volumes[v.Name] = vol
	}
	return nil
}

func mode(m *int32) os.FileMode {
	if m == nil {
		return defaultVolumeMode
	}
	return os.FileMode(*m) //nolint:gosec // a file mode
}

func digest(files map[string]file) string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s %o %d\n", name, files[name].mode, len(files[name].data))
		h.Write(files[name].data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (p *podRun) secretFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]file, error) {
	s, err := p.node.client.CoreV1().Secrets(p.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return map[string]file{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return keyFiles("secret "+name, s.Data, items, optional, def)
}

func (p *podRun) configMapFiles(ctx context.Context, name string, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]file, error) {
	cm, err := p.node.client.CoreV1().ConfigMaps(p.pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return map[string]file{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap "+name, data, items, optional, def)
}

// keyFiles are a secret's or configMap's keys as files: every key, or the
// items listed, each at its path with its mode.
func keyFiles(what string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, def os.FileMode) (map[string]file, error) {
	out := map[string]file{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = file{data: v, mode: def}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		m := def
		if it.Mode != nil {
			m = mode(it.Mode)
		}
		out[it.Path] = file{data: v, mode: m}
	}
	return out, nil
}

// projectedFiles are a projected volume's sources, merged.
func (p *podRun) projectedFiles(ctx context.Context, s *corev1.ProjectedVolumeSource) (map[string]file, error) {
	def := mode(s.DefaultMode)
	out := map[string]file{}
	add := func(files map[string]file, err error) error {
		if err != nil {
			return err
		}
		for k, v := range files {
			out[k] = v
		}
		return nil
	}
	for _, src := range s.Sources {
		var err error
		switch {
		case src.Secret != nil:
			err = add(p.secretFiles(ctx, src.Secret.Name, src.Secret.Items, src.Secret.Optional, def))
		case src.ConfigMap != nil:
			err = add(p.configMapFiles(ctx, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, def))
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					return nil, fmt.Errorf("downwardAPI %s: only fieldRef runs on this node", it.Path)
				}
				v, ferr := p.fieldValue(it.FieldRef.FieldPath)
				if ferr != nil {
					return nil, ferr
				}
				m := def
				if it.Mode != nil {
					m = mode(it.Mode)
				}
				out[it.Path] = file{data: []byte(v), mode: m}
			}
		case src.ServiceAccountToken != nil:
			tok, terr := p.token(ctx, src.ServiceAccountToken)
			if terr != nil {
				return nil, terr
			}
			out[src.ServiceAccountToken.Path] = file{data: []byte(tok), mode: def}
		default:
			return nil, fmt.Errorf("only secret, configMap, downwardAPI and serviceAccountToken projections run on this node")
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// token is a token of the pod's ServiceAccount bound to the pod, as the
// kubelet requests it; requested again once 80% of its life has passed.
func (p *podRun) token(ctx context.Context, s *corev1.ServiceAccountTokenProjection) (string, error) {
	key := s.Audience + "/" + s.Path
	if t, ok := p.tokens[key]; ok && time.Now().Before(t.refreshAt) {
		return t.value, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: s.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.pod.Name, UID: p.pod.UID},
	}}
	if s.Audience != "" {
		req.Spec.Audiences = []string{s.Audience}
	}
	sa := p.pod.Spec.ServiceAccountName
	out, err := p.node.client.CoreV1().ServiceAccounts(p.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of serviceaccount %s: %w", sa, err)
	}
	issued := time.Now()
	life := out.Status.ExpirationTimestamp.Sub(issued)
	p.tokens[key] = issuedToken{value: out.Status.Token, refreshAt: issued.Add(life * 8 / 10)}
	return out.Status.Token, nil
}

type issuedToken struct {
	value     string
	refreshAt time.Time
}

// writeAtomic writes files as the kubelet's atomic writer does: into a new
// timestamped directory, swapped in by renaming the ..data symlink, each
// top-level name a symlink through ..data; so a reader sees the old set or
// the new, never half of each.
func (p *podRun) writeAtomic(dir string, files map[string]file) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ts := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	for name, f := range files {
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) || strings.Contains(name, "/../") {
			return fmt.Errorf("path %q is not allowed", name)
		}
		path := filepath.Join(dir, ts, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(path, f.mode); err != nil {
			return err
		}
	}
	if err := p.setOwnership(filepath.Join(dir, ts), true); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	top := map[string]bool{}
	for name := range files {
		top[strings.SplitN(name, "/", 2)[0]] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" && old != ts {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// setOwnership gives a volume to the pod's fsGroup, as the kubelet does:
// each file and directory group-owned by it, files group-readable (and
// -writable unless the volume is read-only: secrets and the like),
// directories set-group-ID so that new files inherit the group.
func (p *podRun) setOwnership(root string, readOnly bool) error {
	if p.fsGroup == nil {
		return nil
	}
	gid := int(*p.fsGroup)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, gid); err != nil {
			return err
		}
		m := info.Mode()
		if d.IsDir() {
			if readOnly {
				return os.Chmod(path, m.Perm()|0o050|os.ModeSetgid)
			}
			return os.Chmod(path, m.Perm()|0o070|os.ModeSetgid|(m&os.ModeSticky))
		}
		if readOnly {
			return os.Chmod(path, m.Perm()|0o440)
		}
		return os.Chmod(path, m.Perm()|0o660)
	})
}
