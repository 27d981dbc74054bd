package validation

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/blang/semver/v4"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// maxCIDRsPerFamily allows one network per IP family (dual stack).
const maxCIDRsPerFamily = 2

// ValidateTalosCluster checks a TalosCluster on create.
func ValidateTalosCluster(c *ichor.TalosCluster) field.ErrorList {
	errs := validateNamespacedMeta(&c.ObjectMeta)
	return append(errs, validateTalosClusterSpec(&c.Spec, nil, field.NewPath("spec"))...)
}

// ValidateTalosClusterUpdate checks a TalosCluster on update. The networks are
// fixed once the cluster exists: Talos cannot move a running cluster to new ones.
func ValidateTalosClusterUpdate(c, old *ichor.TalosCluster) field.ErrorList {
	errs := ValidateTalosClusterFieldUpdate(c, old)
	return append(errs, validateFieldSubresources("talosclusters", c, old)...)
}

// ValidateTalosClusterFieldUpdate checks an update through a subresource that
// writes one part of the spec (cilium-values, secret-references,
// authentication): the whole object must stay valid.
func ValidateTalosClusterFieldUpdate(c, old *ichor.TalosCluster) field.ErrorList {
	errs := validateMetaUpdate(&c.ObjectMeta, &old.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateTalosClusterSpec(&c.Spec, &old.Spec, spec)...)
	errs = append(errs, validateContractMove(c.Spec.TalosVersion, old.Spec.TalosVersion, old.Status.TalosVersion, spec.Child("talosVersion"))...)
	network := spec.Child("network")
	errs = append(errs, validateImmutable(c.Spec.Network.PodCIDRs, old.Spec.Network.PodCIDRs, network.Child("podCIDRs"), "")...)
	errs = append(errs, validateImmutable(c.Spec.Network.ServiceCIDRs, old.Spec.Network.ServiceCIDRs, network.Child("serviceCIDRs"), "")...)
	errs = append(errs, validateImmutable(c.Spec.Network.DNSDomain, old.Spec.Network.DNSDomain, network.Child("dnsDomain"), "")...)
	return errs
}

// ValidateTalosClusterStatusUpdate checks a status written through /status.
func ValidateTalosClusterStatusUpdate(c, old *ichor.TalosCluster) field.ErrorList {
	errs := validateMetaUpdate(&c.ObjectMeta, &old.ObjectMeta)
	status := field.NewPath("status")
	s := &c.Status
	errs = append(errs, validateOptionalEnum(s.Phase, status.Child("phase"),
		ichor.ClusterPhasePending, ichor.ClusterPhaseProvisioning, ichor.ClusterPhaseReady, ichor.ClusterPhaseDegraded, ichor.ClusterPhaseDeleting)...)
	errs = append(errs, validateConditions(s.Conditions, status.Child("conditions"))...)
	if s.ObservedGeneration < 0 {
		errs = append(errs, field.Invalid(status.Child("observedGeneration"), s.ObservedGeneration, "must not be negative"))
	}
	if s.TalosVersion != "" {
		errs = append(errs, validateVersion(s.TalosVersion, status.Child("talosVersion"))...)
	}
	if s.KubernetesVersion != "" {
		errs = append(errs, validateVersion(s.KubernetesVersion, status.Child("kubernetesVersion"))...)
	}
	if s.KubernetesCA != "" {
		errs = append(errs, validateCABundle(s.KubernetesCA, status.Child("kubernetesCA"))...)
	}
	if c := s.Credentials; c != nil {
		p := status.Child("credentials")
		errs = append(errs, validateRequiredName(c.Rotation, p.Child("rotation"))...)
		if (c.ServedTo == "") != (c.ServedAt == nil) {
			errs = append(errs, field.Invalid(p.Child("servedAt"), c.ServedAt, "servedTo and servedAt are set together"))
		}
	}
	if r := s.CARotation; r != nil {
		p := status.Child("caRotation")
		errs = append(errs, validateRequiredName(r.Operation, p.Child("operation"))...)
		errs = append(errs, validateEnum(r.Phase, p.Child("phase"), CARotationPhases...)...)
		if !r.Talos && !r.Kubernetes {
			errs = append(errs, field.Required(p, "the CAs the rotation replaces: talos, kubernetes, or both"))
		}
	}
	if r := s.DiskKeyRotation; r != nil {
		p := status.Child("diskKeyRotation")
		errs = append(errs, validateRequiredName(r.Operation, p.Child("operation"))...)
		errs = append(errs, validateEnum(r.Phase, p.Child("phase"), DiskKeyRotationPhases...)...)
		errs = append(errs, validateKeySlot(r.Slot, p.Child("slot"))...)
		if r.Slot == s.DiskKeySlot {
			errs = append(errs, field.Invalid(p.Child("slot"), r.Slot, "the new key's slot must differ from status.diskKeySlot, the old key's"))
		}
	}
	errs = append(errs, validateKeySlot(s.DiskKeySlot, status.Child("diskKeySlot"))...)
	if d := s.Disruption; d != nil {
		fld := status.Child("disruption")
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(d.Machine, false) {
			errs = append(errs, field.Invalid(fld.Child("machine"), d.Machine, msg))
		}
		if d.MachineUID == "" {
			errs = append(errs, field.Required(fld.Child("machineUID"), "the holding machine's UID"))
		}
		errs = append(errs, validateEnum(d.Action, fld.Child("action"),
			ichor.DisruptionReboot, ichor.DisruptionAPIServerRestart, ichor.DisruptionReset, ichor.DisruptionEtcdDefrag, ichor.DisruptionShutdown)...)
		if d.Since.IsZero() {
			errs = append(errs, field.Required(fld.Child("since"), "when the machine took the budget"))
		}
		if d.Operation != "" {
			for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(d.Operation, false) {
				errs = append(errs, field.Invalid(fld.Child("operation"), d.Operation, msg))
			}
		}
		if len(d.Batch) > 0 && d.Operation == "" {
			errs = append(errs, field.Forbidden(fld.Child("batch"), "only an operation takes machines away in batches"))
		}
		seen := map[string]bool{d.Machine: true}
		for i, b := range d.Batch {
			p := fld.Child("batch").Index(i)
			errs = append(errs, validateRequiredName(b.Machine, p.Child("machine"))...)
			if b.MachineUID == "" {
				errs = append(errs, field.Required(p.Child("machineUID"), "the machine's UID"))
			}
			if seen[b.Machine] {
				errs = append(errs, field.Duplicate(p.Child("machine"), b.Machine))
			}
			seen[b.Machine] = true
		}
	}
	return errs
}

