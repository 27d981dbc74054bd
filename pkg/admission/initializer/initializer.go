// Package initializer hands Ichor's admission plugins what they need beyond
// the generic server's: a client of Ichor's own API, served by the server
// itself through its loopback connection.
package initializer

import (
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// WantsIchorClient is implemented by plugins that read Ichor objects other
// than the one under admission. They read them fresh from storage, not from
// an informer's cache: a safety check decided on a cache that has not yet
// seen the previous request would let two requests through that together
// break what each alone keeps.
type WantsIchorClient interface {
	SetIchorClient(versioned.Interface)
	admission.InitializationValidator
}

// New returns an initializer that gives plugins client.
func New(client versioned.Interface) admission.PluginInitializer {
	return initializer{client: client}
}

type initializer struct {
	client versioned.Interface
}

// Initialize implements admission.PluginInitializer.
func (i initializer) Initialize(p admission.Interface) {
	if w, ok := p.(WantsIchorClient); ok {
		w.SetIchorClient(i.client)
	}
}
