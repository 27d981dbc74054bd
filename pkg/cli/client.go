package cli

import (
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// clientIn is the ichor.dev client and the namespace the command acts in.
func (o *Options) clientIn() (versioned.Interface, string, error) {
	c, err := o.client()
	if err != nil {
		return nil, "", err
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

// kube is the Kubernetes client (Secrets, Events), as the same person.
func (o *Options) kube() (kubernetes.Interface, error) {
	cfg, err := o.rest()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
