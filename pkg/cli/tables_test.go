package cli

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// TestCommandsFromTables: download offers, completes and explains every
// download of ichor.Downloads, and start explains every operation type.
func TestCommandsFromTables(t *testing.T) {
	o := &Options{Config: genericclioptions.NewConfigFlags(true)}
	download := newDownload(o)
	names, _ := download.ValidArgsFunction(download, nil, "")
	for _, d := range ichor.Downloads {
		if !slices.Contains(names, d.Subresource) {
			t.Errorf("download does not complete %s", d.Subresource)
		}
		if !strings.Contains(download.Use, d.Subresource) || !strings.Contains(download.Long, "  "+d.Subresource+" ") {
			t.Errorf("download's usage does not name %s", d.Subresource)
		}
	}
	start := newStart(o)
	for _, d := range ichor.Operations {
		if !strings.Contains(start.Long, "  "+string(d.Type)+" ") {
			t.Errorf("start's help does not name %s", d.Type)
		}
	}
}
