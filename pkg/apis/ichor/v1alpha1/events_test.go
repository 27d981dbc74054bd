package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestEventReasonTable: every row has a reason no other row has, a type,
// kinds this API serves and one line of doc.
func TestEventReasonTable(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	seen := map[EventReason]bool{}
	for _, e := range eventReasons {
		if e.Reason == "" {
			t.Errorf("a row has no reason: %+v", e)
			continue
		}
		if seen[e.Reason] {
			t.Errorf("reason %s is in the table twice", e.Reason)
		}
		seen[e.Reason] = true
		if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
			t.Errorf("reason %s: type %q is neither Normal nor Warning", e.Reason, e.Type)
		}
		if len(e.Kinds) == 0 {
			t.Errorf("reason %s names no kind", e.Reason)
		}
		kinds := map[string]bool{}
		for _, k := range e.Kinds {
			if !scheme.Recognizes(SchemeGroupVersion.WithKind(k)) {
				t.Errorf("reason %s: %q is no kind of %s", e.Reason, k, SchemeGroupVersion)
			}
			if kinds[k] {
				t.Errorf("reason %s names kind %s twice", e.Reason, k)
			}
			kinds[k] = true
		}
		if e.Doc == "" || strings.Contains(e.Doc, "\n") || !strings.HasSuffix(e.Doc, ".") {
			t.Errorf("reason %s: its doc must be one sentence or two on one line, ending with a full stop: %q", e.Reason, e.Doc)
		}
		if r := e.Reason; !r.Known() || r.Type() != e.Type || r.Doc() != e.Doc || len(r.Kinds()) != len(e.Kinds) {
			t.Errorf("reason %s: the lookups do not give its row", r)
		}
	}
	if EventReason("NoSuchReason").Known() || EventReason("NoSuchReason").Type() != "" {
		t.Error("a reason not in the table is known")
	}
	if len(EventReasons()) != len(eventReasons) {
		t.Error("EventReasons does not list every row")
	}
}

// TestEventReasonConstantsInTable: every EventReason constant of the
// package is a row of the table, and no two of them are the same string.
// The constants are read from the source, their values resolved through the
// package's other string constants (the condition reasons).
func TestEventReasonConstantsInTable(t *testing.T) {
	typed, values := readConstants(t, ".")
	if len(typed) == 0 {
		t.Fatal("found no EventReason constant in the package's source")
	}
	byValue := map[string]string{}
	for _, name := range typed {
		v, ok := resolve(values, name, 0)
		if !ok {
			t.Errorf("cannot resolve the value of %s: define it as a string or as another constant of the package", name)
			continue
		}
		if other, dup := byValue[v]; dup {
			t.Errorf("%s and %s are both %q: define a reason once", other, name, v)
		}
		byValue[v] = name
		if !EventReason(v).Known() {
			t.Errorf("%s (%q) is not in the table (events.go, eventReasons): add its row", name, v)
		}
	}
}

// readConstants reads the package in dir: the names of its EventReason
// constants, and the expression of every constant by name.
func readConstants(t *testing.T, dir string) (typed []string, values map[string]ast.Expr) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	values = map[string]ast.Expr{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				isReason := false
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "EventReason" {
					isReason = true
				}
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						values[name.Name] = vs.Values[i]
					}
					if isReason {
						typed = append(typed, name.Name)
					}
				}
			}
		}
	}
	return typed, values
}

// resolve is the string value of the constant name.
func resolve(values map[string]ast.Expr, name string, depth int) (string, bool) {
	if depth > 8 {
		return "", false
	}
	switch e := values[name].(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		return resolve(values, e.Name, depth+1)
	case *ast.CallExpr: // EventReason(X)
		if len(e.Args) == 1 {
			if id, ok := e.Args[0].(*ast.Ident); ok {
				return resolve(values, id.Name, depth+1)
			}
			if lit, ok := e.Args[0].(*ast.BasicLit); ok {
				values := map[string]ast.Expr{"": lit}
				return resolve(values, "", depth+1)
			}
		}
	}
	return "", false
}
