package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// userRow is an IchorUser as the users page shows it: never a password or
// its hash.
type userRow struct {
	Name, DisplayName, Role  string
	Disabled, PasswordSet    bool
	LastLogin, PasswordSince string
}

func userRowOf(u *v1alpha1.IchorUser) userRow {
	return userRow{Name: u.Name, DisplayName: u.Spec.DisplayName, Role: string(u.Spec.Role), Disabled: u.Spec.Disabled,
		PasswordSet: u.Status.PasswordSet, LastLogin: when(u.Status.LastLoginAt), PasswordSince: when(u.Status.PasswordChangedAt)}
}

// when is a time as the users page shows it, "never" for none.
func when(t *metav1.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format(time.DateTime)
}

// users lists the IchorUsers, with a form to create one and a switch to
// disable or enable each, for whoever may.
func (s *Server) users(w http.ResponseWriter, r *http.Request, se *session) {
	s.renderUsers(w, r, se, http.StatusOK, "")
}

func (s *Server) renderUsers(w http.ResponseWriter, r *http.Request, se *session, status int, refused string) {
	data := map[string]any{"Who": se.who, "CSRF": se.csrf, "Refused": refused}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	list, err := cs.IchorV1alpha1().IchorUsers().List(r.Context(), metav1.ListOptions{})
	if err != nil {
		s.render(w, apiStatus(err), "users", withRefusal(data, err))
		return
	}
	rows := make([]userRow, 0, len(list.Items))
	for i := range list.Items {
		rows = append(rows, userRowOf(&list.Items[i]))
	}
	data["Users"] = rows
	data["MayCreate"] = s.may(r, se, "", "create", "ichorusers", "")
	data["MayChange"] = s.may(r, se, "", "patch", "ichorusers", "")
	data["Roles"] = []v1alpha1.UserRole{v1alpha1.UserRoleViewer, v1alpha1.UserRoleOperator, v1alpha1.UserRoleAdmin}
	s.render(w, status, "users", data)
}

// createUser creates an IchorUser as the person and sets its first
// password. A password the server refuses takes the new user away again,
// so that nothing is half made.
func (s *Server) createUser(w http.ResponseWriter, r *http.Request, se *session) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	if !validNames(name) {
		s.renderUsers(w, r, se, http.StatusBadRequest, fmt.Sprintf("name %q: a lowercase DNS name (letters, digits, '-' and '.')", name))
		return
	}
	password := r.PostFormValue("password")
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	users := cs.IchorV1alpha1().IchorUsers()
	u := &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.IchorUserSpec{
		Role: v1alpha1.UserRole(r.PostFormValue("role")), DisplayName: strings.TrimSpace(r.PostFormValue("displayName")),
	}}
	created, err := users.Create(r.Context(), u, metav1.CreateOptions{})
	if err != nil {
		s.renderUsers(w, r, se, apiStatus(err), apiReason(err))
		return
	}
	if password != "" {
		_, err := users.UpdatePassword(r.Context(), name, &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: name}, Password: password}, metav1.UpdateOptions{})
		if err != nil {
			// The user's own context may be gone with the browser: undo regardless.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
			defer cancel()
			uid := created.UID
			_ = users.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			s.renderUsers(w, r, se, apiStatus(err), "the password was refused, so "+name+" was not created: "+apiReason(err))
			return
		}
	}
	http.Redirect(w, r, "/users", http.StatusSeeOther)
}

// setDisabled disables or enables an IchorUser as the person: a disabled
// user's sessions end at their next renewal, in the console as in kubectl.
func (s *Server) setDisabled(w http.ResponseWriter, r *http.Request, se *session) {
	name := r.PathValue("user")
	if !validNames(name) {
		http.NotFound(w, r)
		return
	}
	var disabled bool
	switch r.PostFormValue("disabled") {
	case "true":
		disabled = true
	case "false":
	default:
		s.renderUsers(w, r, se, http.StatusBadRequest, "disabled: true or false")
		return
	}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"disabled": disabled}})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := cs.IchorV1alpha1().IchorUsers().Patch(r.Context(), name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		s.renderUsers(w, r, se, apiStatus(err), apiReason(err))
		return
	}
	http.Redirect(w, r, "/users", http.StatusSeeOther)
}
