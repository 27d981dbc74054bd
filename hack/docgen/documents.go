package main

import (
	"bytes"
	"fmt"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

func init() {
	pages = append(pages, page{name: "config-documents.md", render: renderDocuments})
}

// takes says what each effect of a change asks of the node.
var takes = map[v1alpha1.ConfigEffect]string{
	v1alpha1.ConfigEffectNoReboot:         "nothing more: Talos applies it live",
	v1alpha1.ConfigEffectAPIServerRestart: "a kube-apiserver restart, one control plane at a time",
	v1alpha1.ConfigEffectReboot:           "a reboot, under the disruption budget",
}

// renderDocuments writes docs/reference/config-documents.md from pkg/render's
// tables: each machine-config document kind, who may patch it, and what a
// change of it takes.
func renderDocuments(w *bytes.Buffer) {
	kinds := render.DocumentKinds()
	w.WriteString("# Machine-config documents\n\n")
	fmt.Fprintf(w, "Every document kind Talos machinery knows besides `v1alpha1` (%d), ", len(kinds))
	w.WriteString("with who may write it in a TalosConfigPatch and what a change of it takes on a node ")
	w.WriteString("(pkg/render: patchclass.go, effects.go). ")
	fmt.Fprintf(w, "An operator may write a `%s` document; a `%s` one needs the update verb on ", render.ClassSettings, render.ClassPrivileged)
	w.WriteString("`talosconfigpatches/privileged` (admins). A kind Ichor does not list here (a later Talos release's) is Privileged and needs a reboot.\n\n")
	w.WriteString("From the v1.14 version contract Talos configures Kubernetes in its own documents (`Kube*Config`) ")
	w.WriteString("instead of the `v1alpha1` sections they replace; a patch that sets such a `v1alpha1` field on a v1.14 cluster is refused, ")
	w.WriteString("naming the documents to patch instead; a document of a later release than the cluster's contract is refused too.\n\n")
	w.WriteString("| Kind | Talos | Class | Why | A change takes |\n|---|---|---|---|---|\n")
	for _, k := range kinds {
		since := "v1.13 on"
		if k.Since != "" {
			since = k.Since + " on"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", k.Kind, since, k.Class, cell(k.Why), takes[k.Effect])
	}
}
