package customverbs

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/authz"
)

// question is what a check asks the authorizer of the request's user: may
// it verb on resource (resource/subresource, when subresource is set) of
// group, the object name in namespace; "" name asks of every one there.
type question struct {
	verb                  string
	group, version        string
	resource, subresource string
	namespace, name       string
}

// ask asks q of the request's user. When the authorizer does not allow it,
// the request is forbidden: "user NAME cannot " and refusal, then what the
// authorizer said (its reason, its error).
func (p *Plugin) ask(ctx context.Context, a admission.Attributes, q question, refusal string) error {
	decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User:            a.GetUserInfo(),
		Verb:            q.verb,
		Namespace:       q.namespace,
		APIGroup:        q.group,
		APIVersion:      q.version,
		Resource:        q.resource,
		Subresource:     q.subresource,
		Name:            q.name,
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot %s", a.GetUserInfo().GetName(), refusal)
	return admission.NewForbidden(a, errors.New(authz.Denied(msg, reason, err)))
}

// onRequest is verb on the request's own resource, subresource on, for the
// object the request names.
func onRequest(a admission.Attributes, verb, on string) question {
	gvr := a.GetResource()
	name := a.GetName()
	if name == "" && a.GetOldObject() != nil {
		// A collection delete admits each object under the collection's name, "".
		if m, err := meta.Accessor(a.GetOldObject()); err == nil {
			name = m.GetName()
		}
	}
	return question{
		verb: verb, group: gvr.Group, version: gvr.Version, resource: gvr.Resource, subresource: on,
		namespace: a.GetNamespace(), name: name,
	}
}

// authorize asks verb on the request's resource (and subresource on) for the
// object the request names, and refuses with what needs saying.
func (p *Plugin) authorize(ctx context.Context, a admission.Attributes, verb, on, what string) error {
	return p.authorizeHeld(ctx, a, verb, on, what, "")
}

// authorizeHeld is authorize, its refusal ending with who holds the verb in
// Ichor's roles (artifacts/roles.yaml) when held is not "".
func (p *Plugin) authorizeHeld(ctx context.Context, a admission.Attributes, verb, on, what, held string) error {
	target := fmt.Sprintf("resource %q", a.GetResource().Resource)
	if on != "" {
		target += fmt.Sprintf(", subresource %q", on)
	}
	refusal := fmt.Sprintf("%s: it needs the %q verb on %s", what, verb, target)
	if held != "" {
		refusal += " (" + held + ")"
	}
	return p.ask(ctx, a, onRequest(a, verb, on), refusal)
}
