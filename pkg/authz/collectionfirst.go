// Package authz holds what ichor-apiserver wraps around the authorizer it
// delegates to kube-apiserver.
package authz

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
)

// CollectionFirst wraps the delegated authorizer so that a request about
// one named object of group first asks whether the user may do the same to
// every object of that resource in that namespace: a SubjectAccessReview
// with an empty name, which the API defines as "all". An allow answers the
// request. Anything else asks again about the named object, so a grant by
// resourceNames still works. Requests outside group, such as impersonation
// checks, are asked as they are.
//
// The delegated authorizer caches its answers keyed by the whole review,
// name included. Without this, every PUT /status or apply of an object the
// user has not touched in the cache's lifetime costs a round trip to
// kube-apiserver; with it, one review per user, verb and resource covers
// them all.
//
// It trusts kube-apiserver's authorizers to answer the question about all
// objects as the API defines it. RBAC and Node do. A webhook that denies
// one named object but has no opinion about all of them (say, through a
// match condition on the name) would be bypassed; such clusters turn this
// off (ichor-apiserver --authorization-ask-collection-first=false).
func CollectionFirst(a authorizer.Authorizer, group string) authorizer.Authorizer {
	return collectionFirst{Authorizer: a, group: group}
}

type collectionFirst struct {
	authorizer.Authorizer
	group string
}

func (c collectionFirst) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if allowed, reason := c.collectionAllowed(ctx, a); allowed {
		return authorizer.DecisionAllow, reason, nil
	}
	return c.Authorizer.Authorize(ctx, a)
}

// ConditionsAwareAuthorize allows at once what the whole collection is
// allowed, and otherwise leaves the (possibly conditional) decision to the
// wrapped authorizer.
func (c collectionFirst) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if allowed, reason := c.collectionAllowed(ctx, a); allowed {
		return authorizer.ConditionsAwareDecisionFromParts(authorizer.DecisionAllow, reason, nil)
	}
	return c.Authorizer.ConditionsAwareAuthorize(ctx, a)
}

// collectionAllowed asks a's question of every object of its resource, for
// requests that name one object of c's group. An error is not an answer:
// the named question decides.
func (c collectionFirst) collectionAllowed(ctx context.Context, a authorizer.Attributes) (bool, string) {
	if !a.IsResourceRequest() || a.GetName() == "" || a.GetAPIGroup() != c.group {
		return false, ""
	}
	fields, fieldsErr := a.GetFieldSelector()
	labels, labelsErr := a.GetLabelSelector()
	d, reason, err := c.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
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
	})
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Asking about every object failed; asking about the named one",
			"user", a.GetUser().GetName(), "verb", a.GetVerb(), "resource", a.GetResource(), "subresource", a.GetSubresource(), "err", err)
	}
	return d == authorizer.DecisionAllow, reason
}
