// Package initializer hands Ichor's admission plugins what they need beyond
// the generic server's: a client of Ichor's own API, served by the server
// itself through its loopback connection, and informers on it.
package initializer

import (
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
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

// WantsIchorInformers is implemented by plugins that may answer from a
// cache where a stale answer can only be corrected by a fresh read, never
// let something through that the fresh read would refuse.
type WantsIchorInformers interface {
	SetIchorInformers(externalversions.SharedInformerFactory)
	admission.InitializationValidator
}

// New returns an initializer that gives plugins client and informers, which
// the server starts once it serves.
func New(client versioned.Interface, informers externalversions.SharedInformerFactory) admission.PluginInitializer {
	return initializer{client: client, informers: informers}
}

type initializer struct {
	client    versioned.Interface
	informers externalversions.SharedInformerFactory
}

// Initialize implements admission.PluginInitializer.
func (i initializer) Initialize(p admission.Interface) {
	if w, ok := p.(WantsIchorClient); ok {
		w.SetIchorClient(i.client)
	}
	if w, ok := p.(WantsIchorInformers); ok {
		w.SetIchorInformers(i.informers)
	}
}
