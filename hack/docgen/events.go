package main

import (
	"bytes"
	"fmt"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func init() {
	pages = append(pages, page{name: "events.md", render: renderEvents})
}

// renderEvents writes docs/reference/events.md from v1alpha1's table of
// Event reasons: by kind, each reason with its type and meaning.
func renderEvents(w *bytes.Buffer) {
	reasons := v1alpha1.EventReasons()
	var kinds []string
	byKind := map[string][]v1alpha1.EventReason{}
	for _, r := range reasons {
		for _, k := range r.Kinds() {
			if _, ok := byKind[k]; !ok {
				kinds = append(kinds, k)
			}
			byKind[k] = append(byKind[k], r)
		}
	}

	w.WriteString("# Event reasons\n\n")
	fmt.Fprintf(w, "Every Event Ichor records has one of the %d reasons below (pkg/apis/ichor/v1alpha1/events.go), ", len(reasons))
	w.WriteString("whose type is always the one given here. ")
	fmt.Fprintf(w, "ichor-controller records them as reporting controller `%s`; ", v1alpha1.ReporterController)
	fmt.Fprintf(w, "ichor-apiserver, as `%s`, records those of actions and downloads, which name the user. ", v1alpha1.ReporterAPIServer)
	w.WriteString("A reason is API: select Events by it, for instance every failed step of every operation:\n\n")
	fmt.Fprintf(w, "```sh\nkubectl get events -A --field-selector reason=%s\n```\n\n", v1alpha1.EventStepFailed)
	w.WriteString("`--field-selector type=Warning` lists what needs someone's attention; `ichor status` shows a cluster's Warnings of the last hour.\n")
	w.WriteString("A reason recorded on more than one kind is listed under each.\n")

	for _, k := range kinds {
		fmt.Fprintf(w, "\n## %s\n\n", k)
		w.WriteString("| Reason | Type | Meaning |\n|---|---|---|\n")
		for _, r := range byKind[k] {
			fmt.Fprintf(w, "| `%s` | %s | %s |\n", r, r.Type(), cell(r.Doc()))
		}
	}
}

// cell is s, safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
