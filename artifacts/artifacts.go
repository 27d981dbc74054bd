// Package artifacts holds the manifests that install Ichor; Go code that
// must agree with them reads them from here.
package artifacts

import _ "embed"

// Roles is roles.yaml: Ichor's user roles and the rules they aggregate.
//
//go:embed roles.yaml
var Roles []byte
