// Package authz holds what ichor-apiserver wraps around the authorizer it
// delegates to kube-apiserver.
package authz

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// CollectionFirst wraps the delegated authorizer so that a request about
// one named object first asks whether the user may do the same to every
// object of that resource in that namespace: a SubjectAccessReview with an
// empty name, which the API defines as "all". An allow answers the request.
// Anything else asks again about the named object, so a grant by
// resourceNames still works.
//
// The delegated authorizer caches its answers keyed by the whole review,
// name included. Without this, every PUT /status or apply of an object the
// user has not touched in the cache's lifetime costs a round trip to
// kube-apiserver; with it, one review per user, verb and resource covers
// them all.
func CollectionFirst(a authorizer.Authorizer) authorizer.Authorizer {
	return collectionFirst{a}
}

type collectionFirst struct{ authorizer.Authorizer }

func (c collectionFirst) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if collection, ok := wholeCollection(a); ok {
		// An error here is not the answer: the named review decides.
		if d, reason, _ := c.Authorizer.Authorize(ctx, collection); d == authorizer.DecisionAllow {
			return d, reason, nil
		}
	}
	return c.Authorizer.Authorize(ctx, a)
}

// ConditionsAwareAuthorize allows at once what the whole collection is
// allowed, and otherwise leaves the (possibly conditional) decision to the
// wrapped authorizer.
func (c collectionFirst) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if collection, ok := wholeCollection(a); ok {
		if d, reason, _ := c.Authorizer.Authorize(ctx, collection); d == authorizer.DecisionAllow {
			return authorizer.ConditionsAwareDecisionFromParts(d, reason, nil)
		}
	}
	return c.Authorizer.ConditionsAwareAuthorize(ctx, a)
}

// wholeCollection is a's question asked of every object of its resource,
// for resource requests that name one object.
func wholeCollection(a authorizer.Attributes) (authorizer.AttributesRecord, bool) {
	if !a.IsResourceRequest() || a.GetName() == "" {
		return authorizer.AttributesRecord{}, false
	}
	fields, fieldsErr := a.GetFieldSelector()
	labels, labelsErr := a.GetLabelSelector()
	return authorizer.AttributesRecord{
		User:                      a.GetUser(),
		Verb:                      a.GetVerb(),
		Namespace:                 a.GetNamespace(),
		APIGroup:                  a.GetAPIGroup(),
		APIVersion:                a.GetAPIVersion(),
		Resource:                  a.GetResource(),
		Subresource:               a.GetSubresource(),
		ResourceRequest:           true,
		FieldSelectorRequirements: fields,
		FieldSelectorParsingErr:   fieldsErr,
		LabelSelectorRequirements: labels,
		LabelSelectorParsingErr:   labelsErr,
	}, true
}
