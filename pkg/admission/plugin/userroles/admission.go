// Package userroles keeps IchorUsers from becoming a way around RBAC: a
// requester grants, changes or deletes only users whose role is below its
// own (an admin any; ichor.MayManageUser, which the password action checks
// too), and the last enabled admin cannot be deleted, disabled or demoted,
// so the installation always keeps someone who can manage it.
package userroles

import (
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"ichor.dev/ichor/pkg/admission/initializer"
	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
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

// Validate applies the rules to a write of an IchorUser or its password.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != ichor.Resource("ichorusers") {
		return nil
	}
	if a.GetSubresource() != "" {
		// The password action checks the rule itself, on the user it changes.
		return nil
	}
	below := func(target ichor.UserRole, what string) error {
		if err := ichor.CheckManagesUser(a.GetUserInfo().GetName(), a.GetUserInfo().GetGroups(), target, what); err != nil {
			return admission.NewForbidden(a, err)
		}
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
