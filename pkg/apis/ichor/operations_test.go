package ichor_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// TestOperationDescriptors: every descriptor is complete, and names each
// type once.
func TestOperationDescriptors(t *testing.T) {
	seen := map[ichor.OperationType]bool{}
	for _, d := range ichor.Operations {
		if seen[d.Type] {
			t.Errorf("%s is described twice", d.Type)
		}
		seen[d.Type] = true
		if _, retired := ichor.RetiredOperationTypes[d.Type]; retired {
			t.Errorf("%s is described and retired", d.Type)
		}
		if d.Role != ichor.UserRoleOperator && d.Role != ichor.UserRoleAdmin {
			t.Errorf("%s: start is held by operators or admins, not %q", d.Type, d.Role)
		}
		if !slices.Contains([]ichor.MachineScope{ichor.MachinesOptional, ichor.MachinesRequired, ichor.MachinesForbidden}, d.Machines) {
			t.Errorf("%s: machine scope %q", d.Type, d.Machines)
		}
		if d.Targets != ichor.TargetsEveryMachine && d.Targets != ichor.TargetsControlPlanes {
			t.Errorf("%s: targets %q", d.Type, d.Targets)
		}
		if d.Does == nil || d.Does(&ichor.TalosOperationSpec{Type: d.Type}) == "" || d.Doc == "" {
			t.Errorf("%s: the console's sentence and the doc line are required", d.Type)
		}
		for _, p := range d.Parameters {
			if p.IsSet == nil || !slices.Contains([]ichor.ParameterPresence{ichor.ParameterRequired, ichor.ParameterOptional, ichor.ParameterDefaulted}, p.Presence) {
				t.Errorf("%s: parameter %s is incomplete", d.Type, p.Field)
			}
		}
	}
}

// TestOperationTypeConstants: the OperationType constants of the internal
// and the versioned API (whose +enum is the OpenAPI schema's) are exactly
// the described types.
func TestOperationTypeConstants(t *testing.T) {
	want := slices.Sorted(slices.Values(stringsOf(ichor.OperationTypes())))
	for _, file := range []string{"types_operation.go", "v1alpha1/types_operation.go"} {
		if got := slices.Sorted(slices.Values(constantsOf(t, file, "OperationType"))); !slices.Equal(got, want) {
			t.Errorf("the OperationType constants of %s are %v; ichor.Operations describes %v", file, got, want)
		}
	}
	if got := stringsOf(v1alpha1.OperationTypes); !slices.Equal(got, stringsOf(ichor.OperationTypes())) {
		t.Errorf("v1alpha1.OperationTypes %v, ichor.Operations %v", got, ichor.OperationTypes())
	}
}

// TestOperationParameters: every parameter block of TalosOperationSpec
// (a pointer to a struct) belongs to exactly one type, and IsSet sees
// that block and no other.
func TestOperationParameters(t *testing.T) {
	owner := map[string]ichor.OperationType{}
	for _, d := range ichor.Operations {
		for _, p := range d.Parameters {
			if other, ok := owner[p.Field]; ok {
				t.Errorf("%s is a parameter of %s and of %s", p.Field, other, d.Type)
			}
			owner[p.Field] = d.Type
		}
	}
	versioned := reflect.TypeFor[v1alpha1.TalosOperationSpec]()
	for i := range versioned.NumField() {
		f := versioned.Field(i)
		if f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		typ, ok := owner[name]
		if !ok {
			t.Errorf("spec.%s is a parameter block no operation type describes", name)
			continue
		}
		delete(owner, name)
		var spec ichor.TalosOperationSpec
		v := reflect.ValueOf(&spec).Elem().FieldByName(f.Name)
		v.Set(reflect.New(v.Type().Elem()))
		for _, d := range ichor.Operations {
			for _, p := range d.Parameters {
				if got := p.IsSet(&spec); got != (p.Field == name) {
					t.Errorf("with spec.%s set, the IsSet of %s's %s says %v", name, typ, p.Field, got)
				}
			}
		}
	}
	for field, typ := range owner {
		t.Errorf("%s describes parameter %s, which TalosOperationSpec does not have", typ, field)
	}
}

// TestMaxUnavailableDoc: the doc of spec.maxUnavailable, which the OpenAPI
// schema shows, names exactly the batched types.
func TestMaxUnavailableDoc(t *testing.T) {
	for _, file := range []string{"types_operation.go", "v1alpha1/types_operation.go"} {
		doc := fieldDoc(t, file, "TalosOperationSpec", "MaxUnavailable")
		for _, d := range ichor.Operations {
			named := regexp.MustCompile(`(^|[^-\w])` + regexp.QuoteMeta(string(d.Type)) + `([^-\w]|$)`).MatchString(doc)
			if named != d.Batched {
				t.Errorf("%s: the doc of maxUnavailable names %s: %v; it is batched: %v", file, d.Type, named, d.Batched)
			}
		}
	}
}

// fieldDoc is the doc comment of field of struct typ declared in file.
func fieldDoc(t *testing.T, file, typ, field string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != typ {
			return true
		}
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range fl.Names {
				if name.Name == field {
					doc = fl.Doc.Text()
				}
			}
		}
		return false
	})
	if doc == "" {
		t.Fatalf("%s: %s.%s has no doc", file, typ, field)
	}
	return doc
}

func stringsOf[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// constantsOf are the values of the constants of type typ declared in file.
func constantsOf(t *testing.T, file, typ string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					values = append(values, strings.Trim(lit.Value, `"`))
				}
			}
		}
	}
	return values
}