// validateTalosClusterSpec checks a cluster's spec; old is the stored one
// on an update, nil on create.
func validateTalosClusterSpec(s, old *ichor.TalosClusterSpec, fldPath *field.Path) field.ErrorList {
	errs := validateVersion(s.TalosVersion, fldPath.Child("talosVersion"))
	errs = append(errs, validateVersion(s.KubernetesVersion, fldPath.Child("kubernetesVersion"))...)
	// The versions must be ones Ichor manages; a cluster stored before a
	// release left the table keeps them until they change.
	if len(errs) == 0 && (old == nil || old.TalosVersion != s.TalosVersion || old.KubernetesVersion != s.KubernetesVersion) {
		errs = append(errs, validateTalosRelease(s.TalosVersion, s.KubernetesVersion, fldPath)...)
	}
	errs = append(errs, validateHTTPSURL(s.ControlPlane.Endpoint, fldPath.Child("controlPlane", "endpoint"))...)
	errs = append(errs, validateClusterNetwork(&s.Network, fldPath.Child("network"))...)

	if s.CiliumValues != "" {
		valuesPath := fldPath.Child("ciliumValues")
		if s.Network.CNI.Name != ichor.CNICilium {
			errs = append(errs, field.Forbidden(valuesPath, "may only be set when spec.network.cni.name is cilium"))
		} else if err := yaml.Unmarshal([]byte(s.CiliumValues), &map[string]any{}); err != nil {
			errs = append(errs, field.Invalid(valuesPath, "<values>", "must be a YAML mapping of Helm values: "+err.Error()))
		}
	}
	if s.SecretsRef != nil {
		errs = append(errs, validateRequiredName(s.SecretsRef.Name, fldPath.Child("secretsRef", "name"))...)
	}
	if a := s.Authentication; a != nil {
		errs = append(errs, validateClusterAuthentication(a, fldPath.Child("authentication"))...)
	}
	if s.Backup != nil {
		errs = append(errs, validateClusterBackup(s.Backup, fldPath.Child("backup"))...)
	}
	if e := s.Security.DiskEncryption; e != nil {
		keys := []string{string(ichor.DiskEncryptionKeyTPM), string(ichor.DiskEncryptionKeyNodeID)}
		if !slices.Contains(keys, string(e.Key)) {
			errs = append(errs, field.NotSupported(fldPath.Child("security", "diskEncryption", "key"), e.Key, keys))
		}
	}
	errs = append(errs, validateSchematic(s.Schematic, fldPath.Child("schematic"))...)
	if img := s.Security.SecureBoot.InstallerImage; img != "" {
		errs = append(errs, validateImageRepository(img, fldPath.Child("security", "secureBoot", "installerImage"))...)
	}
	ksc := s.Security.KubeletServingCertificates
	if ksc.VerifyFromAPIServer && !ksc.Enabled {
		errs = append(errs, field.Forbidden(fldPath.Child("security", "kubeletServingCertificates", "verifyFromAPIServer"),
			"requires spec.security.kubeletServingCertificates.enabled"))
	}
	return errs
}

