// Package initializer hands Ichor's admission plugins what they need beyond
// the generic server's: informers over Ichor's own objects, served by the
// server itself through its loopback client.
package initializer

import (
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/generated/informers/externalversions"
)

// WantsIchorInformers is implemented by plugins that read Ichor objects
// other than the one under admission.
type WantsIchorInformers interface {
	SetIchorInformers(externalversions.SharedInformerFactory)
	admission.InitializationValidator
}

// New returns an initializer that gives plugins factory.
func New(factory externalversions.SharedInformerFactory) admission.PluginInitializer {
	return initializer{factory: factory}
}

type initializer struct {
	factory externalversions.SharedInformerFactory
}

// Initialize implements admission.PluginInitializer.
func (i initializer) Initialize(p admission.Interface) {
	if w, ok := p.(WantsIchorInformers); ok {
		w.SetIchorInformers(i.factory)
	}
}
