package importrules

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the path Ichor's packages are named relative to.
const module = "ichor.dev/ichor"

// A rule says what the packages it is about may not import.
type rule struct {
	// Packages are the importers the rule is about; Except, those of them
	// it spares.
	Packages, Except []string
	// Only, when set, lists the only packages of Ichor's they may import
	// (others' are not its business).
	Only []string
	// Never lists packages they may not import, Ichor's or others';
	// Unless, those of them they still may.
	Never, Unless []string
	// Linked holds the rule to every package linked into the importers
	// (their imports' imports, and so on), not only to what they import.
	Linked bool
	// Why is what a failure says after the edge.
	Why string
}

// An edge is an import of To by From's tests, allowed with a reason.
type edge struct{ From, To, Why string }

// pkg is what `go list` says of a package.
type pkg struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	DepOnly                            bool
	Error                              *struct{ Err string }
}

// name is how rules name the package at path: Ichor's from the module's
// root, others by their import path.
func name(path string) string {
	if rest, ok := strings.CutPrefix(path, module+"/"); ok {
		return rest
	}
	return path
}

func ichors(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// match reports whether name matches pattern and what {X} stands for in
// it; x, when not empty, is what {X} must stand for.
func match(pattern, name, x string) (string, bool) {
	if pattern == "..." {
		return "", true
	}
	pe, ne := strings.Split(pattern, "/"), strings.Split(name, "/")
	if pe[len(pe)-1] == "..." {
		pe = pe[:len(pe)-1]
		if len(ne) < len(pe) {
			return "", false
		}
		ne = ne[:len(pe)]
	}
	if len(pe) != len(ne) {
		return "", false
	}
	got := ""
	for i, p := range pe {
		switch {
		case p == "{X}" && (x == "" || ne[i] == x):
			got = ne[i]
		case p != ne[i]:
			return "", false
		}
	}
	return got, true
}

// matchAny is match of the first pattern name matches.
func matchAny(patterns []string, name, x string) (string, bool) {
	for _, p := range patterns {
		if got, ok := match(p, name, x); ok {
			return got, true
		}
	}
	return "", false
}

// forbids reports whether r forbids the package named imp to a package
// whose {X} is x.
func (r *rule) forbids(imp, x string, ichor bool) bool {
	_, never := matchAny(r.Never, imp, "")
	_, allowed := matchAny(r.Only, imp, "")
	if !never && (r.Only == nil || !ichor || allowed) {
		return false
	}
	_, unless := matchAny(r.Unless, imp, x)
	return !unless
}

// list is every package of the module and every package they link, by
// import path.
func list(t *testing.T) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,Imports,TestImports,XTestImports,DepOnly,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := &pkg{}
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// linked is every package root links, each with the shortest chain of
// imports from root to it.
func linked(pkgs map[string]*pkg, root string) map[string][]string {
	chains := map[string][]string{root: {root}}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if pkgs[p] == nil {
			continue
		}
		for _, imp := range pkgs[p].Imports {
			if _, seen := chains[imp]; !seen {
				chains[imp] = append(slices.Clip(chains[p]), imp)
				queue = append(queue, imp)
			}
		}
	}
	return chains
}

func chain(paths []string) string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = name(p)
	}
	return strings.Join(names, " → ")
}

