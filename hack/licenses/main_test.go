package main

import (
	"strings"
	"testing"

	"ichor.dev/ichor/hack/internal/modlicense"
)

// TestEveryLinkedModuleIsCompatible: every module Ichor's commands link
// has a licence the report classifies, and Apache-2.0 distribution allows.
func TestEveryLinkedModuleIsCompatible(t *testing.T) {
	list, err := modlicense.Modules("", nil, "ichor.dev/ichor/cmd/...")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < 100 {
		t.Fatalf("only %d modules: the module graph was not read", len(list))
	}
	if p := modlicense.Problems(list); len(p) > 0 {
		t.Errorf("licences Ichor cannot ship with:\n%s", strings.Join(p, "\n"))
	}
}
