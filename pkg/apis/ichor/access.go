package ichor

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The custom RBAC verbs of Ichor's actions. Each is asked of the authorizer
// beyond the HTTP method's verb, on the subresource the action names, so RBAC
// rules can grant exactly one action and `kubectl auth can-i` tells the truth
// (CustomVerbs says who holds each, on what).
const (
	// VerbApprove on talosmachines/approval decides about a machine.
	VerbApprove = "approve"
	// VerbStart on talosoperations/<type> starts an operation of that type.
	VerbStart = "start"
	// VerbReclaim on machinereclaims starts a reclaim.
	VerbReclaim = "reclaim"
	// VerbOverride on talosclusters, talosmachines and talosconfigpatches lets
	// the next change past a safety check.
	VerbOverride = "override"
	// VerbDownload on a download subresource (talosmachines/etcd-snapshot, …)
	// streams it; a TalosCredentialRequest needs it on the download its
	// purpose stands for.
	VerbDownload = "download"
	// VerbUpdate on a field subresource (talosclusters/secret-references, …)
	// writes that field, on create as on update.
	VerbUpdate = "update"
	// VerbGrant on ichorusers/<role> (viewer, operator, admin) manages the
	// IchorUsers of that role: creating one, changing or deleting one,
	// giving a user the role, setting one's password. RBAC says who may
	// manage whom, not group names in code; admins hold it for every role.
	VerbGrant = "grant"
	// VerbAuthenticate on ichorusers checks an IchorUser's password and
	// records the sign-in (ichorusers/NAME/login). Only Ichor's token
	// issuer holds it: a holder could guess passwords, so no role has it,
	// not even admin, who can set a password but never test one.
	VerbAuthenticate = "authenticate"
)

// The audit annotations ichor-apiserver adds to the requests they describe
// (artifacts/audit-policy.yaml keeps them at the Metadata level).
const (
	// AuditAnnotationOverride names the safety check a change went past, who
	// allowed it and why: a delete past the quorum check, a patch past the
	// secrets check.
	AuditAnnotationOverride = "ichor.dev/override"
	// AuditAnnotationProvisioningNetworkOverride names an admin who placed a
	// machine outside the provisioning networks, and why.
	AuditAnnotationProvisioningNetworkOverride = "ichor.dev/provisioning-network-override"
	// AuditAnnotationDownload says who downloaded what.
	AuditAnnotationDownload = "ichor.dev/download"
)

// PrivilegedApprovalSubresource is where the approve verb is asked, beyond
// talosmachines/approval, for an approval that hands out a cluster's root of
// trust: a control plane (its config holds every CA key), or any machine of a
// cluster already bootstrapped (its config joins a running cluster, with the
// cluster's bootstrap token). Admins hold it; operators approve workers of a
// cluster being built.
const PrivilegedApprovalSubresource = "privileged-approval"

// PrivilegedPatchSubresource is where the update verb is asked for every
// write of a TalosConfigPatch in the privileged class (render.ClassPrivileged):
// creating, changing or deleting it. Admins hold it.
const PrivilegedPatchSubresource = "privileged"

// SecurityDowngradeSubresource is where the update verb is asked for a write
// of a TalosCluster that weakens its spec.security (customverbs.Hardening).
// It is no endpoint, as talosconfigpatches/privileged is none: admins hold
// it, so an operator turns hardening on but cannot turn off what an admin set.
const SecurityDowngradeSubresource = "security-downgrade"

// The groups whose members hold each Ichor role, as artifacts/roles.yaml binds them.
const (
	GroupViewer   = "ichor:viewer"
	GroupOperator = "ichor:operator"
	GroupAdmin    = "ichor:admin"
)

// The prefixes of the people's names Kubernetes sees: IchorUsers signed in
// at Ichor's issuer, and people of an OpenID provider, in the management
// cluster (artifacts/kube-apiserver/authentication-config.yaml) and in a
// managed cluster that trusts the provider (spec.authentication), where
// their groups carry OIDCPrefix too. No token can name a system: user.
const (
	IchorUserPrefix = "ichor:"
	OIDCPrefix      = "oidc:"
)

