// Package validation checks ichor.dev objects in their internal form and
// reports every problem as a field.Error with the exact path.
package validation

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// validateNamespacedMeta checks the metadata of a namespaced object.
func validateNamespacedMeta(meta *metav1.ObjectMeta) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(meta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

// validateClusterMeta checks the metadata of a cluster-scoped object.
func validateClusterMeta(meta *metav1.ObjectMeta) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMeta(meta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

func validateMetaUpdate(newMeta, oldMeta *metav1.ObjectMeta) field.ErrorList {
	return apimachineryvalidation.ValidateObjectMetaUpdate(newMeta, oldMeta, field.NewPath("metadata"))
}

// validateObjectName checks a reference to another object by name.
func validateObjectName(name string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(fldPath, name, msg))
	}
	return errs
}

// validateRequiredName checks a required reference to another object by name.
func validateRequiredName(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return validateObjectName(name, fldPath)
}

// validateNameList checks a set of object names: each valid, none repeated.
func validateNameList(names []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, name := range names {
		errs = append(errs, validateRequiredName(name, fldPath.Index(i))...)
		if seen.Has(name) {
			errs = append(errs, field.Duplicate(fldPath.Index(i), name))
		}
		seen.Insert(name)
	}
	return errs
}

// validateVersion checks a Talos or Kubernetes release: a semantic version with a leading v.
func validateVersion(v string, fldPath *field.Path) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(fldPath, "a semantic version such as v1.13.0")}
	}
	if !strings.HasPrefix(v, "v") {
		return field.ErrorList{field.Invalid(fldPath, v, "must be a semantic version with a leading v, such as v1.13.0")}
	}
	if _, err := utilversion.ParseSemantic(v); err != nil {
		return field.ErrorList{field.Invalid(fldPath, v, fmt.Sprintf("must be a semantic version with a leading v, such as v1.13.0: %v", err))}
	}
	return nil
}

// validateHTTPSURL checks an absolute https URL with a host and no credentials, query or fragment.
func validateHTTPSURL(raw string, fldPath *field.Path) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(fldPath, "an https URL")}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, raw, fmt.Sprintf("must be an https URL: %v", err))}
	}
	switch {
	case u.Scheme != "https":
		return field.ErrorList{field.Invalid(fldPath, raw, "must use the https scheme")}
	case u.Hostname() == "":
		return field.ErrorList{field.Invalid(fldPath, raw, "must name a host")}
	case u.User != nil:
		return field.ErrorList{field.Invalid(fldPath, raw, "must not carry user information")}
	case u.RawQuery != "" || u.Fragment != "":
		return field.ErrorList{field.Invalid(fldPath, raw, "must not have a query or fragment")}
	}
	if p := u.Port(); p != "" {
		if errs := validatePort(p, fldPath, raw); len(errs) > 0 {
			return errs
		}
	}
	return nil
}

// validateHostPort checks host:port, where host is an IP address or a DNS name.
func validateHostPort(address string, fldPath *field.Path) field.ErrorList {
	if address == "" {
		return field.ErrorList{field.Required(fldPath, "host:port of the Talos API")}
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, address, "must be host:port, with an IP address or DNS name as host")}
	}
	if errs := validatePort(port, fldPath, address); len(errs) > 0 {
		return errs
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fldPath, address, "host must be an IP address or DNS name: "+strings.Join(msgs, "; "))}
	}
	return nil
}

func validatePort(port string, fldPath *field.Path, value string) field.ErrorList {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return field.ErrorList{field.Invalid(fldPath, value, "port must be between 1 and 65535")}
	}
	return nil
}

// validateCIDRs checks a list of networks in canonical CIDR form, without repeats.
func validateCIDRs(cidrs []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, c := range cidrs {
		if _, err := parseCanonicalCIDR(c); err != nil {
			errs = append(errs, field.Invalid(fldPath.Index(i), c, err.Error()))
		}
		if seen.Has(c) {
			errs = append(errs, field.Duplicate(fldPath.Index(i), c))
		}
		seen.Insert(c)
	}
	return errs
}

