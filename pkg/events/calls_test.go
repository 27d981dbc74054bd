package events

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const (
	eventsPath   = "ichor.dev/ichor/pkg/events"
	v1alpha1Path = "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestRecordsOnlyHere reads every Go file under pkg/ and cmd/: no code but
// this package's calls a recorder (Eventf, AnnotatedEventf, or
// record.EventRecorder's four-argument Event) or makes client-go's fake one
// (unit tests use eventstest's), and every reason given to
// Record or to an action's ActionEvent is a row of v1alpha1's table, never
// a string literal; a reason that is not a constant (a condition's) is left
// to eventstest, at run time.
func TestRecordsOnlyHere(t *testing.T) {
	root := moduleRoot(t)
	rows := tableRows(t, filepath.Join(root, "pkg/apis/ichor/v1alpha1/events.go"))
	var problems []string
	for _, dir := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path == filepath.Join(root, "pkg/events") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			problems = append(problems, checkFile(t, filepath.ToSlash(rel), src, rows)...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// tableRows are the names of the constants the table's rows are made of:
// the first field of each element of eventReasons.
func tableRows(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "eventReasons" || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.CompositeLit)
		if !ok {
			t.Fatalf("%s: eventReasons is not a composite literal", path)
		}
		for _, elt := range lit.Elts {
			row, ok := elt.(*ast.CompositeLit)
			if !ok || len(row.Elts) == 0 {
				t.Fatalf("%s: a row of eventReasons is not {Reason, Type, Kinds, Doc}", path)
			}
			reason := row.Elts[0]
			if kv, ok := reason.(*ast.KeyValueExpr); ok {
				reason = kv.Value
			}
			id, ok := reason.(*ast.Ident)
			if !ok {
				t.Fatalf("%s: a row's reason is not a constant's name", path)
			}
			rows[id.Name] = true
		}
		return false
	})
	if len(rows) == 0 {
		t.Fatalf("%s: no row in eventReasons", path)
	}
	return rows
}

// checkFile says what in one file records other than through Record, or
// gives a reason that is not a row of the table.
func checkFile(t *testing.T, rel string, src []byte, rows map[string]bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	eventsName, v1alpha1Name := importName(f, eventsPath), importName(f, v1alpha1Path)
	inV1alpha1 := strings.HasPrefix(rel, "pkg/apis/ichor/v1alpha1/")
	literalConsts := localLiteralConsts(f)
	var problems []string
	report := func(n ast.Node, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), fmt.Sprintf(format, args...)))
	}
	checkReason := func(n ast.Node, reason ast.Expr, where string) {
		switch r := reason.(type) {
		case *ast.BasicLit:
			report(n, "%s gives the string literal %s as a reason: add it to v1alpha1's table (events.go) and use its constant", where, r.Value)
		case *ast.SelectorExpr:
			if x, ok := r.X.(*ast.Ident); ok && v1alpha1Name != "" && x.Name == v1alpha1Name && !rows[r.Sel.Name] {
				report(n, "%s gives v1alpha1.%s as a reason, which is no row of v1alpha1's table (events.go): add its row", where, r.Sel.Name)
			}
		case *ast.Ident:
			if literalConsts[r.Name] {
				report(n, "%s gives the local constant %s as a reason: define it in v1alpha1's table (events.go)", where, r.Name)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch name := sel.Sel.Name; {
			case name == "Eventf" || name == "AnnotatedEventf" || (name == "Event" && len(n.Args) == 4):
				report(n, "calls %s: record through ichor.dev/ichor/pkg/events.Record", name)
			case name == "NewFakeRecorder":
				report(n, "calls NewFakeRecorder: a unit test records into eventstest.New, which checks every reason against the table")
			case name == "Record" && eventsName != "" && isIdent(sel.X, eventsName):
				if len(n.Args) < 6 {
					report(n, "calls events.Record with %d arguments", len(n.Args))
					return true
				}
				checkReason(n, n.Args[3], "events.Record")
			case name == "EventReason" && isIdent(sel.X, v1alpha1Name) && len(n.Args) == 1:
				if lit, ok := n.Args[0].(*ast.BasicLit); ok {
					report(n, "converts the string literal %s to an EventReason: add it to v1alpha1's table (events.go)", lit.Value)
				}
			}
		case *ast.CompositeLit:
			if !isActionEvent(n.Type) {
				return true
			}
			for _, elt := range n.Elts {
				if kv, ok := elt.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Reason") {
					checkReason(n, kv.Value, "ActionEvent")
				}
			}
		case *ast.ValueSpec:
			if sel, ok := n.Type.(*ast.SelectorExpr); ok && !inV1alpha1 && isIdent(sel.X, v1alpha1Name) && sel.Sel.Name == "EventReason" {
				report(n, "declares an EventReason outside v1alpha1's table (events.go)")
			}
		}
		return true
	})
	return problems
}

