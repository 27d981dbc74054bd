// Package action holds the one rule the start and reclaim actions share: a
// pending object is started once, by an authenticated user, who is recorded.
package action

import (
	"context"
	"fmt"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// Started records that the user of ctx started the object: by and at are its
// status fields, conditions its conditions. It refuses a second start with a
// Conflict naming who started it and when.
func Started(ctx context.Context, resource schema.GroupResource, name string, generation int64,
	by *string, at **metav1.Time, conditions *[]metav1.Condition) error {
	if *at != nil {
		return apierrors.NewConflict(resource, name, fmt.Errorf("it was already started by %s at %s", *by, (*at).UTC().Format(time.RFC3339)))
	}
	user, _ := genericapirequest.UserFrom(ctx)
	if user == nil || user.GetName() == "" {
		return apierrors.NewForbidden(resource, name, fmt.Errorf("starting needs an authenticated user"))
	}
	now := metav1.Now()
	*by, *at = user.GetName(), &now
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: v1alpha1.ConditionStarted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStartedByUser,
		Message: "started by " + user.GetName(), ObservedGeneration: generation, LastTransitionTime: now,
	})
	return nil
}
