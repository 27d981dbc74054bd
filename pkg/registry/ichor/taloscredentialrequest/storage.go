// Package taloscredentialrequest stores TalosCredentialRequests.
package taloscredentialrequest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/validation"
	"ichor.dev/ichor/pkg/registry/resource"
)

// Definition describes TalosCredentialRequests to the generic storage.
var Definition = &resource.Definition[*ichor.TalosCredentialRequest]{
	Resource:        ichor.Resource("taloscredentialrequests"),
	Singular:        "taloscredentialrequest",
	NamespaceScoped: true,
	ShortNames:      []string{"tcr"},

	New:     func() *ichor.TalosCredentialRequest { return &ichor.TalosCredentialRequest{} },
	NewList: func() runtime.Object { return &ichor.TalosCredentialRequestList{} },

	PrepareForCreate: setRequester,
	PrepareForUpdate: func(_ context.Context, r, old *ichor.TalosCredentialRequest) {
		r.Spec.Username, r.Spec.UID, r.Spec.Groups = old.Spec.Username, old.Spec.UID, old.Spec.Groups
	},
	ServerOwnedFields: []fieldpath.Path{
		fieldpath.MakePathOrDie("spec", "username"),
		fieldpath.MakePathOrDie("spec", "uid"),
		fieldpath.MakePathOrDie("spec", "groups"),
	},

	Validate:             validation.ValidateTalosCredentialRequest,
	ValidateUpdate:       validation.ValidateTalosCredentialRequestUpdate,
	ValidateStatusUpdate: validation.ValidateTalosCredentialRequestStatusUpdate,

	SelectableFields: func(r *ichor.TalosCredentialRequest) fields.Set {
		return fields.Set{
			"spec.clusterName": r.Spec.ClusterName,
			"spec.purpose":     string(r.Spec.Purpose),
			"spec.username":    r.Spec.Username,
		}
	},

	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "TalosCluster the credential is for."},
		{Name: "Purpose", Type: "string", Description: "What the credential is for."},
		{Name: "Requester", Type: "string", Description: "User who asked for the credential."},
		{Name: "Role", Type: "string", Description: "Talos role of the issued certificate."},
		{Name: "Expires", Type: "string", Format: "date-time", Description: "When the certificate expires."},
	},
	Cells: func(r *ichor.TalosCredentialRequest) []any {
		expires := ""
		if t := r.Status.ExpirationTimestamp; t != nil {
			expires = t.UTC().Format("2006-01-02T15:04:05Z")
		}
		return []any{r.Spec.ClusterName, string(r.Spec.Purpose), r.Spec.Username, r.Status.Role, expires}
	},
}

// setRequester records who asked, from the authenticated request; whatever
// the body claimed is discarded.
func setRequester(ctx context.Context, r *ichor.TalosCredentialRequest) {
	r.Spec.Username, r.Spec.UID, r.Spec.Groups = "", "", nil
	if user, ok := genericapirequest.UserFrom(ctx); ok {
		r.Spec.Username = user.GetName()
		r.Spec.UID = user.GetUID()
		r.Spec.Groups = user.GetGroups()
	}
}