// importName is the name under which f imports path, "" when it does not.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// localLiteralConsts are f's constants whose value is a string literal.
func localLiteralConsts(f *ast.File) map[string]bool {
	out := map[string]bool{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name] = true
					}
				}
			}
		}
	}
	return out
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && name != "" && id.Name == name
}

// isActionEvent says whether a composite literal's type is
// pkg/registry/resource's ActionEvent.
func isActionEvent(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "ActionEvent"
	case *ast.SelectorExpr:
		return e.Sel.Name == "ActionEvent"
	}
	return false
}

// TestCheckFileFinds: the check above finds what it should, in files
// written for it.
func TestCheckFileFinds(t *testing.T) {
	rows := map[string]bool{"EventStepFailed": true}
	cases := map[string]struct {
		src  string
		want []string
	}{
		"Eventf": {`package p
func f(r R) { r.Recorder.Eventf(nil, nil, "Normal", "X", "A", "n") }`, []string{"calls Eventf"}},
		"fake recorder": {`package p
func f(t T) { _ = events.NewFakeRecorder(10) }`, []string{"calls NewFakeRecorder"}},
		"AnnotatedEventf": {`package p
func f(r R) { r.AnnotatedEventf(nil, nil, "Normal", "X", "n") }`, []string{"calls AnnotatedEventf"}},
		"record's Event": {`package p
func f(r R) { r.Event(nil, "Normal", "X", "n") }`, []string{"calls Event"}},
		"a field named Event": {`package p
func f(r R) { r.action.Event(ctx, obj, body) }`, nil},
		"literal reason": {`package p
import "ichor.dev/ichor/pkg/events"
func f(r R) { events.Record(r.Recorder, nil, nil, "Mine", "A", "n") }`, []string{"string literal \"Mine\""}},
		"local constant": {`package p
import ev "ichor.dev/ichor/pkg/events"
const EventMine = "Mine"
func f(r R) { ev.Record(r.Recorder, nil, nil, EventMine, "A", "n") }`, []string{"local constant EventMine"}},
		"constant not in the table": {`package p
import (
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)
func f(r R) { events.Record(r.Recorder, nil, nil, v1alpha1.MachineReasonRenderFailed, "A", "n") }`, []string{"v1alpha1.MachineReasonRenderFailed"}},
		"constant in the table": {`package p
import (
	"ichor.dev/ichor/pkg/events"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)
func f(r R, c C) {
	events.Record(r.Recorder, nil, nil, v1alpha1.EventStepFailed, "A", "n")
	events.Record(r.Recorder, nil, nil, v1alpha1.EventReason(c.Reason), "A", "n")
}`, nil},
		"converted literal": {`package p
import "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
var x = v1alpha1.EventReason("Mine")`, []string{"converts the string literal"}},
		"declared reason": {`package p
import "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
const Mine v1alpha1.EventReason = v1alpha1.EventStepFailed`, []string{"declares an EventReason"}},
		"action event": {`package p
import "ichor.dev/ichor/pkg/registry/resource"
var e = resource.ActionEvent{Reason: "SignedIn"}`, []string{"ActionEvent gives the string literal"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := checkFile(t, "pkg/p/p.go", []byte(c.src), rows)
			if len(got) != len(c.want) {
				t.Fatalf("found %q; want %d problems like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("found %q; want it to say %q", got[i], w)
				}
			}
		})
	}
}
