package validation

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v4"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// extensionName is an official extension's name: its publisher, a slash,
// and its name (siderolabs/iscsi-tools).
var extensionName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?/[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)

// checkExtensionName refuses a name that is not an official extension's.
func checkExtensionName(name string) error {
	if !extensionName.MatchString(name) {
		return fmt.Errorf("%q is not an extension name such as siderolabs/iscsi-tools", name)
	}
	return nil
}

// checkKernelArg refuses what is not one kernel argument.
func checkKernelArg(arg string) error {
	if arg == "" || strings.ContainsAny(arg, " \t\n") {
		return fmt.Errorf("%q must be one argument, without spaces", arg)
	}
	return nil
}

// maxSchematicItems bounds a schematic's extensions and kernel arguments.
const maxSchematicItems = 64

// validateSchematic refuses a schematic the Image Factory would not build:
// each extension an official one's name, listed once; each kernel argument
// one argument; an overlay with its name, its image and options that are a
// YAML mapping.
func validateSchematic(s *ichor.Schematic, fldPath *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	extensions := fldPath.Child("systemExtensions")
	if len(s.SystemExtensions) > maxSchematicItems {
		errs = append(errs, field.TooMany(extensions, len(s.SystemExtensions), maxSchematicItems))
	}
	seen := sets.New[string]()
	for i, e := range s.SystemExtensions {
		if err := checkExtensionName(e); err != nil {
			errs = append(errs, field.Invalid(extensions.Index(i), e, err.Error()))
		} else if seen.Has(e) {
			errs = append(errs, field.Duplicate(extensions.Index(i), e))
		}
		seen.Insert(e)
	}
	args := fldPath.Child("extraKernelArgs")
	if len(s.ExtraKernelArgs) > maxSchematicItems {
		errs = append(errs, field.TooMany(args, len(s.ExtraKernelArgs), maxSchematicItems))
	}
	for i, a := range s.ExtraKernelArgs {
		if err := checkKernelArg(a); err != nil {
			errs = append(errs, field.Invalid(args.Index(i), a, err.Error()))
		}
	}
	if o := s.Overlay; o != nil {
		overlay := fldPath.Child("overlay")
		if o.Name == "" {
			errs = append(errs, field.Required(overlay.Child("name"), "the overlay's name (rpi_generic)"))
		}
		if o.Image == "" {
			errs = append(errs, field.Required(overlay.Child("image"), "the overlay's image repository (siderolabs/sbc-raspberrypi)"))
		} else {
			errs = append(errs, validateImageRepository(o.Image, overlay.Child("image"))...)
		}
		if o.Options != "" {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(o.Options), &m); err != nil {
				errs = append(errs, field.Invalid(overlay.Child("options"), "<options>", "must be a YAML mapping: "+err.Error()))
			}
		}
	}
	return errs
}

// validateImageFactory refuses a factory that is not an https URL, or
// whose registry is not a host[:port].
func validateImageFactory(f *ichor.ImageFactory, fldPath *field.Path) field.ErrorList {
	if f == nil {
		return nil
	}
	errs := validateHTTPSURL(f.URL, fldPath.Child("url"))
	if f.Registry != "" {
		u, err := url.Parse("https://" + f.Registry)
		if err != nil || u.Host != f.Registry || u.Hostname() == "" {
			errs = append(errs, field.Invalid(fldPath.Child("registry"), f.Registry, "must be a registry host[:port], without a scheme or path"))
		} else if p := u.Port(); p != "" {
			errs = append(errs, validatePort(p, fldPath.Child("registry"), f.Registry)...)
		}
	}
	return errs
}
