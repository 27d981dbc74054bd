package customverbs

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validatePurpose checks that the requester of a TalosCredentialRequest holds
// every right its purpose's certificate gives (purposeRights): on the cluster
// (talosconfig-reader), on each machine named (all machines of the namespace
// when none is), or on the whole namespace for a right a certificate valid on
// every node gives everywhere.
func (p *Plugin) validatePurpose(ctx context.Context, a admission.Attributes) error {
	req, ok := a.GetObject().(*ichor.TalosCredentialRequest)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s expected a TalosCredentialRequest, got %T", PluginName, a.GetObject()))
	}
	rule, ok := ichor.CredentialPurposes[req.Spec.Purpose]
	if !ok {
		return admission.NewForbidden(a, fmt.Errorf("purpose %q grants no credential", req.Spec.Purpose))
	}
	for _, r := range rule.Rights {
		names := req.Spec.Machines
		switch {
		case r.Resource == "talosclusters":
			names = []string{req.Spec.ClusterName}
		case r.EveryMachine || len(names) == 0:
			names = []string{""} // every object of the resource in the namespace
		}
		for _, name := range names {
			target := fmt.Sprintf("%s/%s %q", r.Resource, r.Subresource, name)
			if name == "" {
				target = fmt.Sprintf("%s/%s of every %s in the namespace", r.Resource, r.Subresource, strings.TrimSuffix(r.Resource, "s"))
			}
			q := question{
				verb: r.Verb, group: ichor.GroupName, version: a.GetResource().Version, resource: r.Resource, subresource: r.Subresource,
				namespace: a.GetNamespace(), name: name,
			}
			if err := p.ask(ctx, a, q, fmt.Sprintf("request a %s credential: it needs the %q verb on %s", req.Spec.Purpose, r.Verb, target)); err != nil {
				return err
			}
		}
	}
	return nil
}
