package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor"
)

func init() {
	pages = append(pages, page{name: "operations.md", render: renderOperations})
}

// renderOperations writes docs/reference/operations.md from ichor.Operations.
func renderOperations(w *bytes.Buffer) {
	w.WriteString("# Operation types\n\n")
	w.WriteString("A TalosOperation's `spec.type` is one of the types below (`ichor.Operations`, pkg/apis/ichor/operations.go). ")
	w.WriteString("Starting one takes the `start` verb on `talosoperations/<type>`, held by the role named and the roles above it ")
	w.WriteString("(artifacts/roles.yaml); deleting one that runs takes the same. ")
	w.WriteString("**Machines** says what `spec.machines` may name and which machines the operation acts on when it names none. ")
	w.WriteString("A batched type takes up to `spec.maxUnavailable` workers away at once (default 1); control planes always go one at a time. ")
	w.WriteString("Starting a destructive type in the console takes typing the cluster's name. ")
	w.WriteString("Every other type's parameter block is refused. See [operations](../operations.md) for how they run.\n\n")
	w.WriteString("| Type | Started by | Machines | Parameters | Batched | Destructive | What it does |\n|---|---|---|---|---|---|---|\n")
	for _, d := range ichor.Operations {
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s | %s |\n", d.Type, holders(d.Role, nil), machines(d),
			parameters(d.Parameters), yesNo(d.Batched), yesNo(d.Destructive), cell(d.Doc))
	}
	w.WriteString("\n## Types no longer accepted\n\n")
	w.WriteString("The API refuses these, saying what to use instead; an operation stored before fails when started.\n\n")
	for _, t := range slices.Sorted(func(yield func(ichor.OperationType) bool) {
		for t := range ichor.RetiredOperationTypes {
			if !yield(t) {
				return
			}
		}
	}) {
		fmt.Fprintf(w, "- %s.\n", ichor.RetiredOperationTypes[t])
	}
}

// machines says what spec.machines may name for d, and the default.
func machines(d ichor.OperationDescriptor) string {
	switch d.Machines {
	case ichor.MachinesRequired:
		return "required: the named machines only"
	case ichor.MachinesForbidden:
		return fmt.Sprintf("forbidden: %s of the cluster", d.Targets)
	}
	return fmt.Sprintf("optional; none: %s", d.Targets)
}

// parameters lists the parameter blocks of a type and whether it needs each.
func parameters(ps []ichor.OperationParameter) string {
	if len(ps) == 0 {
		return "none"
	}
	var out []string
	for _, p := range ps {
		presence := string(p.Presence)
		if p.Presence == ichor.ParameterDefaulted {
			presence = "optional, defaulted"
		}
		out = append(out, fmt.Sprintf("`%s` (%s)", p.Path(), presence))
	}
	return strings.Join(out, ", ")
}

// holders are who holds what role holds: it and the roles above it, and
// the other ClusterRoles named.
func holders(role ichor.UserRole, others []string) string {
	var out []string
	for _, r := range ichor.RolesFrom(role) {
		out = append(out, string(r))
	}
	for _, o := range others {
		out = append(out, "`"+o+"`")
	}
	if len(out) == 0 {
		return "no role"
	}
	return strings.Join(out, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
