// Package userroles keeps IchorUsers from becoming a way around RBAC: a
// requester creates, changes, deletes or grants a role to a user only with
// the grant verb on ichorusers/<role> for each role involved (the password
// action asks it too), and the last enabled admin cannot be deleted,
// disabled or demoted, so the installation always keeps someone who can
// manage it.
package userroles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/authz"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorUserRoles"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the IchorUser role check.
type Plugin struct {
	*admission.Handler
	client     versioned.Interface
	authorizer authorizer.Authorizer
}

var (
	_ admission.ValidationInterface        = &Plugin{}
	_ initializer.WantsIchorClient         = &Plugin{}
	_ genericadmissioninit.WantsAuthorizer = &Plugin{}
)

// New returns the plugin; it needs the Ichor client before it is ready.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetIchorClient implements initializer.WantsIchorClient.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// SetAuthorizer receives the server's (delegated) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization implements admission.InitializationValidator.
func (p *Plugin) ValidateInitialization() error {
	if p.client == nil || p.authorizer == nil {
		return errors.New(PluginName + " needs an Ichor client and an authorizer")
	}
	return nil
}

// mayGrant refuses what the requester would do to a user of role unless it
// holds the grant verb on ichorusers/<role>.
func (p *Plugin) mayGrant(ctx context.Context, a admission.Attributes, role ichor.UserRole, what string) error {
	decision, reason, err := p.authorizer.Authorize(ctx, grantAttributes(a.GetUserInfo(), role, a.GetName()))
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q cannot %s an IchorUser of role %s: it needs the %q verb on resource \"ichorusers\", subresource %q",
		a.GetUserInfo().GetName(), what, role, ichor.VerbGrant, role)
	return admission.NewForbidden(a, errors.New(authz.Denied(msg, reason, err)))
}

// grantAttributes is the question whether u may manage the IchorUser name of
// role: the grant verb on ichorusers/<role>.
func grantAttributes(u user.Info, role ichor.UserRole, name string) authorizer.Attributes {
	return authorizer.AttributesRecord{
		User: u, Verb: ichor.VerbGrant, APIGroup: ichor.GroupName, APIVersion: "v1alpha1",
		Resource: "ichorusers", Subresource: string(role), Name: name, ResourceRequest: true,
	}
}

// Validate applies the rules to a write of an IchorUser or its password.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("ichorusers") {
		return nil
	}
	if a.GetSubresource() != "" {
		// The password action checks the rule itself, on the user it changes.
		return nil
	}
	switch a.GetOperation() {
	case admission.Create:
		u, ok := a.GetObject().(*ichor.IchorUser)
		if !ok {
			return nil
		}
		return p.mayGrant(ctx, a, u.Spec.Role, "create")
	case admission.Update:
		u, okNew := a.GetObject().(*ichor.IchorUser)
		old, okOld := a.GetOldObject().(*ichor.IchorUser)
		if !okNew || !okOld {
			return nil
		}
		if err := p.mayGrant(ctx, a, old.Spec.Role, "change"); err != nil {
			return err
		}
		if err := p.mayGrant(ctx, a, u.Spec.Role, "grant a role to"); err != nil {
			return err
		}
		if enabledAdmin(old) && !enabledAdmin(u) {
			return p.keepAnAdmin(ctx, a, old, "disable or demote")
		}
	case admission.Delete:
		old, ok := a.GetOldObject().(*ichor.IchorUser)
		if !ok {
			return nil
		}
		if err := p.mayGrant(ctx, a, old.Spec.Role, "delete"); err != nil {
			return err
		}
		if enabledAdmin(old) {
			return p.keepAnAdmin(ctx, a, old, "delete")
		}
	}
	return nil
}

func enabledAdmin(u *ichor.IchorUser) bool {
	return u.Spec.Role == ichor.UserRoleAdmin && !u.Spec.Disabled
}

// CountedOnAnnotation is written on the admin a removal counted on, so that
// concurrent removals of the last two admins cannot both go through.
//
// Two checks that each read the users and then remove their own would both
// see the other admin and leave none. So the check first writes to the admin
// it counts on (conditional on the version it read), and the removal itself
// is conditional on the version of the user it removes (the storage deletes
// or updates only if that user is unchanged since admission read it, and
// admits it again if not). Of two removals that count on each other, the
// one that writes second changes the other's user after that one was read:
// the other's removal fails its condition, is admitted again, and now sees
// that nobody is left to count on. This holds across server replicas,
// since etcd decides every condition.
const CountedOnAnnotation = "ichor.dev/counted-on-as-admin"

// countOnAttempts bounds how often keepAnAdmin re-reads the users when the
// admin it counts on changes under it.
const countOnAttempts = 5

// keepAnAdmin refuses the change unless another enabled admin remains, and
// marks the one it counts on (CountedOnAnnotation; not on a dry run, which
// must change nothing). It reads the users fresh from storage, not from a cache.
func (p *Plugin) keepAnAdmin(ctx context.Context, a admission.Attributes, u *ichor.IchorUser, what string) error {
	users := p.client.IchorV1alpha1().IchorUsers()
	for range countOnAttempts {
		list, err := users.List(ctx, metav1.ListOptions{})
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("list IchorUsers to keep an admin: %w", err))
		}
		other := otherAdmin(list.Items, u.Name)
		if other == nil {
			return admission.NewForbidden(a, fmt.Errorf("%s is the last enabled admin: to %s it would leave nobody who can manage Ichor users; make another user admin first", u.Name, what))
		}
		if a.IsDryRun() {
			return nil
		}
		// The update is conditional on other's resourceVersion from the list.
		metav1.SetMetaDataAnnotation(&other.ObjectMeta, CountedOnAnnotation,
			fmt.Sprintf("to %s %s at %s", what, u.Name, time.Now().UTC().Format(time.RFC3339Nano)))
		_, err = users.Update(ctx, other, metav1.UpdateOptions{FieldManager: PluginName})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue // other changed or went: read again
		default:
			return apierrors.NewInternalError(fmt.Errorf("mark IchorUser %s as the admin that remains: %w", other.Name, err))
		}
	}
	return apierrors.NewConflict(ichor.Resource("ichorusers"), u.Name,
		fmt.Errorf("the other admins kept changing while this %s checked that one remains; try again", what))
}

// otherAdmin is the first enabled admin of users, by name, that is not name
// and not being deleted, or nil.
func otherAdmin(users []v1alpha1.IchorUser, name string) *v1alpha1.IchorUser {
	var first *v1alpha1.IchorUser
	for i := range users {
		o := &users[i]
		if o.Name != name && o.DeletionTimestamp == nil && o.Spec.Role == v1alpha1.UserRoleAdmin && !o.Spec.Disabled &&
			(first == nil || o.Name < first.Name) {
			first = o
		}
	}
	return first
}
