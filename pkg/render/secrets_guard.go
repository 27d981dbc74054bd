package render

import (
	"slices"
	"strings"
)

// SecretFields are the v1alpha1 config fields that come from the cluster's
// secrets bundle. A patch must not set, remove or copy any of them: they are
// rotated by Ichor's own operations, and a patch is stored in the clear.
var SecretFields = []string{
	"machine.ca",
	"machine.token",
	"machine.acceptedCAs",
	"cluster.id",
	"cluster.secret",
	"cluster.token",
	"cluster.ca",
	"cluster.acceptedCAs",
	"cluster.aggregatorCA",
	"cluster.serviceAccount",
	"cluster.secretboxEncryptionSecret",
	"cluster.aescbcEncryptionSecret",
	"cluster.etcd.ca",
}

// patchDirective is the strategic-merge key that deletes or replaces a section.
const patchDirective = "$patch"

// TouchedSecrets returns the secret fields (see SecretFields) a patch would
// set, delete, replace or copy, sorted; empty means the patch leaves the
// bundle's secrets alone. It reads the fields the patch names the way
// configpatcher does (namedPaths), so it sees both strategic-merge and
// JSON6902 forms, and the source of a JSON6902 move or copy (a copy from a
// secret would put it where the patch author can read it). Touching an
// ancestor counts: replacing /cluster/etcd or deleting machine with $patch
// changes machine.ca. Only the v1alpha1 document holds the bundle's secrets.
// A patch that cannot be read is an error, not a pass.
func TouchedSecrets(patch string) ([]string, error) {
	paths, _, err := namedPaths(patch)
	if err != nil {
		return nil, err
	}
	var touched []string
	for _, p := range paths {
		touched = append(touched, secretsUnder(p)...)
	}
	slices.Sort(touched)
	return slices.Compact(touched), nil
}

// pointerFields splits a JSON pointer into unescaped field names.
func pointerFields(ptr string) []string {
	if ptr == "" || ptr == "/" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, part := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
	}
	return parts
}

// secretsUnder returns the secret fields a change at path affects: the field
// itself or anything inside it, and every secret below it.
func secretsUnder(path []string) []string {
	var out []string
	for _, field := range SecretFields {
		secret := strings.Split(field, ".")
		n := min(len(path), len(secret))
		if slices.Equal(path[:n], secret[:n]) {
			out = append(out, field)
		}
	}
	return out
}