// FieldSubresource is a spec field that only its own subresource writes,
// with the update verb on that subresource: the main endpoint refuses a
// change to it, and a create that sets it (to anything but its default) needs
// the same verb, so an admin-only field is admin-only from the object's first write.
// A Shared one is written by the main endpoint too: its subresource lets a
// writer hold that one field and nothing else of the spec.
// +k8s:deepcopy-gen=false
type FieldSubresource struct {
	// Resource and Subresource name the endpoint (talosclusters, secret-references).
	Resource, Subresource string
	// Field is the field's path in the versioned API (spec.secretsRef).
	Field string
	// Value returns the field of obj, an internal object of Resource.
	Value func(obj any) any
	// Copy sets the field of dst to that of src, internal objects of Resource.
	Copy func(dst, src any)
	// Shared fields are written by the main endpoint as well.
	Shared bool
	// Role is the lowest of the default roles that holds update on the
	// subresource; NoRole when only ichor-controller writes the field.
	Role UserRole
}

// Path is the endpoint as RBAC names it: resource/subresource.
func (f FieldSubresource) Path() string { return f.Resource + "/" + f.Subresource }

// FieldSubresources are every field subresource of the API. The registry
// serves them, validation refuses their fields on the main endpoint, and
// admission asks their verb on create: all from this table.
var FieldSubresources = []FieldSubresource{
	specField(UserRoleAdmin, "talosclusters", "cilium-values", "spec.ciliumValues", func(c *TalosCluster) *string { return &c.Spec.CiliumValues }),
	specField(UserRoleAdmin, "talosclusters", "secret-references", "spec.secretsRef", func(c *TalosCluster) **LocalSecretReference { return &c.Spec.SecretsRef }),
	specField(UserRoleAdmin, "talosclusters", "authentication", "spec.authentication", func(c *TalosCluster) **ClusterAuthentication { return &c.Spec.Authentication }),
	specField(UserRoleAdmin, "talosclusters", "backup", "spec.backup", func(c *TalosCluster) **ClusterBackup { return &c.Spec.Backup }),
	// The installer chooses what code every node runs.
	specField(UserRoleAdmin, "talosclusters", "installer-image", "spec.security.secureBoot.installerImage", func(c *TalosCluster) *string {
		return &c.Spec.Security.SecureBoot.InstallerImage
	}),
	// So does the schematic: its extensions and overlay run on the node,
	// its kernel arguments decide how the node boots.
	specField(UserRoleAdmin, "talosclusters", "schematic", "spec.schematic", func(c *TalosCluster) **Schematic { return &c.Spec.Schematic }),
	specField(UserRoleAdmin, "talosmachines", "schematic", "spec.schematic", func(m *TalosMachine) **Schematic { return &m.Spec.Schematic }),
	// Operators set the Kubernetes version as they build a cluster;
	// ichor-controller, which writes no other spec, moves it at the end of a
	// kubernetes-upgrade.
	shared(specField(NoRole, "talosclusters", "kubernetes-version", "spec.kubernetesVersion", func(c *TalosCluster) *string { return &c.Spec.KubernetesVersion })),
	// The schedule marks the backups it creates; retention prunes only
	// those, so nobody else may mark one.
	specField(NoRole, "talosbackups", "schedule", "spec.scheduledAt", func(b *TalosBackup) **metav1.Time { return &b.Spec.ScheduledAt }),
	specField(UserRoleAdmin, "ichorinstallations", "version", "spec.version", func(i *IchorInstallation) *string { return &i.Spec.Version }),
	specField(UserRoleAdmin, "ichorinstallations", "settings", "spec.settings", func(i *IchorInstallation) *InstallationSettings { return &i.Spec.Settings }),
}

// FieldSubresourcesOf are the field subresources of resource.
func FieldSubresourcesOf(resource string) []FieldSubresource {
	var out []FieldSubresource
	for _, f := range FieldSubresources {
		if f.Resource == resource {
			out = append(out, f)
		}
	}
	return out
}

func shared(f FieldSubresource) FieldSubresource {
	f.Shared = true
	return f
}

// specField is a row of FieldSubresources whose field at addresses in an
// object of type T, written through the subresource by role and above.
func specField[T, F any](role UserRole, resource, subresource, path string, at func(*T) *F) FieldSubresource {
	return FieldSubresource{
		Resource: resource, Subresource: subresource, Field: path, Role: role,
		Value: func(o any) any { return *at(o.(*T)) },
		Copy:  func(dst, src any) { *at(dst.(*T)) = *at(src.(*T)) },
	}
}
