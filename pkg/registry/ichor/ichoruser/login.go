package ichoruser

import (
	"context"
	"errors"
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

// LoginSubresource is the path element of the login endpoint.
const LoginSubresource = "login"

// login is POST ichorusers/NAME/login, asked by Ichor's token issuer when
// the user signs in: it checks the body's password against the stored hash
// and records the sign-in in status.lastLoginAt. The password is checked
// before the user's state, so that only someone who knows it learns that
// the user is disabled; a user without a password costs the same time as a
// wrong password. Refusals write nothing.
var login = resource.Action[*ichor.IchorUser]{
	Name:    LoginSubresource,
	Verb:    ichor.VerbAuthenticate,
	NewBody: func() runtime.Object { return &ichor.IchorUserLogin{} },
	Apply: func(ctx context.Context, u *ichor.IchorUser, body runtime.Object) error {
		p, ok := body.(*ichor.IchorUserLogin)
		if !ok {
			return apierrors.NewBadRequest(fmt.Sprintf("expected an IchorUserLogin, got %T", body))
		}
		mismatch := apierrors.NewInvalid(ichor.Kind("IchorUserLogin"), u.Name,
			field.ErrorList{field.Invalid(field.NewPath("password"), field.OmitValueType{}, "does not match the user's password")})
		release, ok := passwordhash.Acquire()
		if !ok {
			return apierrors.NewTooManyRequests("too many passwords are being checked at once; try again", 1)
		}
		defer release()
		if len(p.Password) > passwordhash.MaxBytes || u.Status.PasswordHash == "" {
			passwordhash.VerifyNothing(p.Password)
			return mismatch
		}
		match, err := passwordhash.Verify(u.Status.PasswordHash, p.Password)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("the stored password hash of IchorUser %s: %w", u.Name, err))
		}
		if !match {
			return mismatch
		}
		if u.Spec.Disabled {
			err := apierrors.NewForbidden(ichor.Resource("ichorusers"), u.Name, errors.New("the user is disabled"))
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: v1alpha1.CauseTypeUserDisabled, Message: "the user is disabled"}}
			return err
		}
		now := metav1.Now()
		u.Status.LastLoginAt = &now
		return nil
	},
	Event: func(ctx context.Context, u *ichor.IchorUser, _ runtime.Object) resource.ActionEvent {
		by := "someone"
		if user, ok := genericapirequest.UserFrom(ctx); ok {
			by = user.GetName()
		}
		return resource.ActionEvent{Reason: v1alpha1.EventSignedIn,
			Message: fmt.Sprintf("IchorUser %s signed in with a password, checked for %s", u.Name, by)}
	},
}
