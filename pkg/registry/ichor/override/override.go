// Package override is the override action of TalosClusters, TalosMachines and
// TalosConfigPatches: POST …/NAME/override with a check and a reason records
// in status.override that the next change of the object may go past that
// safety check. The check that would refuse the change consumes it.
package override

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Subresource is the path element of the override endpoints.
const Subresource = "override"

// maxReasonLength bounds the recorded reason.
const maxReasonLength = 1024

// Action returns the override action of a kind whose changes the checks
// guard; field returns the object's status.override.
func Action[T resource.Object](kind string, checks []ichor.SafetyCheck, field func(T) **ichor.OverrideStatus) resource.Action[T] {
	return resource.Action[T]{
		Name:    Subresource,
		Verb:    ichor.VerbOverride, // on the kind itself
		NewBody: func() runtime.Object { return &ichor.Override{} },
		Apply: func(ctx context.Context, obj T, body runtime.Object) error {
			o, ok := body.(*ichor.Override)
			if !ok {
				return apierrors.NewBadRequest(fmt.Sprintf("expected an Override, got %T", body))
			}
			if errs := validate(o, checks); len(errs) > 0 {
				return apierrors.NewInvalid(ichor.Kind("Override"), obj.GetName(), errs)
			}
			user, _ := genericapirequest.UserFrom(ctx)
			if user == nil || user.GetName() == "" {
				return apierrors.NewForbidden(ichor.Resource(kind), obj.GetName(), fmt.Errorf("an override must name an authenticated user"))
			}
			*field(obj) = &ichor.OverrideStatus{Check: o.Check, Reason: o.Reason, By: user.GetName(), At: metav1.Now()}
			return nil
		},
		Event: func(_ context.Context, obj T, _ runtime.Object) resource.ActionEvent {
			g := *field(obj)
			return resource.ActionEvent{Reason: v1alpha1.EventOverrideGranted,
				Message: fmt.Sprintf("%s lets the next change of %s %s go past the %s check: %s", g.By, kind, obj.GetName(), g.Check, g.Reason)}
		},
	}
}

// validate checks the request body.
func validate(o *ichor.Override, checks []ichor.SafetyCheck) field.ErrorList {
	var errs field.ErrorList
	known := false
	for _, c := range checks {
		known = known || c == o.Check
	}
	if o.Check == "" {
		errs = append(errs, field.Required(field.NewPath("check"), "the safety check to go past"))
	} else if !known {
		names := make([]string, len(checks))
		for i, c := range checks {
			names[i] = string(c)
		}
		errs = append(errs, field.NotSupported(field.NewPath("check"), o.Check, names))
	}
	switch {
	case o.Reason == "":
		errs = append(errs, field.Required(field.NewPath("reason"), "say why; it is recorded with your name"))
	case len(o.Reason) > maxReasonLength:
		errs = append(errs, field.TooLong(field.NewPath("reason"), "", maxReasonLength))
	}
	return errs
}

// KeepGranted is the rule of the status endpoint for status.override: it may
// clear a granted override (the controller does, once it used it), but
// never grant or change one; only the override action does.
func KeepGranted(current **ichor.OverrideStatus, stored *ichor.OverrideStatus) {
	if *current != nil {
		*current = stored
	}
}
