package resource

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/registry/rest"
)

// tableConvertor renders objects as kubectl's table: Name, the kind's own
// columns, then Age.
type tableConvertor[T Object] struct {
	def     *Definition[T]
	columns []metav1.TableColumnDefinition
}

var _ rest.TableConvertor = &tableConvertor[Object]{}

func newTableConvertor[T Object](def *Definition[T]) *tableConvertor[T] {
	columns := []metav1.TableColumnDefinition{{
		Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"],
	}}
	columns = append(columns, def.Columns...)
	columns = append(columns, metav1.TableColumnDefinition{
		Name: "Age", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
	})
	return &tableConvertor[T]{def: def, columns: columns}
}

func (c *tableConvertor[T]) ConvertToTable(_ context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = c.columns
	}
	addRow := func(obj runtime.Object) error {
		o, ok := obj.(T)
		if !ok {
			return fmt.Errorf("%s table: unexpected object %T", c.def.Resource, obj)
		}
		cells := append([]any{o.GetName()}, c.def.Cells(o)...)
		cells = append(cells, age(o.GetCreationTimestamp()))
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	if meta.IsListType(object) {
		if err := meta.EachListItem(object, addRow); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(object); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
		return table, nil
	}
	if err := addRow(object); err != nil {
		return nil, err
	}
	if m, err := meta.Accessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}

func age(ts metav1.Time) string {
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}