// validateContractMove refuses moving spec.talosVersion, the cluster's
// version contract, to a Talos minor release newer than its machines run
// (status.talosVersion): a node refuses a config of a newer contract, so
// the machines are upgraded first (a talos-upgrade operation), then the
// contract moves. A cluster whose machines report no version yet may move.
func validateContractMove(spec, old, running string, fldPath *field.Path) field.ErrorList {
	if spec == old || running == "" {
		return nil
	}
	to, err1 := semver.ParseTolerant(spec)
	from, err2 := semver.ParseTolerant(old)
	runs, err3 := semver.ParseTolerant(running)
	if err1 != nil || err2 != nil || err3 != nil {
		return nil // validateVersion says what is wrong
	}
	minor := func(v semver.Version) semver.Version { return semver.Version{Major: v.Major, Minor: v.Minor} }
	if minor(to).GT(minor(from)) && minor(to).GT(minor(runs)) {
		return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf(
			"the cluster's machines run Talos %s, and a node refuses a config of the v%d.%d contract: "+
				"upgrade them first (a talos-upgrade operation to %s), then move spec.talosVersion", running, to.Major, to.Minor, spec))}
	}
	return nil
}

// validateTalosRelease refuses a Talos version outside ichor.TalosReleases,
// and a Kubernetes version that release does not run.
func validateTalosRelease(talos, kubernetes string, fldPath *field.Path) field.ErrorList {
	r, err := ichor.TalosReleaseOf(talos)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath.Child("talosVersion"), talos, err.Error())}
	}
	if err := r.RunsKubernetes(kubernetes); err != nil {
		return field.ErrorList{field.Invalid(fldPath.Child("kubernetesVersion"), kubernetes, err.Error())}
	}
	return nil
}

