package ichoruser

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
	"ichor.dev/ichor/pkg/passwordhash"
	"ichor.dev/ichor/pkg/registry/resource"
)

// PasswordSubresource is the path element of the password endpoint.
const PasswordSubresource = "password"

// password is PUT ichorusers/NAME/password: it stores the argon2id hash of
// the body's password in status.passwordHash, which no response carries
// (Definition.Decorate), and records when. The requester needs the grant
// verb on ichorusers/<the user's role>, as for every other write of a user.
var password = resource.Action[*ichor.IchorUser]{
	Name:    PasswordSubresource,
	Replace: true,
	// Asked of the stored user the update changes, not of a separate read
	// that a racing create or role change could outrun.
	Verb:    ichor.VerbGrant,
	VerbOn:  func(u *ichor.IchorUser) string { return string(u.Spec.Role) },
	NewBody: func() runtime.Object { return &ichor.IchorUserPassword{} },
	Apply: func(ctx context.Context, u *ichor.IchorUser, body runtime.Object) error {
		p, ok := body.(*ichor.IchorUserPassword)
		if !ok {
			return apierrors.NewBadRequest(fmt.Sprintf("expected an IchorUserPassword, got %T", body))
		}
		if err := passwordhash.Check(p.Password); err != nil {
			// The value never goes into the error.
			return apierrors.NewInvalid(ichor.Kind("IchorUserPassword"), u.Name,
				field.ErrorList{field.Invalid(field.NewPath("password"), field.OmitValueType{}, err.Error())})
		}
		hash, err := passwordhash.Hash(p.Password)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("hash the password: %w", err))
		}
		now := metav1.Now()
		u.Status.PasswordHash, u.Status.PasswordSet, u.Status.PasswordChangedAt = hash, true, &now
		return nil
	},
	Event: func(ctx context.Context, u *ichor.IchorUser, _ runtime.Object) resource.ActionEvent {
		by := "someone"
		if user, ok := genericapirequest.UserFrom(ctx); ok {
			by = user.GetName()
		}
		return resource.ActionEvent{Reason: v1alpha1.EventPasswordChanged,
			Message: fmt.Sprintf("%s set the password of IchorUser %s", by, u.Name)}
	},
}
