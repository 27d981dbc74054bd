// Package userroles keeps IchorUsers from becoming a way around RBAC: a
// requester grants, changes or sets the password of only users whose role
// is below its own (an admin of any), and the last enabled admin cannot be
// deleted, disabled or demoted, so the installation always keeps someone who
// can manage it.
package userroles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// PluginName names the plugin in --enable-admission-plugins and friends.
const PluginName = "IchorUserRoles"

// Groups whose members hold each Ichor role, as artifacts/roles.yaml binds them.
const (
	GroupViewer   = "ichor:viewer"
	GroupOperator = "ichor:operator"
	GroupAdmin    = "ichor:admin"
)

// rank orders the roles; 0 is none.
var rank = map[ichor.UserRole]int{ichor.UserRoleViewer: 1, ichor.UserRoleOperator: 2, ichor.UserRoleAdmin: 3}

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin is the IchorUser role check.
type Plugin struct {
	*admission.Handler
	client versioned.Interface
}

var (
	_ admission.ValidationInterface = &Plugin{}
	_ initializer.WantsIchorClient  = &Plugin{}
)

// New returns the plugin; it needs the Ichor client before it is ready.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetIchorClient implements initializer.WantsIchorClient.
func (p *Plugin) SetIchorClient(c versioned.Interface) { p.client = c }

// ValidateInitialization implements admission.InitializationValidator.
func (p *Plugin) ValidateInitialization() error {
	if p.client == nil {
		return errors.New(PluginName + " has no Ichor client")
	}
	return nil
}

// requesterRank is the highest Ichor role the requester holds through its
// groups; system:masters counts as admin.
func requesterRank(u user.Info) (int, ichor.UserRole) {
	groups := u.GetGroups()
	switch {
	case slices.Contains(groups, GroupAdmin) || slices.Contains(groups, user.SystemPrivilegedGroup):
		return rank[ichor.UserRoleAdmin], ichor.UserRoleAdmin
	case slices.Contains(groups, GroupOperator):
		return rank[ichor.UserRoleOperator], ichor.UserRoleOperator
	case slices.Contains(groups, GroupViewer):
		return rank[ichor.UserRoleViewer], ichor.UserRoleViewer
	}
	return 0, ""
}

// Validate applies the rules to a write of an IchorUser or its password.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("ichorusers") {
		return nil
	}
	requester := a.GetUserInfo()
	mine, myRole := requesterRank(requester)
	isAdmin := myRole == ichor.UserRoleAdmin
	below := func(target ichor.UserRole, what string) error {
		if isAdmin || rank[target] < mine {
			return nil
		}
		held := "no Ichor role"
		if myRole != "" {
			held = "the " + string(myRole) + " role"
		}
		return admission.NewForbidden(a, fmt.Errorf("%s holds %s and may %s only users whose role is below it, not %s", requester.GetName(), held, what, target))
	}

	switch {
	case a.GetSubresource() == "password" && a.GetOperation() == admission.Update:
		target, err := p.client.IchorV1alpha1().IchorUsers().Get(ctx, a.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // the storage answers NotFound
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("read IchorUser %s: %w", a.GetName(), err))
		}
		return below(ichor.UserRole(target.Spec.Role), "set the password of")
	case a.GetSubresource() != "":
		return nil
	}

	switch a.GetOperation() {
	case admission.Create:
		u, ok := a.GetObject().(*ichor.IchorUser)
		if !ok {
			return nil
		}
		return below(u.Spec.Role, "create")
	case admission.Update:
		u, okNew := a.GetObject().(*ichor.IchorUser)
		old, okOld := a.GetOldObject().(*ichor.IchorUser)
		if !okNew || !okOld {
			return nil
		}
		if err := below(old.Spec.Role, "change"); err != nil {
			return err
		}
		if err := below(u.Spec.Role, "grant a role to"); err != nil {
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
		if err := below(old.Spec.Role, "delete"); err != nil {
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

// keepAnAdmin refuses the change unless another enabled admin remains. It
// reads the users fresh from storage, not from a cache.
func (p *Plugin) keepAnAdmin(ctx context.Context, a admission.Attributes, u *ichor.IchorUser, what string) error {
	list, err := p.client.IchorV1alpha1().IchorUsers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("list IchorUsers to keep an admin: %w", err))
	}
	for _, o := range list.Items {
		if o.Name != u.Name && o.DeletionTimestamp == nil && o.Spec.Role == v1alpha1.UserRoleAdmin && !o.Spec.Disabled {
			return nil
		}
	}
	return admission.NewForbidden(a, fmt.Errorf("%s is the last enabled admin: to %s it would leave nobody who can manage Ichor users; make another user admin first", u.Name, what))
}