func validateClusterNetwork(n *ichor.ClusterNetwork, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, list := range []struct {
		name  string
		cidrs []string
	}{{"podCIDRs", n.PodCIDRs}, {"serviceCIDRs", n.ServiceCIDRs}} {
		p := fldPath.Child(list.name)
		switch {
		case len(list.cidrs) == 0:
			errs = append(errs, field.Required(p, "at least one network"))
		case len(list.cidrs) > maxCIDRsPerFamily:
			errs = append(errs, field.TooMany(p, len(list.cidrs), maxCIDRsPerFamily))
		}
		errs = append(errs, validateCIDRs(list.cidrs, p)...)
		if len(list.cidrs) == maxCIDRsPerFamily && list.cidrs[0] != list.cidrs[1] {
			first, err0 := parseCanonicalCIDR(list.cidrs[0])
			second, err1 := parseCanonicalCIDR(list.cidrs[1])
			if err0 == nil && err1 == nil && first.Addr().Is4() == second.Addr().Is4() {
				errs = append(errs, field.Invalid(p.Index(1), list.cidrs[1], "a second network must be of the other IP family (dual stack)"))
			}
		}
	}
	// Families are compared only once both lists are valid on their own.
	if pod, svc := ipFamilies(n.PodCIDRs), ipFamilies(n.ServiceCIDRs); len(errs) == 0 && pod != "" && svc != "" && pod != svc {
		errs = append(errs, field.Invalid(fldPath.Child("serviceCIDRs"), n.ServiceCIDRs,
			"must cover the same IP families as spec.network.podCIDRs ("+pod+")"))
	}
	if n.DNSDomain == "" {
		errs = append(errs, field.Required(fldPath.Child("dnsDomain"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(n.DNSDomain) {
			errs = append(errs, field.Invalid(fldPath.Child("dnsDomain"), n.DNSDomain, msg))
		}
	}
	errs = append(errs, validateEnum(n.CNI.Name, fldPath.Child("cni", "name"), ichor.CNIFlannel, ichor.CNICilium, ichor.CNINone)...)
	return errs
}

// ipFamilies names the IP families of valid CIDRs in a list ("IPv4", "IPv6",
// "IPv4,IPv6"), or "" when none is valid.
func ipFamilies(cidrs []string) string {
	var v4, v6 bool
	for _, c := range cidrs {
		if p, err := parseCanonicalCIDR(c); err == nil {
			v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
		}
	}
	switch {
	case v4 && v6:
		return "IPv4,IPv6"
	case v4:
		return "IPv4"
	case v6:
		return "IPv6"
	}
	return ""
}

// maxClaimName bounds a claim name and a client ID: kube-apiserver takes
// each as one flag value.
const maxClaimName = 256

// claimName is what a claim name and a client ID may hold: claim names are
// often URLs (https://example.com/groups). No space, comma or "=", which
// would split a flag value.
var claimName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]+$`)

// maxIssuerCABundle bounds the PEM certificates of an OIDC issuer.
const maxIssuerCABundle = 64 << 10

func validateClusterAuthentication(a *ichor.ClusterAuthentication, fldPath *field.Path) field.ErrorList {
	errs := validateHTTPSURL(a.IssuerURL, fldPath.Child("issuerURL"))
	for _, f := range []struct {
		name, value string
	}{{"clientID", a.ClientID}, {"usernameClaim", a.UsernameClaim}, {"groupsClaim", a.GroupsClaim}} {
		p := fldPath.Child(f.name)
		switch {
		case f.value == "":
			errs = append(errs, field.Required(p, ""))
		case len(f.value) > maxClaimName:
			errs = append(errs, field.TooLong(p, "", maxClaimName))
		case !claimName.MatchString(f.value):
			errs = append(errs, field.Invalid(p, f.value, "may hold only letters, digits and _ . : / -"))
		}
	}
	if a.CABundle != "" {
		if len(a.CABundle) > maxIssuerCABundle {
			errs = append(errs, field.TooLong(fldPath.Child("caBundle"), "", maxIssuerCABundle))
		} else {
			errs = append(errs, validateCABundle(a.CABundle, fldPath.Child("caBundle"))...)
		}
	}
	return errs
}

// maxImageRepository bounds an image repository, as registries do.
const maxImageRepository = 255

// imagePathComponent is one path component of a repository, as the
// distribution spec names them (lowercase).
var imagePathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)

// imageHost is a registry host, with an optional port.
var imageHost = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?$`)

// validateImageRepository accepts an image repository without a tag or a
// digest (Ichor adds the tag): [host[:port]/]path/components.
func validateImageRepository(repo string, fldPath *field.Path) field.ErrorList {
	if len(repo) > maxImageRepository {
		return field.ErrorList{field.TooLong(fldPath, "", maxImageRepository)}
	}
	if strings.Contains(repo, "@") {
		return field.ErrorList{field.Invalid(fldPath, repo, "must not carry a digest: Ichor adds the cluster's Talos version as the tag")}
	}
	parts := strings.Split(repo, "/")
	if len(parts) > 1 && imageHost.MatchString(parts[0]) && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		parts = parts[1:]
	}
	for _, p := range parts {
		if strings.Contains(p, ":") {
			return field.ErrorList{field.Invalid(fldPath, repo, "must not carry a tag: Ichor adds the cluster's Talos version")}
		}
		if !imagePathComponent.MatchString(p) {
			return field.ErrorList{field.Invalid(fldPath, repo, "must be an image repository: [host[:port]/]lowercase/path")}
		}
	}
	return nil
}

// DiskKeyRotationPhases are the phases of a disk-encryption key rotation,
// in their order.
var DiskKeyRotationPhases = []ichor.DiskKeyRotationPhase{ichor.DiskKeyRotationAddNew, ichor.DiskKeyRotationDropOld}

// maxKeySlot is the highest LUKS2 key slot.
const maxKeySlot = 31

// validateKeySlot checks a LUKS2 key slot number.
func validateKeySlot(slot int32, fldPath *field.Path) field.ErrorList {
	if slot < 0 || slot > maxKeySlot {
		return field.ErrorList{field.Invalid(fldPath, slot, fmt.Sprintf("a LUKS2 key slot is 0 to %d", maxKeySlot))}
	}
	return nil
}

// CARotationPhases are the phases of a CA rotation, in their order.
var CARotationPhases = []ichor.CARotationPhase{ichor.CARotationAcceptNew, ichor.CARotationIssueNew, ichor.CARotationDropOld}
