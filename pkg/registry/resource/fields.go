package resource

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// ResetAllBut returns the reset fields of an endpoint that owns only the
// field at path of a versioned object like obj: every top-level field but
// metadata, and at each level along path the siblings of the field it goes
// through. Deriving them from the type keeps them right as fields are added.
func ResetAllBut(obj any, path ...string) []fieldpath.Path {
	if len(path) == 0 {
		panic("ResetAllBut: empty path")
	}
	var reset []fieldpath.Path
	t := reflect.TypeOf(obj)
	var prefix []any
	for len(path) > 0 {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			panic(fmt.Sprintf("ResetAllBut: %v is not a struct", t))
		}
		var next reflect.Type
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || name == "metadata" || name == "apiVersion" || name == "kind" {
				continue
			}
			if name == path[0] {
				next = f.Type
				continue
			}
			reset = append(reset, fieldpath.MakePathOrDie(append(append([]any{}, prefix...), name)...))
		}
		if next == nil {
			panic(fmt.Sprintf("ResetAllBut: %v has no field %q", t, path[0]))
		}
		prefix = append(prefix, path[0])
		t, path = next, path[1:]
	}
	return reset
}

// SpecField returns a Subresource that writes only the spec field goField of
// T (jsonName in versioned, the versioned object type) and keeps everything
// else as stored. The main endpoint's validation should refuse changes to that
// field, so that it changes only with this endpoint's RBAC.
func SpecField[T Object](name, goField string, versioned any, jsonName string, validate func(obj, old T) field.ErrorList) Subresource[T] {
	return Subresource[T]{
		Name: name,
		PrepareForUpdate: func(_ context.Context, obj, old T) {
			spec := specOf(obj)
			requested := reflect.New(spec.FieldByName(goField).Type()).Elem()
			requested.Set(spec.FieldByName(goField))
			spec.Set(specOf(old))
			spec.FieldByName(goField).Set(requested)
			statusOf(obj).Set(statusOf(old))
		},
		ValidateUpdate: validate,
		ResetFields:    ResetAllBut(versioned, "spec", jsonName),
	}
}
