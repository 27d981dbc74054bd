package resource

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Strategies exposes a definition's strategies to the external tests.
func Strategies[T Object](def *Definition[T], typer runtime.ObjectTyper, gv schema.GroupVersion) (main interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}, status interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}) {
	def.check()
	s := &strategy[T]{ObjectTyper: typer, def: def, apiVersion: fieldpath.APIVersion(gv.String())}
	return s, statusStrategy[T]{s}
}

// Attrs exposes the field-selector attributes of an object.
func Attrs[T Object](def *Definition[T], obj runtime.Object) (map[string]string, error) {
	_, f, err := def.attrs(obj)
	return f, err
}

// Table exposes a definition's table convertor.
func Table[T Object](def *Definition[T]) rest.TableConvertor { return newTableConvertor(def) }
