// Command licenses reports the licence of every module linked into Ichor's
// commands (the go list module graph of ./cmd/..., from the module cache:
// no network) and fails on one it cannot classify or that Apache-2.0
// distribution does not allow. Run: go run ./hack/licenses [-markdown].
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"ichor.dev/ichor/hack/internal/modlicense"
)

func main() {
	markdown := flag.Bool("markdown", false, "print a Markdown table")
	flag.Parse()
	list, err := modlicense.Modules("", nil, "./cmd/...")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	if *markdown {
		fmt.Fprintln(w, "| module | version | licence |\n|---|---|---|")
		for _, m := range list {
			fmt.Fprintf(w, "| %s | %s | %s |\n", m.Path, m.Version, cmp.Or(m.Licence, "?"))
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, m := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Path, m.Version, cmp.Or(m.Licence, "?"))
		}
		_ = tw.Flush()
	}
	_ = w.Flush()
	if p := modlicense.Problems(list); len(p) > 0 {
		fmt.Fprintln(os.Stderr, "licences Ichor cannot ship with:\n  "+strings.Join(p, "\n  "))
		os.Exit(1)
	}
	counts := map[string]int{}
	for _, m := range list {
		counts[m.Licence]++
	}
	fmt.Fprintf(os.Stderr, "%d modules, every licence compatible with Apache-2.0: %v\n", len(list), counts)
}
