package ichor

import "slices"

// NoRole is the Role of a verb none of the default roles holds: only a
// ServiceAccount of Ichor's does (ichor-controller, ichor-auth).
const NoRole UserRole = ""

// UserRoles are the default roles, lowest first: each holds what the ones
// before it hold (artifacts/roles.yaml aggregates them).
var UserRoles = []UserRole{UserRoleViewer, UserRoleOperator, UserRoleAdmin}

// RolesFrom are role and the roles above it: those that hold what role
// holds. NoRole: none.
func RolesFrom(role UserRole) []UserRole {
	i := slices.Index(UserRoles, role)
	if i < 0 {
		return nil
	}
	return UserRoles[i:]
}

// ClusterRoleOf is the ClusterRole of artifacts/roles.yaml that holds role's
// rules, bound to the group ichor:<role>.
func ClusterRoleOf(role UserRole) string { return "ichor-" + string(role) }

// VerbRule is a verb ichor-apiserver asks beyond the HTTP method's, on the
// resources or subresources it is asked on, and who holds it by default.
// +k8s:deepcopy-gen=false
type VerbRule struct {
	// Verb is the verb asked (start, download, …).
	Verb string
	// On are where it is asked: resource or resource/subresource.
	On []string
	// Request says which request asks it.
	Request string
	// Role is the lowest of the default roles that holds it; NoRole when
	// none does.
	Role UserRole
	// AlsoHeldBy are the other ClusterRoles of artifacts/roles.yaml that
	// hold it, bound where an installation chooses.
	AlsoHeldBy []string
	// Alongside are the verbs the same roles hold on the same paths, which
	// kube-apiserver asks before the request reaches ichor-apiserver (get
	// for a download, patch for a patch of a subresource).
	Alongside []string
}

// CustomVerbs are every verb ichor-apiserver asks beyond the HTTP method's
// (and delete on talosmachines, which resets a node), built from the tables
// of operation types, downloads and field subresources.
// docs/reference/verbs.md is generated from it; the tests of artifacts
// check roles.yaml against it, and test/integration the live RBAC.
var CustomVerbs = func() []VerbRule {
	rules := []VerbRule{
		{Verb: VerbApprove, On: []string{"talosmachines/approval"}, Role: UserRoleOperator, Alongside: []string{"get", "update", "patch"},
			Request: "approving or rejecting a discovered machine (PATCH talosmachines/NAME/approval)"},
		{Verb: VerbApprove, On: []string{"talosmachines/" + PrivilegedApprovalSubresource}, Role: UserRoleAdmin,
			Request: "approving a control plane, or a machine into a bootstrapped cluster: asked beyond talosmachines/approval"},
	}
	for _, role := range []UserRole{UserRoleOperator, UserRoleAdmin} {
		var on []string
		for _, d := range Operations {
			if d.Role == role {
				on = append(on, "talosoperations/"+string(d.Type))
			}
		}
		rules = append(rules, VerbRule{Verb: VerbStart, On: on, Role: role,
			Request: "starting an operation of that type (POST talosoperations/NAME/start), or deleting one that runs"})
	}
	for _, role := range []UserRole{UserRoleAdmin, NoRole} {
		var on []string
		for _, f := range FieldSubresources {
			if f.Role == role {
				on = append(on, f.Path())
			}
		}
		rule := VerbRule{Verb: VerbUpdate, On: on, Role: role, Alongside: []string{"get", "patch"},
			Request: "writing the field of that subresource, on create as on update; the main endpoint refuses it"}
		if role == NoRole {
			rule.Alongside = nil
			rule.Request = "writing the field through its subresource, which only ichor-controller does"
		}
		rules = append(rules, rule)
	}
	rules = append(rules,
		VerbRule{Verb: VerbUpdate, On: []string{"ichorusers/password"}, Role: UserRoleAdmin, Alongside: []string{"get", "patch"},
			Request: "setting an IchorUser's password (PUT ichorusers/NAME/password)"},
		VerbRule{Verb: VerbUpdate, On: []string{"talosconfigpatches/" + PrivilegedPatchSubresource}, Role: UserRoleAdmin,
			Request: "creating, changing or deleting a TalosConfigPatch in the privileged class"},
		VerbRule{Verb: VerbUpdate, On: []string{"talosclusters/" + SecurityDowngradeSubresource}, Role: UserRoleAdmin,
			Request: "a write of a TalosCluster that weakens spec.security"},
		VerbRule{Verb: VerbOverride, On: []string{"talosclusters", "talosmachines", "talosconfigpatches"}, Role: UserRoleAdmin,
			Request: "letting the next change past a safety check (POST RESOURCE/NAME/override); a Warning Event names the user"},
		VerbRule{Verb: VerbReclaim, On: []string{"machinereclaims"}, Role: UserRoleAdmin, AlsoHeldBy: []string{"ichor-machine-reclaimer"},
			Request: "starting a reclaim (POST machinereclaims/NAME/reclaim)"},
	)
	for _, role := range []UserRole{UserRoleOperator, UserRoleAdmin} {
		var on []string
		for _, d := range Downloads {
			if d.Role == role {
				on = append(on, d.Path())
			}
		}
		rules = append(rules, VerbRule{Verb: VerbDownload, On: on, Role: role, Alongside: []string{"get"},
			Request: "GET of the download, streamed, or a TalosCredentialRequest of its purpose; an Event names the user"})
	}
	var grants []string
	for _, role := range UserRoles {
		grants = append(grants, "ichorusers/"+string(role))
	}
	return append(rules,
		VerbRule{Verb: VerbGrant, On: grants, Role: UserRoleAdmin,
			Request: "creating, changing or deleting an IchorUser of that role, giving a user the role, setting its password"},
		VerbRule{Verb: VerbAuthenticate, On: []string{"ichorusers"}, Role: NoRole,
			Request: "checking an IchorUser's password (POST ichorusers/NAME/login): only ichor-auth's ServiceAccount"},
		VerbRule{Verb: "delete", On: []string{"talosmachines"}, Role: UserRoleAdmin,
			Request: "deleting a TalosMachine, which resets its node"},
	)
}()
