package integration

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// designDoc is DESIGN.md in the workspace the repository sits in
// (../shared/docs beside the clone), the source of the verbs table.
func designDoc(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ICHOR_DESIGN_DOC"); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var backticked = regexp.MustCompile("`([^`]+)`")

// designVerbsTable reads the "Subresources and verbs" table of DESIGN.md
// into rows: the verb, what it is on (resource or resource/subresource, an
// operation type for talosoperations/<type>), and the groups holding it.
func designVerbsTable(t *testing.T) []verbRow {
	t.Helper()
	f, err := os.Open(designDoc(t))
	if err != nil {
		t.Fatalf("the verbs table is read from DESIGN.md (set ICHOR_DESIGN_DOC to its path): %v", err)
	}
	defer f.Close()
	var rows []verbRow
	var listedStartTypes []string
	otherStarts := -1
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| custom verb on"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		case strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("DESIGN.md verbs row %q: want 3 cells", line)
		}
		first := strings.TrimSpace(cells[0])
		names := backticked.FindAllStringSubmatch(first, -1)
		if len(names) < 2 {
			t.Fatalf("DESIGN.md verbs row %q: want a verb and what it is on", line)
		}
		row := verbRow{verb: names[0][1]}
		for _, n := range names[1:] {
			row.on = append(row.on, n[1])
		}
		if len(row.on) == 1 && strings.HasSuffix(row.on[0], "/<type>") {
			resource := strings.TrimSuffix(row.on[0], "/<type>")
			_, types, _ := strings.Cut(first, " for ")
			row.on = nil
			if strings.TrimSpace(types) == "the other types" {
				otherStarts = len(rows)
			} else {
				for _, typ := range strings.Split(types, ",") {
					typ = strings.TrimSpace(typ)
					listedStartTypes = append(listedStartTypes, typ)
					row.on = append(row.on, resource+"/"+typ)
				}
			}
		}
		holders := strings.TrimSpace(cells[2])
		for _, h := range strings.Split(holders, ",") {
			h = strings.TrimSpace(h)
			word, _, _ := strings.Cut(h, " ")
			row.holders = append(row.holders, "ichor:"+word)
		}
		if strings.Contains(holders, "ichor-machine-reclaimer") {
			row.holders = append(row.holders, reclaimerGroup)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if otherStarts < 0 || len(listedStartTypes) == 0 {
		t.Fatal("DESIGN.md's verbs table has no start rows")
	}
	for _, typ := range v1alpha1.OperationTypes {
		if !slices.Contains(listedStartTypes, string(typ)) {
			rows[otherStarts].on = append(rows[otherStarts].on, "talosoperations/"+string(typ))
		}
	}
	return rows
}
