package main

import (
	"bytes"
	"fmt"

	"ichor.dev/ichor/pkg/apis/ichor"
)

func init() {
	pages = append(pages, page{name: "downloads.md", render: renderDownloads})
}

// renderDownloads writes docs/reference/downloads.md from ichor.Downloads.
func renderDownloads(w *bytes.Buffer) {
	w.WriteString("# Downloads\n\n")
	w.WriteString("A download is a GET of `RESOURCE/NAME/SUBRESOURCE` that ichor-apiserver streams from a node or a cluster ")
	w.WriteString("(`ichor download SUBRESOURCE NAME`, or the console for a machine's downloads that take no options), ")
	w.WriteString("listed in `ichor.Downloads` (pkg/apis/ichor/downloads.go). It takes the `download` verb, and `get`, on ")
	w.WriteString("`RESOURCE/SUBRESOURCE`, held by the roles named (artifacts/roles.yaml). ichor-apiserver gets a Talos ")
	w.WriteString("certificate of the Talos role named for each download, through a TalosCredentialRequest of the same purpose, ")
	w.WriteString("and records an Event naming who downloaded what. A dry run is refused.\n\n")
	w.WriteString("| Download | Streams | Saved as | Content type | Talos role | Downloaded by | Options |\n|---|---|---|---|---|---|---|\n")
	for _, d := range ichor.Downloads {
		options := d.Options
		if options == "" {
			options = "none"
		}
		streams := d.Streams
		if d.ControlPlanesOnly {
			streams += " (control planes only)"
		}
		fmt.Fprintf(w, "| `%s` | %s | `%s` | `%s` | `%s` | %s | %s |\n", d.Path(), cell(streams),
			fmt.Sprintf(d.File, "NAME"), d.ContentType, d.TalosRole, holders(d.Role, nil), cell(options))
	}
}
