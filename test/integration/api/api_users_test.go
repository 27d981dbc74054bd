package api

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/apiserver"
	"ichor.dev/ichor/pkg/passwordhash"
	"ichor.dev/ichor/test/integration/itest"
)

// TestUserPassword sets an IchorUser's password through the password
// subresource and checks that only an argon2id hash is stored, and that no
// read — get, list, watch, the write's own response — returns it.
func TestUserPassword(t *testing.T) {
	ctx := itest.APIContext(t)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().IchorUsers()
	name := "dana-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[len("test"):]
	if _, err := admin.Create(ctx, &v1alpha1.IchorUser{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleOperator, DisplayName: "Dana"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	w, err := admin.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const secret = "tr0ub4dor & 3 more words"
	_, err = admin.UpdatePassword(ctx, name, &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: name}, Password: "hunter2"}, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "at least 12 characters") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("short password: %v, want Invalid without the value", err)
	}
	set, err := admin.UpdatePassword(ctx, name, &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: name}, Password: secret}, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set password: %v", err)
	}
	if !set.Status.PasswordSet || set.Status.PasswordChangedAt == nil || set.Status.PasswordHash != "" {
		t.Fatalf("password response status %+v", set.Status)
	}

	// Stored: an argon2id hash of the password, and nothing else of it.
	values, err := itest.CP.EtcdValues(ctx, "/ichorusers/"+name)
	if err != nil || len(values) != 1 {
		t.Fatalf("etcd: %d values, %v", len(values), err)
	}
	if bytes.Contains(values[0], []byte(secret)) {
		t.Fatal("the password is stored in clear")
	}
	// Objects are stored as protobuf (kube-apiserver's envelope, "k8s\x00").
	if !bytes.HasPrefix(values[0], []byte("k8s\x00")) {
		t.Fatalf("stored value is not protobuf: %q", values[0])
	}
	obj, _, err := apiserver.Codecs.UniversalDeserializer().Decode(values[0], nil, nil)
	if err != nil {
		t.Fatalf("decode the stored value: %v", err)
	}
	stored, ok := obj.(*v1alpha1.IchorUser)
	if !ok {
		t.Fatalf("stored a %T, want a v1alpha1 IchorUser", obj)
	}
	hash := stored.Status.PasswordHash
	if ok, err := passwordhash.Verify(hash, secret); !ok || err != nil || !strings.HasPrefix(hash, "$argon2id$") {
		t.Fatalf("stored hash %q does not verify the password: %v %v", hash, ok, err)
	}

	// Never read back.
	got, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil || got.Status.PasswordHash != "" || !got.Status.PasswordSet {
		t.Errorf("get: %+v, %v", got.Status, err)
	}
	list, err := admin.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range list.Items {
		if u.Status.PasswordHash != "" {
			t.Errorf("list returned the hash of %s", u.Name)
		}
	}
	deadline := time.After(30 * time.Second)
	for sawSet := false; !sawSet; {
		select {
		case e := <-w.ResultChan():
			u, ok := e.Object.(*v1alpha1.IchorUser)
			if !ok || e.Type == watch.Error {
				t.Fatalf("watch: %v", e.Object)
			}
			if u.Status.PasswordHash != "" {
				t.Fatal("a watch event carried the hash")
			}
			sawSet = u.Status.PasswordSet
		case <-deadline:
			t.Fatal("no watch event for the password change")
		}
	}

	// The status endpoint neither sets nor clears the password.
	got.Status.PasswordSet, got.Status.PasswordHash = false, "$argon2id$forged"
	if _, err := itest.APIClient(t).IchorV1alpha1().IchorUsers().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if values, _ := itest.CP.EtcdValues(ctx, "/ichorusers/"+name); len(values) != 1 || !bytes.Contains(values[0], []byte(hash)) {
		t.Error("a /status write changed the stored hash")
	}

	// kubectl, as users do: replace --raw on the subresource.
	out, err := itest.CP.KubectlWithInput(ctx, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"IchorUserPassword","metadata":{"name":"`+name+`"},"password":"another long passphrase"}`),
		"--as=carol", "--as-group=ichor:admin", "replace", "--raw", "/apis/ichor.dev/v1alpha1/ichorusers/"+name+"/password", "-f", "-")
	if err != nil || strings.Contains(out, "argon2id") || !strings.Contains(out, `"passwordSet":true`) {
		t.Fatalf("kubectl replace --raw …/password: %v\n%s", err, out)
	}

	// The audit log (artifacts/audit-policy.yaml) names carol's change at
	// Metadata level, and holds neither the password nor its hash.
	for _, e := range itest.AuditEvents(t) {
		if bytes.Contains(e.Raw, []byte("another long passphrase")) || bytes.Contains(e.Raw, []byte(secret)) || bytes.Contains(e.Raw, []byte(hash)) {
			t.Errorf("the audit log holds a password or its hash, in a %s event of %s %s", e.Level, e.Verb, e.RequestURI)
		}
	}
	found := false
	for _, e := range itest.AuditEvents(t) {
		if e.ObjectRef.Subresource != "password" || e.ObjectRef.Name != name || e.User.Username != "carol" {
			continue
		}
		found = true
		if e.Level != "Metadata" {
			t.Errorf("the password change is audited at level %s", e.Level)
		}
	}
	if !found {
		t.Error("no audit event for carol's password change")
	}
}

// TestUserRoles checks the rules of IchorUsers through the API: lower roles
// only, and never without an enabled admin.
func TestUserRoles(t *testing.T) {
	ctx := itest.APIContext(t)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().IchorUsers()
	users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
	// No other test leaves an enabled admin behind (this one neither), so
	// the users below are the only ones that count.
	existing, err := users.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range existing.Items {
		if u.Spec.Role == v1alpha1.UserRoleAdmin && !u.Spec.Disabled {
			t.Fatalf("IchorUser %s is an enabled admin another test left behind", u.Name)
		}
	}
	mine := []string{"root-admin", "olly", "second-admin"}
	// Registered first, so it runs after every removal below.
	t.Cleanup(func() {
		for _, name := range mine {
			if _, err := users.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("IchorUser %s outlived the test: %v", name, err)
			}
		}
	})
	mk := func(name string, role v1alpha1.UserRole) {
		t.Helper()
		if _, err := admin.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.IchorUserSpec{Role: role}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			// The API keeps the last enabled admin, rightly: that one goes from storage.
			if err := users.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				if err := itest.CP.EtcdDelete(ctx, "/ichorusers/"+name); err != nil {
					t.Errorf("remove IchorUser %s: %v", name, err)
				}
			}
		})
	}
	mk("root-admin", v1alpha1.UserRoleAdmin)
	mk("olly", v1alpha1.UserRoleOperator)

	// The last enabled admin stays.
	if err := admin.Delete(ctx, "root-admin", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "root-admin is the last enabled admin") {
		t.Errorf("delete the last admin: %v", err)
	}
	ra, _ := admin.Get(ctx, "root-admin", metav1.GetOptions{})
	ra.Spec.Disabled = true
	if _, err := admin.Update(ctx, ra, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "to disable or demote it") {
		t.Errorf("disable the last admin: %v", err)
	}
	mk("second-admin", v1alpha1.UserRoleAdmin)
	if _, err := admin.Update(ctx, ra, metav1.UpdateOptions{}); err != nil {
		t.Errorf("disable an admin while another remains: %v", err)
	}
}

// TestLastAdminUnderConcurrentRemovals removes the only two enabled admins at
// once, round after round, by deleting both or by deleting one while
// disabling the other: each check alone sees the other admin, so without
// serialisation both would go through. One must be refused, every round.
func TestLastAdminUnderConcurrentRemovals(t *testing.T) {
	ctx := itest.APIContext(t)
	admin := itest.APIClientFor(t, itest.CP.ConfigFor("carol", "ichor:admin")).IchorV1alpha1().IchorUsers()
	users := itest.APIClient(t).IchorV1alpha1().IchorUsers()
	remove := func(ctx context.Context, name string) {
		if err := users.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			// The API keeps the last enabled admin, rightly: that one goes from storage.
			if err := itest.CP.EtcdDelete(ctx, "/ichorusers/"+name); err != nil {
				t.Errorf("remove IchorUser %s: %v", name, err)
			}
		}
	}
	const rounds = 12
	for round := range rounds {
		a, b := fmt.Sprintf("race-a-%d", round), fmt.Sprintf("race-b-%d", round)
		for _, name := range []string{a, b} {
			if _, err := admin.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.IchorUserSpec{Role: v1alpha1.UserRoleAdmin}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			t.Cleanup(func() { remove(context.Background(), name) })
		}
		disable := round%2 == 1
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			errs[0] = admin.Delete(ctx, a, metav1.DeleteOptions{})
		}()
		go func() {
			defer wg.Done()
			<-start
			if !disable {
				errs[1] = admin.Delete(ctx, b, metav1.DeleteOptions{})
				return
			}
			// As kubectl edit would be told: the other removal's check
			// may change b under this update, which then reads b again.
			errs[1] = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				u, err := admin.Get(ctx, b, metav1.GetOptions{})
				if err != nil {
					return err
				}
				u.Spec.Disabled = true
				_, err = admin.Update(ctx, u, metav1.UpdateOptions{})
				return err
			})
		}()
		close(start)
		wg.Wait()

		refused := 0
		for i, err := range errs {
			switch {
			case err == nil:
			case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is the last enabled admin"):
				refused++
			default:
				t.Errorf("round %d, removal %d: %v", round, i, err)
			}
		}
		list, err := users.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		enabled := 0
		for _, u := range list.Items {
			if u.Spec.Role == v1alpha1.UserRoleAdmin && !u.Spec.Disabled && u.DeletionTimestamp == nil {
				enabled++
			}
		}
		if refused != 1 || enabled != 1 {
			t.Fatalf("round %d (disable=%v): %d of 2 removals refused and %d enabled admins left, want 1 and 1: %v", round, disable, refused, enabled, errs)
		}
		for _, name := range []string{a, b} {
			remove(ctx, name)
		}
	}
}

// TestUserManagerOfViewers: who may manage whom is RBAC's, through the
// grant verb on ichorusers/<role>, not group names in code. An admin
// delegates managing viewers to hana, who holds no Ichor role: she manages
// viewers, and cannot create an operator, promote her viewer, or set an
// admin's password (the next-higher roles she would try).
func TestUserManagerOfViewers(t *testing.T) {
	ctx := itest.APIContext(t)
	kube := kubernetes.NewForConfigOrDie(itest.CP.AdminConfig)
	name := "ichor-test-viewer-manager"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"ichor.dev"}, Resources: []string{"ichorusers"}, Verbs: []string{"get", "create", "update", "delete"}},
		{APIGroups: []string{"ichor.dev"}, Resources: []string{"ichorusers/password"}, Verbs: []string{"update"}},
		{APIGroups: []string{"ichor.dev"}, Resources: []string{"ichorusers/viewer"}, Verbs: []string{"grant"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "hana"}}}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	admin := itest.APIClient(t).IchorV1alpha1().IchorUsers()
	hana := itest.APIClientFor(t, itest.CP.ConfigFor("hana")).IchorV1alpha1().IchorUsers()
	mk := func(c interface {
		Create(context.Context, *v1alpha1.IchorUser, metav1.CreateOptions) (*v1alpha1.IchorUser, error)
	}, name string, role v1alpha1.UserRole) error {
		_, err := c.Create(ctx, &v1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.IchorUserSpec{Role: role, Disabled: true}}, metav1.CreateOptions{})
		if err == nil {
			t.Cleanup(func() { _ = admin.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		return err
	}
	if err := mk(admin, "boss", v1alpha1.UserRoleAdmin); err != nil {
		t.Fatal(err)
	}

	// RBAC rules may change after creation; poll for hana's first allowed write.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return mk(hana, "vicky", v1alpha1.UserRoleViewer) == nil, nil
	}); err != nil {
		t.Fatalf("hana creates a viewer: %v", err)
	}
	password := &v1alpha1.IchorUserPassword{ObjectMeta: metav1.ObjectMeta{Name: "vicky"}, Password: "a long enough password"}
	if _, err := hana.UpdatePassword(ctx, "vicky", password, metav1.UpdateOptions{}); err != nil {
		t.Errorf("hana sets her viewer's password: %v", err)
	}

	refused := func(what string, err error, role string) {
		t.Helper()
		want := fmt.Sprintf(`needs the "grant" verb on resource "ichorusers", subresource %q`, role)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want Forbidden: %s", what, err, want)
		}
	}
	refused("hana creates an operator", mk(hana, "otto", v1alpha1.UserRoleOperator), "operator")
	vicky, err := hana.Get(ctx, "vicky", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vicky.Spec.Role = v1alpha1.UserRoleAdmin
	_, err = hana.Update(ctx, vicky, metav1.UpdateOptions{})
	refused("hana promotes her viewer to admin", err, "admin")
	password.Name = "boss"
	_, err = hana.UpdatePassword(ctx, "boss", password, metav1.UpdateOptions{})
	refused("hana sets an admin's password", err, "admin")
	refused("hana deletes an admin", hana.Delete(ctx, "boss", metav1.DeleteOptions{}), "admin")
	if err := hana.Delete(ctx, "vicky", metav1.DeleteOptions{}); err != nil {
		t.Errorf("hana deletes her viewer: %v", err)
	}
}
