package resource

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
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

// FieldSubresource returns the Subresource of a spec field only it writes
// (a row of ichor.FieldSubresources): it keeps everything else as stored and
// takes the field from the request with the row's typed Copy; versioned is
// the versioned object type, whose field at path it leaves out of the reset
// fields. The main endpoint's validation refuses changes to that field, so
// that it changes only with this endpoint's RBAC.
func FieldSubresource[T Object](f ichor.FieldSubresource, versioned any, validate func(obj, old T) field.ErrorList) Subresource[T] {
	return Subresource[T]{
		Name: f.Subresource,
		PrepareForUpdate: func(_ context.Context, obj, old T) {
			requested := obj.DeepCopyObject()
			specOf(obj).Set(specOf(old))
			statusOf(obj).Set(statusOf(old))
			f.Copy(obj, requested)
		},
		ValidateUpdate: validate,
		ResetFields:    ResetAllBut(versioned, strings.Split(f.Field, ".")...),
	}
}

// FieldSubresources are the FieldSubresource of every row of
// ichor.FieldSubresources for resource.
func FieldSubresources[T Object](resource string, versioned any, validate func(obj, old T) field.ErrorList) []Subresource[T] {
	var subs []Subresource[T]
	for _, f := range ichor.FieldSubresourcesOf(resource) {
		subs = append(subs, FieldSubresource(f, versioned, validate))
	}
	return subs
}
