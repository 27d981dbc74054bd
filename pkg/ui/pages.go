package ui

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/schematic"
)

var templateFuncs = template.FuncMap{
	"join": strings.Join,
}

// clusterRow is a cluster at a glance.
type clusterRow struct {
	Namespace, Name, Phase          string
	TalosVersion, KubernetesVersion string
	Ready, Total                    int32
	// Unhealthy are the conditions that are not True, as "Type: message".
	Unhealthy []string
}

// rowOf summarises c.
func rowOf(c *v1alpha1.TalosCluster) clusterRow {
	row := clusterRow{
		Namespace: c.Namespace, Name: c.Name, Phase: string(c.Status.Phase),
		TalosVersion: c.Spec.TalosVersion, KubernetesVersion: c.Spec.KubernetesVersion,
		Ready: c.Status.Machines.Ready, Total: c.Status.Machines.Total,
	}
	if c.Status.TalosVersion != "" {
		row.TalosVersion = c.Status.TalosVersion
	}
	if c.Status.KubernetesVersion != "" {
		row.KubernetesVersion = c.Status.KubernetesVersion
	}
	for _, cond := range c.Status.Conditions {
		if cond.Status != metav1.ConditionTrue {
			row.Unhealthy = append(row.Unhealthy, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	slices.Sort(row.Unhealthy)
	return row
}

// clusterImage is where a cluster's machines boot and install from.
type clusterImage struct {
	SchematicID, Installer string
	// Media are the boot media by architecture.
	Media []archMedia
}

type archMedia struct {
	Arch  string
	Media []schematic.Medium
}

// imageOf is c's image from its status, nil without an image factory.
func imageOf(c *v1alpha1.TalosCluster) *clusterImage {
	img := c.Status.Image
	if img == nil {
		return nil
	}
	factory, id, version, secureBoot, err := schematic.ParseInstaller(img.Installer, img.FactoryURL)
	if err != nil {
		return nil
	}
	out := &clusterImage{SchematicID: img.SchematicID, Installer: img.Installer}
	for _, arch := range schematic.Arches {
		var media []schematic.Medium
		for _, m := range factory.Media(id, version, arch, secureBoot) {
			if m.Name != "installer" {
				media = append(media, m)
			}
		}
		out.Media = append(out.Media, archMedia{Arch: arch, Media: media})
	}
	return out
}

// clusters lists the clusters the person may see, as that person.
func (s *Server) clusters(w http.ResponseWriter, r *http.Request, se *session) {
	data := map[string]any{"Who": se.who, "CSRF": se.csrf}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	list, err := cs.IchorV1alpha1().TalosClusters(metav1.NamespaceAll).List(r.Context(), metav1.ListOptions{})
	status := http.StatusOK
	switch {
	case err == nil:
		rows := make([]clusterRow, 0, len(list.Items))
		for i := range list.Items {
			rows = append(rows, rowOf(&list.Items[i]))
		}
		data["Clusters"] = rows
	default:
		status = apiStatus(err)
		data["Refused"] = apiReason(err)
	}
	s.render(w, status, "clusters", data)
}

// apiReason is the server's own words for a refusal.
func apiReason(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Message != "" {
		return st.Status().Message
	}
	return err.Error()
}
