package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// machineRow is a machine of a cluster as its page shows it.
type machineRow struct {
	Name, Role, Phase, Address, NodeName string
	// Fingerprint is the maintenance certificate's SPKI fingerprint Ichor
	// pinned at discovery: the person compares it with the one the
	// machine's own console shows before approving.
	Fingerprint string
	// Decision is the approval, "" while none was made.
	Decision, DecidedBy, Reason string
}

func machineRowOf(m *v1alpha1.TalosMachine) machineRow {
	row := machineRow{Name: m.Name, Role: string(m.Spec.Role), Phase: string(m.Status.Phase), Address: m.Spec.Address, NodeName: m.Status.NodeName}
	if row.Role == "" {
		row.Role = string(v1alpha1.MachineRoleWorker)
	}
	if m.Status.Maintenance != nil {
		row.Fingerprint = m.Status.Maintenance.CertificateFingerprint
	}
	if a := m.Status.Approval; a != nil {
		row.Decision, row.DecidedBy, row.Reason = string(a.Decision), a.By, a.Reason
	}
	return row
}

// may asks kube-apiserver whether the session's person may verb
// resource/subresource in namespace, so that the page offers only what
// they may do.
func (s *Server) may(r *http.Request, se *session, namespace, verb, resource, subresource string) bool {
	return s.mayWith(r.Context(), s.as(se), namespace, verb, resource, subresource)
}

// mayWith asks it with a person's client config.
func (s *Server) mayWith(ctx context.Context, cfg *rest.Config, namespace, verb, resource, subresource string) bool {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: v1alpha1.SchemeGroupVersion.Group, Resource: resource, Subresource: subresource,
		}},
	}, metav1.CreateOptions{})
	return err == nil && review.Status.Allowed
}

// validNames reports whether namespace and names are object names: a path
// that is not one is refused before any request.
func validNames(names ...string) bool {
	for _, n := range names {
		if len(validation.IsDNS1123Subdomain(n)) > 0 {
			return false
		}
	}
	return true
}

// cluster shows one cluster's machines, with approve and reject where the
// person may approve.
func (s *Server) cluster(w http.ResponseWriter, r *http.Request, se *session) {
	s.renderCluster(w, r, se, http.StatusOK, "")
}

func (s *Server) renderCluster(w http.ResponseWriter, r *http.Request, se *session, status int, refused string) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if !validNames(ns, name) {
		http.NotFound(w, r)
		return
	}
	data := map[string]any{"Who": se.who, "CSRF": se.csrf, "Namespace": ns, "Name": name, "Refused": refused}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	c, err := cs.IchorV1alpha1().TalosClusters(ns).Get(r.Context(), name, metav1.GetOptions{})
	if err != nil {
		s.render(w, apiStatus(err), "cluster", withRefusal(data, err))
		return
	}
	data["Cluster"] = rowOf(c)
	data["Image"] = imageOf(c)
	rows, err := machinesIn(r.Context(), cs, ns, name)
	if err != nil {
		s.render(w, apiStatus(err), "cluster", withRefusal(data, err))
		return
	}
	data["Machines"] = rows
	data["Events"], data["EventsRefused"] = s.clusterEvents(r.Context(), se, ns, name, rows)
	data["MayApprove"] = s.may(r, se, ns, "approve", "talosmachines", "approval")
	var downloads []ichor.Download
	for _, d := range machineDownloads {
		if s.may(r, se, ns, "download", "talosmachines", d.Subresource) {
			downloads = append(downloads, d)
		}
	}
	data["Downloads"] = downloads
	s.render(w, status, "cluster", data)
}

// decide approves or rejects a machine as the person, with their reason.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name, machine := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("machine")
	if !validNames(ns, name, machine) {
		http.NotFound(w, r)
		return
	}
	decision := v1alpha1.ApprovalDecision(r.PostFormValue("decision"))
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	switch {
	case decision != v1alpha1.ApprovalApproved && decision != v1alpha1.ApprovalRejected:
		s.renderCluster(w, r, se, http.StatusBadRequest, fmt.Sprintf("decision %q: Approved or Rejected", decision))
		return
	case decision == v1alpha1.ApprovalRejected && reason == "":
		s.renderCluster(w, r, se, http.StatusBadRequest, "a rejection needs a reason")
		return
	}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"approval": map[string]any{"decision": decision, "reason": reason}}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := cs.IchorV1alpha1().TalosMachines(ns).Patch(r.Context(), machine, types.MergePatchType, body, metav1.PatchOptions{}, "approval"); err != nil {
		s.renderCluster(w, r, se, apiStatus(err), apiReason(err))
		return
	}
	http.Redirect(w, r, "/clusters/"+ns+"/"+name, http.StatusSeeOther)
}

// apiStatus is the HTTP status to answer an API error with: the API's own
// for a refusal, 502 when the API could not be reached.
func apiStatus(err error) int {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code >= 400 && st.Status().Code < 500 {
		return int(st.Status().Code)
	}
	return http.StatusBadGateway
}

// withRefusal adds the server's reason for err to a page's data.
func withRefusal(data map[string]any, err error) map[string]any {
	data["Refused"] = apiReason(err)
	return data
}
