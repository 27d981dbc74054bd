package main

import (
	"bytes"
	"fmt"
	"strings"

	"ichor.dev/ichor/pkg/apis/ichor"
)

func init() {
	pages = append(pages, page{name: "verbs.md", render: renderVerbs})
}

// renderVerbs writes docs/reference/verbs.md from ichor.CustomVerbs.
func renderVerbs(w *bytes.Buffer) {
	w.WriteString("# Verbs\n\n")
	w.WriteString("ichor-apiserver asks these verbs of the authorizer beyond the HTTP method's, on the resource or subresource named, ")
	w.WriteString("so an RBAC rule grants exactly one action and `kubectl auth can-i` tells the truth (`ichor.CustomVerbs`, ")
	w.WriteString("pkg/apis/ichor/verbs.go, built from the tables of [operation types](operations.md), [downloads](downloads.md) ")
	w.WriteString("and field subresources). **Held by** names the default roles holding the verb (`ichor:<role>`, ")
	w.WriteString("ClusterRole `ichor-<role>`; each role holds what the ones below it hold) and other ClusterRoles of ")
	w.WriteString("artifacts/roles.yaml; the verbs in parentheses are held with it on the same paths, which kube-apiserver asks ")
	w.WriteString("before the request reaches ichor-apiserver. `delete` on `talosmachines` is no custom verb, but it resets a node.\n\n")
	w.WriteString("| Verb | On | Request | Held by |\n|---|---|---|---|\n")
	for _, r := range ichor.CustomVerbs {
		on := make([]string, len(r.On))
		for i, o := range r.On {
			on[i] = "`" + o + "`"
		}
		verb := "`" + r.Verb + "`"
		if len(r.Alongside) > 0 {
			verb += " (" + strings.Join(r.Alongside, ", ") + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", verb, strings.Join(on, ", "), cell(r.Request), holders(r.Role, r.AlsoHeldBy))
	}
}
