package main

import (
	"bytes"
	"fmt"

	"ichor.dev/ichor/pkg/apis/ichor"
)

func init() {
	blocks = append(blocks, block{file: "README.md", name: "talos-releases", render: renderTalosReleases})
}

// renderTalosReleases writes the table of Talos releases Ichor manages
// (pkg/apis/ichor/talosreleases.go).
func renderTalosReleases(w *bytes.Buffer) {
	w.WriteString("| Talos | Kubernetes | machine configs |\n|---|---|---|\n")
	for _, r := range ichor.TalosReleases {
		fmt.Fprintf(w, "| %s.x | %s to %s.x | %s |\n", r.Minor, r.KubernetesMin, r.KubernetesMax, cell(r.Layout))
	}
}
