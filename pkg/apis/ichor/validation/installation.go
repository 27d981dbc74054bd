package validation

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// Bounds on installation settings. Scans are bounded so one setting cannot make
// the controller probe millions of addresses.
const (
	minScanInterval        = ichor.MinScanInterval
	maxTalosCredentialLife = ichor.MaxTalosCredentialLifetime
	maxReaderTalosconfig   = ichor.MaxReaderTalosconfigLifetime
	minIPv4ScanPrefix      = 16
	minIPv6ScanPrefix      = 112
)

// ValidateIchorInstallation checks an IchorInstallation on create.
func ValidateIchorInstallation(in *ichor.IchorInstallation) field.ErrorList {
	errs := validateClusterMeta(&in.ObjectMeta)
	if in.Name != "" && in.Name != ichor.InstallationName {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), in.Name, "the installation is a singleton named "+ichor.InstallationName))
	}
	return append(errs, validateInstallationSpec(&in.Spec, field.NewPath("spec"))...)
}

// ValidateIchorInstallationUpdate checks an IchorInstallation on update.
func ValidateIchorInstallationUpdate(in, old *ichor.IchorInstallation) field.ErrorList {
	errs := ValidateIchorInstallationFieldUpdate(in, old)
	return append(errs, validateFieldSubresources("ichorinstallations", in, old)...)
}

// ValidateIchorInstallationFieldUpdate checks an update through the version
// or settings subresource: the whole object must stay valid.
func ValidateIchorInstallationFieldUpdate(in, old *ichor.IchorInstallation) field.ErrorList {
	errs := validateMetaUpdate(&in.ObjectMeta, &old.ObjectMeta)
	return append(errs, validateInstallationSpec(&in.Spec, field.NewPath("spec"))...)
}

// ValidateIchorInstallationStatusUpdate checks a status written through /status.
func ValidateIchorInstallationStatusUpdate(in, old *ichor.IchorInstallation) field.ErrorList {
	errs := validateMetaUpdate(&in.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	errs = append(errs, validateConditions(in.Status.Conditions, status.Child("conditions"))...)
	names := sets.New[string]()
	for i, c := range in.Status.Components {
		p := status.Child("components").Index(i).Child("name")
		if c.Name == "" {
			errs = append(errs, field.Required(p, ""))
		} else if names.Has(c.Name) {
			errs = append(errs, field.Duplicate(p, c.Name))
		}
		names.Insert(c.Name)
	}
	return errs
}

func validateInstallationSpec(s *ichor.IchorInstallationSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Version != "" {
		errs = append(errs, validateVersion(s.Version, fldPath.Child("version"))...)
	}
	settings := fldPath.Child("settings")
	nets := settings.Child("provisioningNetworks")
	errs = append(errs, validateCIDRs(s.Settings.ProvisioningNetworks, nets)...)
	for i, c := range s.Settings.ProvisioningNetworks {
		p, err := parseCanonicalCIDR(c)
		if err != nil {
			continue
		}
		if p.Addr().Is4() && p.Bits() < minIPv4ScanPrefix {
			errs = append(errs, field.Invalid(nets.Index(i), c, "IPv4 networks to scan must be /16 or smaller"))
		}
		if p.Addr().Is6() && p.Bits() < minIPv6ScanPrefix {
			errs = append(errs, field.Invalid(nets.Index(i), c, "IPv6 networks to scan must be /112 or smaller"))
		}
	}
	errs = append(errs, validateNamespaceNetworks(s.Settings.NamespaceProvisioningNetworks, settings.Child("namespaceProvisioningNetworks"))...)
	errs = append(errs, validateAudiences(s.Settings.ManagementAudiences, settings.Child("managementAudiences"))...)
	errs = append(errs, validateAmbientBuckets(s.Settings.AmbientCredentialBuckets, settings.Child("ambientCredentialBuckets"))...)
	errs = append(errs, validateImageFactory(s.Settings.ImageFactory, settings.Child("imageFactory"))...)
	errs = append(errs, validateDuration(s.Settings.ScanInterval, settings.Child("scanInterval"), minScanInterval, 0)...)
	lifetimes := settings.Child("credentialLifetimes")
	errs = append(errs, validateDuration(s.Settings.CredentialLifetimes.TalosCredential, lifetimes.Child("talosCredential"), time.Minute, maxTalosCredentialLife)...)
	errs = append(errs, validateDuration(s.Settings.CredentialLifetimes.ReaderTalosconfig, lifetimes.Child("readerTalosconfig"), time.Minute, maxReaderTalosconfig)...)
	return errs
}

// validateDuration checks an optional duration against a minimum and, when max > 0, a maximum.
func validateDuration(d *metav1.Duration, fldPath *field.Path, minimum, maximum time.Duration) field.ErrorList {
	switch {
	case d == nil:
		return nil
	case d.Duration < minimum:
		return field.ErrorList{field.Invalid(fldPath, d.Duration.String(), "must be at least "+minimum.String())}
	case maximum > 0 && d.Duration > maximum:
		return field.ErrorList{field.Invalid(fldPath, d.Duration.String(), "must be at most "+maximum.String())}
	}
	return nil
}

// validateNamespaceNetworks checks each namespace's networks: a namespace
// once, with at least one canonical CIDR. They are not scanned, so any
// size is allowed.
func validateNamespaceNetworks(list []ichor.NamespaceProvisioningNetworks, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, n := range list {
		p := fldPath.Index(i)
		if n.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(n.Namespace) {
				errs = append(errs, field.Invalid(p.Child("namespace"), n.Namespace, msg))
			}
			if seen.Has(n.Namespace) {
				errs = append(errs, field.Duplicate(p.Child("namespace"), n.Namespace))
			}
			seen.Insert(n.Namespace)
		}
		if len(n.Networks) == 0 {
			errs = append(errs, field.Required(p.Child("networks"), "at least one CIDR; remove the entry to use provisioningNetworks"))
		}
		errs = append(errs, validateCIDRs(n.Networks, p.Child("networks"))...)
	}
	return errs
}

// validateAudiences checks management audiences: each a non-empty
// OAuth client ID without spaces, once.
func validateAudiences(list []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, a := range list {
		switch {
		case a == "":
			errs = append(errs, field.Required(fldPath.Index(i), "an audience (an OAuth client ID)"))
		case strings.ContainsAny(a, " \t\n"):
			errs = append(errs, field.Invalid(fldPath.Index(i), a, "an audience has no whitespace"))
		case seen.Has(a):
			errs = append(errs, field.Duplicate(fldPath.Index(i), a))
		}
		seen.Insert(a)
	}
	return errs
}

// validateAmbientBuckets checks the buckets backups may reach with the
// controller's own identity, in the form v1alpha1.AmbientBucket gives them.
func validateAmbientBuckets(list []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, b := range list {
		if err := v1alpha1.ValidAmbientBucket(b); err != nil {
			errs = append(errs, field.Invalid(fldPath.Index(i), b, err.Error()))
		}
		if seen.Has(b) {
			errs = append(errs, field.Duplicate(fldPath.Index(i), b))
		}
		seen.Insert(b)
	}
	return errs
}
