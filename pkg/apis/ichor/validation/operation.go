package validation

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
)

var operationPhases = []ichor.OperationPhase{ichor.OperationPending, ichor.OperationRunning, ichor.OperationSucceeded, ichor.OperationFailed}

// ValidateTalosOperation checks a TalosOperation on create.
func ValidateTalosOperation(o *ichor.TalosOperation) field.ErrorList {
	errs := validateNamespacedMeta(&o.ObjectMeta)
	return append(errs, validateTalosOperationSpec(&o.Spec, field.NewPath("spec"))...)
}

// ValidateTalosOperationUpdate checks a TalosOperation on update: its spec is a
// record of what was asked and never changes.
func ValidateTalosOperationUpdate(o, old *ichor.TalosOperation) field.ErrorList {
	errs := validateMetaUpdate(&o.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateImmutableSpec(o.Spec, old.Spec, field.NewPath("spec"), "create a new TalosOperation instead")...)
}

// ValidateTalosOperationStatusUpdate checks a status written through /status.
func ValidateTalosOperationStatusUpdate(o, old *ichor.TalosOperation) field.ErrorList {
	errs := validateMetaUpdate(&o.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	errs = append(errs, validateOptionalEnum(o.Status.Phase, status.Child("phase"), operationPhases...)...)
	errs = append(errs, validateConditions(o.Status.Conditions, status.Child("conditions"))...)
	// A step is one machine's, or one machine's and component's, or one
	// machine's and action's; never both a component and an action.
	type stepKey struct {
		machine   string
		component ichor.KubernetesComponent
		action    ichor.StepAction
	}
	seen := sets.New[stepKey]()
	for i, step := range o.Status.Steps {
		p := status.Child("steps").Index(i)
		errs = append(errs, validateRequiredName(step.Machine, p.Child("machine"))...)
		errs = append(errs, validateOptionalEnum(step.Component, p.Child("component"), KubernetesComponents...)...)
		errs = append(errs, validateOptionalEnum(step.Action, p.Child("action"), StepActions...)...)
		if step.Component != "" && step.Action != "" {
			errs = append(errs, field.Forbidden(p.Child("action"), "a step has a component or an action, not both"))
		}
		key := stepKey{step.Machine, step.Component, step.Action}
		switch {
		case step.Machine == "" || !seen.Has(key):
		case step.Component != "":
			errs = append(errs, field.Duplicate(p.Child("component"), step.Component))
		case step.Action != "":
			errs = append(errs, field.Duplicate(p.Child("action"), step.Action))
		default:
			errs = append(errs, field.Duplicate(p.Child("machine"), step.Machine))
		}
		seen.Insert(key)
		errs = append(errs, validateEnum(step.Phase, p.Child("phase"), operationPhases...)...)
	}
	return errs
}

// StepActions are the actions of steps: an etcd-restore's in their order,
// then a shutdown's, then a ca-rotation's, then a key-rotation's.
var StepActions = []ichor.StepAction{
	ichor.ActionLeaveEtcd, ichor.ActionWipeEtcd, ichor.ActionRecoverEtcd, ichor.ActionJoinEtcd, ichor.ActionRestartKubelet,
	ichor.ActionBackup,
	ichor.ActionAcceptNewCA, ichor.ActionIssueFromNewCA, ichor.ActionDropOldCA,
	ichor.ActionAddDiskKey, ichor.ActionDropOldDiskKey,
	ichor.ActionAcceptNewKeys, ichor.ActionIssueFromNewKeys, ichor.ActionDropOldKeys,
}

// KubernetesComponents are the components a kubernetes-upgrade moves, in its order.
var KubernetesComponents = []ichor.KubernetesComponent{
	ichor.ComponentAPIServer, ichor.ComponentControllerManager, ichor.ComponentScheduler,
	ichor.ComponentProxy, ichor.ComponentKubelet,
}

func validateTalosOperationSpec(s *ichor.TalosOperationSpec, fldPath *field.Path) field.ErrorList {
	errs := validateRequiredName(s.ClusterName, fldPath.Child("clusterName"))
	d, ok := ichor.OperationFor(s.Type)
	if !ok {
		if instead, retired := ichor.RetiredOperationTypes[s.Type]; retired {
			return append(errs, field.Invalid(fldPath.Child("type"), s.Type, instead))
		}
		return append(errs, validateEnum(s.Type, fldPath.Child("type"), ichor.OperationTypes()...)...)
	}

	machines := fldPath.Child("machines")
	errs = append(errs, validateNameList(s.Machines, machines)...)
	switch d.Machines {
	case ichor.MachinesRequired:
		if len(s.Machines) == 0 {
			errs = append(errs, field.Required(machines, string(s.Type)+" acts on named machines only"))
		}
	case ichor.MachinesForbidden:
		if len(s.Machines) > 0 {
			errs = append(errs, field.Forbidden(machines, string(s.Type)+" acts on the whole cluster"))
		}
	}

	// Each parameter block belongs to exactly one type.
	for _, other := range ichor.Operations {
		for _, p := range other.Parameters {
			set := p.IsSet(s)
			switch {
			case set && s.Type != other.Type:
				errs = append(errs, field.Forbidden(fldPath.Child(p.Field), "may only be set when type is "+string(other.Type)))
			case !set && s.Type == other.Type && p.Presence != ichor.ParameterOptional:
				errs = append(errs, field.Required(fldPath.Child(p.Field), "required when type is "+string(other.Type)))
			}
		}
	}
	if s.TalosUpgrade != nil {
		p := fldPath.Child("talosUpgrade", "version")
		verrs := validateVersion(s.TalosUpgrade.Version, p)
		if len(verrs) == 0 {
			if _, err := ichor.TalosReleaseOf(s.TalosUpgrade.Version); err != nil {
				verrs = append(verrs, field.Invalid(p, s.TalosUpgrade.Version, err.Error()))
			}
		}
		errs = append(errs, verrs...)
	}
	if s.MaxUnavailable != nil {
		p := fldPath.Child("maxUnavailable")
		switch {
		case !d.Batched:
			errs = append(errs, field.Forbidden(p, "may only be set when type is one of "+batchedTypeList))
		case *s.MaxUnavailable < 1:
			errs = append(errs, field.Invalid(p, *s.MaxUnavailable, "must be at least 1"))
		case *s.MaxUnavailable > maxUnavailableLimit:
			errs = append(errs, field.Invalid(p, *s.MaxUnavailable, fmt.Sprintf("must be at most %d", maxUnavailableLimit)))
		}
	}
	if s.KubernetesUpgrade != nil {
		errs = append(errs, validateVersion(s.KubernetesUpgrade.Version, fldPath.Child("kubernetesUpgrade", "version"))...)
	}
	if r := s.NodeReset; r != nil {
		errs = append(errs, validateNodeReset(r, fldPath.Child("nodeReset"))...)
	}
	if r := s.CARotation; r != nil && (r.Talos == nil || !*r.Talos) && (r.Kubernetes == nil || !*r.Kubernetes) {
		errs = append(errs, field.Required(fldPath.Child("caRotation"),
			"a ca-rotation replaces the Talos API CA (talos: true), the Kubernetes CA (kubernetes: true), or both"))
	}
	if r := s.KeyRotation; r != nil {
		errs = append(errs, validateKeyRotation(r, fldPath.Child("keyRotation"))...)
	}
	if r := s.EtcdRestore; r != nil {
		errs = append(errs, validateRequiredName(r.Backup, fldPath.Child("etcdRestore", "backup"))...)
		errs = append(errs, validateRequiredName(r.IdentitySecret, fldPath.Child("etcdRestore", "identitySecret"))...)
	}
	return errs
}

// batchedTypeList names the types that take spec.maxUnavailable.
var batchedTypeList = func() string {
	var names []string
	for _, t := range ichor.OperationTypesWhere(func(d ichor.OperationDescriptor) bool { return d.Batched }) {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}()

// maxUserDisks bounds spec.nodeReset.userDisks.
const maxUserDisks = 64

// validateNodeReset checks a node reset's wipe against Talos's rules: user
// disks only with the modes that wipe them, and some with user-disks.
func validateNodeReset(r *ichor.NodeResetParameters, fldPath *field.Path) field.ErrorList {
	errs := validateOptionalEnum(r.Wipe, fldPath.Child("wipe"), wipeModes...)
	disks := fldPath.Child("userDisks")
	switch {
	case r.Wipe == ichor.WipeModeUserDisks && len(r.UserDisks) == 0:
		errs = append(errs, field.Required(disks, "wipe user-disks wipes only the disks named here"))
	case r.Wipe == ichor.WipeModeSystemDisk && len(r.UserDisks) > 0:
		errs = append(errs, field.Forbidden(disks, "wipe system-disk wipes no user disk; use wipe all or user-disks"))
	case len(r.UserDisks) > maxUserDisks:
		errs = append(errs, field.TooMany(disks, len(r.UserDisks), maxUserDisks))
	}
	seen := sets.New[string]()
	for i, d := range r.UserDisks {
		p := disks.Index(i)
		switch {
		case !strings.HasPrefix(d, "/dev/") || len(d) <= len("/dev/") || len(d) > 255 || strings.Contains(d, ".."):
			errs = append(errs, field.Invalid(p, d, "must be a device path such as /dev/sdb"))
		case seen.Has(d):
			errs = append(errs, field.Duplicate(p, d))
		}
		seen.Insert(d)
	}
	return errs
}

// maxUnavailableLimit bounds spec.maxUnavailable: the budget's record of the
// machines away lives in the cluster's status.
const maxUnavailableLimit = 100

var wipeModes = []ichor.WipeMode{ichor.WipeModeAll, ichor.WipeModeSystemDisk, ichor.WipeModeUserDisks}

// RotatableKeys are the keys a key-rotation can replace.
var RotatableKeys = []ichor.RotatableKey{ichor.KeyDiskEncryption, ichor.KeyServiceAccount, ichor.KeySecretsEncryption}

// MaxServiceAccountGracePeriod bounds keyRotation.serviceAccountGracePeriod:
// a month, past which an old key is no longer being rotated away.
const MaxServiceAccountGracePeriod = 720 * time.Hour

// KubernetesKeys are the keys that rotate in kube-apiserver's three phases,
// together or alone; the disk-encryption key rotates by itself.
var KubernetesKeys = []ichor.RotatableKey{ichor.KeyServiceAccount, ichor.KeySecretsEncryption}

// unrotatableKeys are names people use for keys, and what to do instead.
var unrotatableKeys = map[ichor.RotatableKey]string{
	"secretbox":    "the secretbox key that encrypts Kubernetes Secrets at rest is named secretsEncryption",
	"aescbc":       "the aescbc key only decrypts what clusters of older Talos versions wrote; the key that encrypts is secretsEncryption",
	"talosCA":      "the Talos API CA is rotated by a ca-rotation, not a key-rotation",
	"kubernetesCA": "the Kubernetes CA is rotated by a ca-rotation, not a key-rotation",
}

// validateKeyRotation checks the keys a key-rotation names: each one it
// can rotate, once, and the disk-encryption key alone.
func validateKeyRotation(r *ichor.KeyRotationParameters, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	p := fldPath.Child("keys")
	if len(r.Keys) == 0 {
		return append(errs, field.Required(p, fmt.Sprintf("the keys to rotate: %s", quoteList(RotatableKeys))))
	}
	seen := sets.New[ichor.RotatableKey]()
	for i, k := range r.Keys {
		switch why, known := unrotatableKeys[k]; {
		case known:
			errs = append(errs, field.Invalid(p.Index(i), k, fmt.Sprintf("%s; a key-rotation rotates %s", why, quoteList(RotatableKeys))))
		case !slices.Contains(RotatableKeys, k):
			errs = append(errs, field.NotSupported(p.Index(i), k, RotatableKeys))
		case seen.Has(k):
			errs = append(errs, field.Duplicate(p.Index(i), k))
		}
		seen.Insert(k)
	}
	if g := r.ServiceAccountGracePeriod; g != nil {
		switch gp := fldPath.Child("serviceAccountGracePeriod"); {
		case !seen.Has(ichor.KeyServiceAccount):
			errs = append(errs, field.Forbidden(gp, fmt.Sprintf("only a rotation of %q keeps an old key accepted for a while", ichor.KeyServiceAccount)))
		case g.Duration < 0 || g.Duration > MaxServiceAccountGracePeriod:
			errs = append(errs, field.Invalid(gp, g.Duration.String(), fmt.Sprintf("must be between 0s and %s", MaxServiceAccountGracePeriod)))
		}
	}
	if seen.Has(ichor.KeyDiskEncryption) && seen.HasAny(KubernetesKeys...) {
		errs = append(errs, field.Invalid(p, r.Keys, fmt.Sprintf("%q rotates by rebooting every machine twice, %s by restarting kube-apiserver "+
			"on each control plane: rotate them in two key-rotations", ichor.KeyDiskEncryption, quoteList(KubernetesKeys))))
	}
	return errs
}

// quoteList is values quoted and joined by commas.
func quoteList[T ~string](values []T) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = strconv.Quote(string(v))
	}
	return strings.Join(quoted, ", ")
}