func TestImportRules(t *testing.T) {
	pkgs := list(t)
	var ours []*pkg
	for _, p := range pkgs {
		if !p.DepOnly && ichors(p.ImportPath) {
			ours = append(ours, p)
		}
	}
	slices.SortFunc(ours, func(a, b *pkg) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	if len(ours) == 0 {
		t.Fatal("go list found no package of the module")
	}
	testEdges := map[[2]string]bool{}
	for _, e := range testOnly {
		testEdges[[2]string{e.From, e.To}] = true
	}

	for _, p := range ours {
		from := name(p.ImportPath)
		if p.Error != nil {
			t.Errorf("%s: go list: %s", from, p.Error.Err)
		}
		for i := range rules {
			r := &rules[i]
			x, ok := matchAny(r.Packages, from, "")
			if !ok {
				continue
			}
			if _, spared := matchAny(r.Except, from, ""); spared {
				continue
			}
			if r.Linked {
				// Where the chains enter what is forbidden: by the package
				// that imports it, what it imports.
				chains := linked(pkgs, p.ImportPath)
				entries := map[string][]string{}
				for _, dep := range sortedKeys(chains) {
					c := chains[dep]
					if len(c) < 2 {
						continue // the importer itself
					}
					via := c[len(c)-2]
					if r.forbids(name(dep), x, ichors(dep)) && (via == p.ImportPath || !r.forbids(name(via), x, ichors(via))) {
						entries[via] = append(entries[via], name(dep))
					}
				}
				for _, via := range sortedKeys(entries) {
					t.Errorf("%s links %s (imported through %s): %s", from, strings.Join(entries[via], ", "), chain(chains[via]), r.Why)
				}
				continue
			}
			for _, imp := range p.Imports {
				if imp != p.ImportPath && r.forbids(name(imp), x, ichors(imp)) {
					t.Errorf("%s imports %s: %s", from, name(imp), r.Why)
				}
			}
			for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
				if imp != p.ImportPath && !slices.Contains(p.Imports, imp) && !testEdges[[2]string{from, name(imp)}] && r.forbids(name(imp), x, ichors(imp)) {
					t.Errorf("%s imports %s in its tests: %s", from, name(imp), r.Why)
				}
			}
		}
	}
}

// TestRulesAreCurrent: every rule is about some package, and every
// test-only edge still exists, so that the table says what the tree is.
func TestRulesAreCurrent(t *testing.T) {
	pkgs := list(t)
	var names []string
	for _, p := range pkgs {
		if !p.DepOnly && ichors(p.ImportPath) {
			names = append(names, name(p.ImportPath))
		}
	}
	for _, r := range rules {
		for _, pattern := range r.Packages {
			if !slices.ContainsFunc(names, func(n string) bool { _, ok := match(pattern, n, ""); return ok }) {
				t.Errorf("the rule %q is about %s, which matches no package", r.Why, pattern)
			}
		}
	}
	for _, e := range testOnly {
		p := pkgs[module+"/"+e.From]
		if p == nil || !slices.Contains(slices.Concat(p.TestImports, p.XTestImports), module+"/"+e.To) {
			t.Errorf("%s's tests no longer import %s: drop it from testOnly", e.From, e.To)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, name, x string
		want             bool
		wantX            string
	}{
		{"...", "pkg/cli", "", true, ""},
		{"pkg/apis/...", "pkg/apis", "", true, ""},
		{"pkg/apis/...", "pkg/apis/ichor/validation", "", true, ""},
		{"pkg/apis/...", "pkg/apiserver", "", false, ""},
		{"pkg/cli", "pkg/cli/sub", "", false, ""},
		{"pkg/controller/{X}/...", "pkg/controller/operation", "", true, "operation"},
		{"pkg/controller/{X}/...", "pkg/controller/operation/sub", "", true, "operation"},
		{"pkg/controller/{X}/...", "pkg/controller", "", false, ""},
		{"pkg/controller/{X}/...", "pkg/controller/operation", "operation", true, "operation"},
		{"pkg/controller/{X}/...", "pkg/controller/machineconfig", "operation", false, ""},
		{"sigs.k8s.io/controller-runtime/...", "sigs.k8s.io/controller-runtime/pkg/client", "", true, ""},
	} {
		x, ok := match(c.pattern, c.name, c.x)
		if ok != c.want || x != c.wantX {
			t.Errorf("match(%q, %q, %q) = %q, %v; want %q, %v", c.pattern, c.name, c.x, x, ok, c.wantX, c.want)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
