package ui

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

// patchRow is a config patch as its cluster's page shows it: where it is
// aimed, its effect class and where it is applied, never its body (a patch
// may hold credentials, and no page carries a secret).
type patchRow struct {
	Name, Scope, Target, Effect string
	Priority                    int32
	Disabled                    bool
	Applied                     []string
	// Unhealthy are the conditions that are not True, as "Type: message".
	Unhealthy []string
}

func patchRowOf(p *v1alpha1.TalosConfigPatch) patchRow {
	row := patchRow{Name: p.Name, Scope: render.ScopeOf(p.Spec.Target).String(), Priority: p.Spec.Priority, Disabled: p.Spec.Disabled, Effect: string(p.Status.Effect), Applied: p.Status.AppliedMachines}
	var target []string
	if r := p.Spec.Target.Role; r != "" {
		target = append(target, "role "+string(r))
	}
	if ms := p.Spec.Target.Machines; len(ms) > 0 {
		target = append(target, "machines "+strings.Join(ms, ", "))
	}
	if sel := p.Spec.Target.Selector; sel != nil {
		target = append(target, "selector "+metav1.FormatLabelSelector(sel))
	}
	row.Target = strings.Join(target, "; ")
	if row.Target == "" {
		row.Target = "every machine"
	}
	for _, c := range p.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			row.Unhealthy = append(row.Unhealthy, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	return row
}

// patches lists a cluster's config patches, as the person (viewers may not
// read patches: the page shows the server's refusal).
func (s *Server) patches(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if !validNames(ns, name) {
		http.NotFound(w, r)
		return
	}
	data := map[string]any{"Who": se.who, "CSRF": se.csrf, "Namespace": ns, "Name": name}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	list, err := cs.IchorV1alpha1().TalosConfigPatches(ns).List(r.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.clusterName", name).String(),
	})
	if err != nil {
		s.render(w, apiStatus(err), "patches", withRefusal(data, err))
		return
	}
	// In the order they apply.
	slices.SortFunc(list.Items, func(a, b v1alpha1.TalosConfigPatch) int { return render.CompareApplicationOrder(&a, &b) })
	rows := make([]patchRow, 0, len(list.Items))
	for i := range list.Items {
		rows = append(rows, patchRowOf(&list.Items[i]))
	}
	data["Patches"] = rows
	s.render(w, http.StatusOK, "patches", data)
}
