package mgmtnode

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// env is a container's environment as the kubelet builds it: the image's,
// then the Services' (the kubernetes Service's always, the namespace's
// when enableServiceLinks is not false), then envFrom and env in order,
// each value's $(VAR) references expanded.
func (p *podRun) env(cr *containerRun) ([]string, error) {
	c := &cr.spec
	cfg, err := cr.image.ConfigFile()
	if err != nil {
		return nil, err
	}
	var order []string
	vals := map[string]string{}
	put := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, kv := range cfg.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		put(k, v)
	}
	put("HOSTNAME", p.pod.Name)
	links := p.pod.Spec.EnableServiceLinks == nil || *p.pod.Spec.EnableServiceLinks
	for _, svc := range p.node.services() {
		if svc.Namespace == metav1.NamespaceDefault && svc.Name == "kubernetes" || links && svc.Namespace == p.pod.Namespace {
			for k, v := range serviceEnv(svc) {
				put(k, v)
			}
		}
	}
	ctx := p.ctx
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := p.node.client.CoreV1().ConfigMaps(p.pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
					continue
				}
				return nil, fmt.Errorf("envFrom configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := p.node.client.CoreV1().Secrets(p.pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
					continue
				}
				return nil, fmt.Errorf("envFrom secret %q: %w", from.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		for k, v := range data {
			put(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		v := expand(e.Value, vals)
		if f := e.ValueFrom; f != nil {
			switch {
			case f.FieldRef != nil:
				if v, err = p.fieldValue(f.FieldRef.FieldPath); err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
			case f.SecretKeyRef != nil:
				s, err := p.node.client.CoreV1().Secrets(p.pod.Namespace).Get(ctx, f.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("env %s: secret %q: %w", e.Name, f.SecretKeyRef.Name, err)
				}
				data, ok := s.Data[f.SecretKeyRef.Key]
				if !ok {
					return nil, fmt.Errorf("env %s: secret %q has no key %q", e.Name, f.SecretKeyRef.Name, f.SecretKeyRef.Key)
				}
				v = string(data)
			case f.ConfigMapKeyRef != nil:
				cm, err := p.node.client.CoreV1().ConfigMaps(p.pod.Namespace).Get(ctx, f.ConfigMapKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, fmt.Errorf("env %s: configmap %q: %w", e.Name, f.ConfigMapKeyRef.Name, err)
				}
				data, ok := cm.Data[f.ConfigMapKeyRef.Key]
				if !ok {
					return nil, fmt.Errorf("env %s: configmap %q has no key %q", e.Name, f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key)
				}
				v = data
			default:
				return nil, fmt.Errorf("env %s: only fieldRef, secretKeyRef and configMapKeyRef run on this node", e.Name)
			}
		}
		put(e.Name, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

// fieldValue is a pod field a downward API reference names.
func (p *podRun) fieldValue(path string) (string, error) {
	pod := p.pod
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return "127.0.0.1", nil
	}
	for _, m := range []struct {
		prefix string
		values map[string]string
	}{{"metadata.labels", pod.Labels}, {"metadata.annotations", pod.Annotations}} {
		if path == m.prefix {
			keys := make([]string, 0, len(m.values))
			for k := range m.values {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var b strings.Builder
			for _, k := range keys {
				fmt.Fprintf(&b, "%s=%q\n", k, m.values[k])
			}
			return b.String(), nil
		}
		if key, ok := strings.CutPrefix(path, m.prefix+"['"); ok {
			return m.values[strings.TrimSuffix(key, "']")], nil
		}
	}
	return "", fmt.Errorf("field %s is not one this node fills", path)
}

// serviceEnv is the Docker-links style variables the kubelet sets for a Service.
func serviceEnv(svc *corev1.Service) map[string]string {
	out := map[string]string{}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
		return out
	}
	name := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_"))
	ip := svc.Spec.ClusterIP
	first := svc.Spec.Ports[0]
	out[name+"_SERVICE_HOST"] = ip
	out[name+"_SERVICE_PORT"] = strconv.Itoa(int(first.Port))
	out[name+"_PORT"] = fmt.Sprintf("%s://%s:%d", strings.ToLower(string(first.Protocol)), ip, first.Port)
	for _, port := range svc.Spec.Ports {
		if port.Name != "" {
			out[name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(port.Name, "-", "_"))] = strconv.Itoa(int(port.Port))
		}
		proto := strings.ToUpper(string(port.Protocol))
		prefix := fmt.Sprintf("%s_PORT_%d_%s", name, port.Port, proto)
		out[prefix] = fmt.Sprintf("%s://%s:%d", strings.ToLower(proto), ip, port.Port)
		out[prefix+"_PROTO"] = strings.ToLower(proto)
		out[prefix+"_PORT"] = strconv.Itoa(int(port.Port))
		out[prefix+"_ADDR"] = ip
	}
	return out
}
