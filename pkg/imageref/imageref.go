// Package imageref reads and rewrites container image references, as far as
// Ichor needs: the installer image of a Talos version is its repository at
// that version's tag.
package imageref

import "strings"

// WithTag is ref with its tag (and digest) replaced by tag.
func WithTag(ref, tag string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref + ":" + tag
}

// Tag is ref's tag, or "" when it has none.
func Tag(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		return ref[i+1:]
	}
	return ""
}