func parseCanonicalCIDR(c string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(c)
	if err != nil {
		return p, fmt.Errorf("must be a network in CIDR notation, such as 10.244.0.0/16")
	}
	if p.Masked() != p {
		return p, fmt.Errorf("must be the network address of the prefix, %s", p.Masked())
	}
	return p, nil
}

// validateEnum checks that a value is one of the allowed ones; empty is reported as required.
func validateEnum[T ~string](v T, fldPath *field.Path, allowed ...T) field.ErrorList {
	strs := make([]string, len(allowed))
	for i, a := range allowed {
		if v == a {
			return nil
		}
		strs[i] = string(a)
	}
	if v == "" {
		return field.ErrorList{field.Required(fldPath, "one of "+strings.Join(strs, ", "))}
	}
	return field.ErrorList{field.NotSupported(fldPath, v, strs)}
}

// validateOptionalEnum is validateEnum for a field that may be empty.
func validateOptionalEnum[T ~string](v T, fldPath *field.Path, allowed ...T) field.ErrorList {
	if v == "" {
		return nil
	}
	return validateEnum(v, fldPath, allowed...)
}

// validateConditions checks status conditions the way Kubernetes does for its own types.
func validateConditions(conditions []metav1.Condition, fldPath *field.Path) field.ErrorList {
	return metav1validation.ValidateConditions(conditions, fldPath)
}

// validateSecretKey checks a reference to one key of a Secret.
func validateSecretKey(name, key string, fldPath *field.Path) field.ErrorList {
	errs := validateRequiredName(name, fldPath.Child("name"))
	if key == "" {
		return append(errs, field.Required(fldPath.Child("key"), ""))
	}
	for _, msg := range validation.IsConfigMapKey(key) {
		errs = append(errs, field.Invalid(fldPath.Child("key"), key, msg))
	}
	return errs
}

// validateImmutableSpec reports any change to a spec that cannot change after
// creation, without echoing the spec (it may hold keys) into the error.
func validateImmutableSpec(newSpec, oldSpec any, fldPath *field.Path, hint string) field.ErrorList {
	if apiequality.Semantic.DeepEqual(newSpec, oldSpec) {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "is immutable; "+hint)}
}

// validateImmutable reports a change to a field that cannot change after creation.
func validateImmutable(newVal, oldVal any, fldPath *field.Path, hint string) field.ErrorList {
	errs := apimachineryvalidation.ValidateImmutableField(newVal, oldVal, fldPath)
	if len(errs) > 0 && hint != "" {
		errs[0].Detail += "; " + hint
	}
	return errs
}

// validateFieldSubresources refuses, on the main endpoint, a change to a
// field of resource that only its subresource writes (with its own RBAC),
// naming that subresource. The value is not echoed: such fields may hold credentials.
func validateFieldSubresources(resource string, obj, old any) field.ErrorList {
	var errs field.ErrorList
	for _, f := range ichor.FieldSubresources {
		if f.Resource != resource || f.Shared || apiequality.Semantic.DeepEqual(f.Value(obj), f.Value(old)) {
			continue
		}
		errs = append(errs, field.Forbidden(fieldPath(f.Field), "changes only through the "+f.Path()+" subresource"))
	}
	return errs
}

// fieldPath turns a dotted field path (spec.secretsRef) into a *field.Path.
func fieldPath(dotted string) *field.Path {
	parts := strings.Split(dotted, ".")
	return field.NewPath(parts[0], parts[1:]...)
}

// validateCABundle checks PEM certificates, without echoing them.
func validateCABundle(bundle string, fldPath *field.Path) field.ErrorList {
	rest := []byte(bundle)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must hold only PEM CERTIFICATE blocks, found "+b.Type)}
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "holds a certificate that does not parse: "+err.Error())}
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must be PEM certificates and nothing else")}
	}
	return nil
}
