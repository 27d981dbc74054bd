package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// operationOf is the descriptor of op's type (what it does, whether it is
// destructive, its targets) and op's spec in the form the descriptor reads.
func operationOf(op *v1alpha1.TalosOperation) (ichor.OperationDescriptor, *ichor.TalosOperationSpec, bool) {
	d, ok := ichor.OperationFor(ichor.OperationType(op.Spec.Type))
	var spec ichor.TalosOperationSpec
	if err := v1alpha1.Convert_v1alpha1_TalosOperationSpec_To_ichor_TalosOperationSpec(&op.Spec, &spec, nil); err != nil {
		return d, nil, false
	}
	return d, &spec, ok
}

// destructive reports whether starting op takes typing the cluster's name:
// its type takes nodes or data away for longer than a reboot, or the
// console does not know the type.
func destructive(op *v1alpha1.TalosOperation) bool {
	d, ok := ichor.OperationFor(ichor.OperationType(op.Spec.Type))
	return !ok || d.Destructive
}

// parameterForm fills a parameter block of the spec (by its field, as
// ichor.Operations names it) from inputs of the creation form.
type parameterForm struct {
	inputs []string
	fill   func(form url.Values, s *v1alpha1.TalosOperationSpec)
}

// parameterForms are the parameter blocks the creation form fills. A type
// whose required block is not here cannot be created from the console
// (TestParameterForms); the others take their defaults.
var parameterForms = map[string]parameterForm{
	"talosUpgrade": {[]string{"version"}, func(f url.Values, s *v1alpha1.TalosOperationSpec) {
		s.TalosUpgrade = &v1alpha1.TalosUpgradeParameters{Version: strings.TrimSpace(f.Get("version"))}
	}},
	"kubernetesUpgrade": {[]string{"version"}, func(f url.Values, s *v1alpha1.TalosOperationSpec) {
		s.KubernetesUpgrade = &v1alpha1.KubernetesUpgradeParameters{Version: strings.TrimSpace(f.Get("version"))}
	}},
	"etcdRestore": {[]string{"backup", "identitySecret"}, func(f url.Values, s *v1alpha1.TalosOperationSpec) {
		s.EtcdRestore = &v1alpha1.EtcdRestoreParameters{Backup: strings.TrimSpace(f.Get("backup")),
			IdentitySecret: strings.TrimSpace(f.Get("identitySecret"))}
	}},
	"nodeReset": {[]string{"wipe"}, func(f url.Values, s *v1alpha1.TalosOperationSpec) {
		s.NodeReset = &v1alpha1.NodeResetParameters{Wipe: v1alpha1.WipeMode(f.Get("wipe"))}
	}},
}

// inputTypes are, by input of the creation form, the types it is for,
// as the form's labels name them.
var inputTypes = func() map[string]string {
	byInput := map[string][]string{}
	for _, d := range ichor.Operations {
		for _, p := range d.Parameters {
			for _, in := range parameterForms[p.Field].inputs {
				byInput[in] = append(byInput[in], string(d.Type))
			}
		}
		if d.Batched {
			byInput["maxUnavailable"] = append(byInput["maxUnavailable"], string(d.Type))
		}
	}
	out := map[string]string{}
	for in, types := range byInput {
		out[in] = strings.Join(types, ", ")
	}
	return out
}()

// operationRow is an operation in its cluster's list.
type operationRow struct {
	Name, Type, Phase, StartedBy string
	Created                      time.Time
	Done, Total                  int
}

func operationRowOf(op *v1alpha1.TalosOperation) operationRow {
	row := operationRow{Name: op.Name, Type: string(op.Spec.Type), Phase: string(op.Status.Phase), StartedBy: op.Status.StartedBy,
		Created: op.CreationTimestamp.Time, Total: len(op.Status.Steps)}
	if row.Phase == "" {
		row.Phase = string(v1alpha1.OperationPending)
	}
	for _, st := range op.Status.Steps {
		if st.Phase == v1alpha1.OperationSucceeded {
			row.Done++
		}
	}
	return row
}

// stepRow is one step of an operation's progress.
type stepRow struct {
	Name, Phase, Message string
	Started, Completed   string
}

// progress is what the live part of an operation's page shows.
type progress struct {
	Phase, StartedBy string
	Steps            []stepRow
	Conditions       []metav1.Condition
	// StartPath is where the person confirms a start: set while the
	// operation waits for one and the person may start it.
	StartPath string
	// Ended is whether the operation is over: the page stops following it.
	Ended bool
}

// progressOf is op's progress; startPath is offered while op waits to be
// started.
func progressOf(op *v1alpha1.TalosOperation, startPath string) progress {
	p := progress{Phase: string(op.Status.Phase), StartedBy: op.Status.StartedBy, Conditions: op.Status.Conditions}
	if p.Phase == "" {
		p.Phase = string(v1alpha1.OperationPending)
	}
	if p.Phase == string(v1alpha1.OperationPending) && p.StartedBy == "" {
		p.StartPath = startPath
	}
	p.Ended = op.Status.Phase == v1alpha1.OperationSucceeded || op.Status.Phase == v1alpha1.OperationFailed
	for _, st := range op.Status.Steps {
		p.Steps = append(p.Steps, stepRow{Name: st.Name(), Phase: string(st.Phase), Message: st.Message,
			Started: clock(st.StartedAt), Completed: clock(st.CompletedAt)})
	}
	return p
}

// clock is a time of day, UTC, or "" for none.
func clock(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("15:04:05")
}

// describe says what starting op does, naming the machines of cluster it
// acts on (all of machines when the operation names none).
func describe(op *v1alpha1.TalosOperation, machines []machineRow) string {
	d, spec, ok := operationOf(op)
	if !ok {
		return fmt.Sprintf("runs a %s operation, which this console does not know, on cluster %s", op.Spec.Type, op.Spec.ClusterName)
	}
	does := d.Does(spec)
	targets := op.Spec.Machines
	if len(targets) == 0 {
		controlPlanesOnly := d.Targets == ichor.TargetsControlPlanes
		for _, m := range machines {
			if !controlPlanesOnly || m.Role == string(v1alpha1.MachineRoleControlPlane) {
				targets = append(targets, m.Name)
			}
		}
	}
	what := strings.Join(targets, ", ")
	if what == "" {
		what = "no machine yet"
	}
	at := ""
	if n := op.Spec.MaxUnavailable; n != nil && *n > 1 {
		at = fmt.Sprintf(", at most %d workers at a time, control planes one at a time", *n)
	} else if op.Spec.Type != v1alpha1.OperationKubernetesUpgrade { // one component at a time
		at = ", one machine at a time"
	}
	return fmt.Sprintf("%s %s of cluster %s%s", does, what, op.Spec.ClusterName, at)
}

// restoredFrom says, for an etcd-restore, when the backup it restores was
// taken, as the person reads it, so that the confirmation names what the
// cluster goes back to.
func (s *Server) restoredFrom(ctx context.Context, cs versioned.Interface, op *v1alpha1.TalosOperation) string {
	if op.Spec.Type != v1alpha1.OperationEtcdRestore || op.Spec.EtcdRestore == nil {
		return ""
	}
	b, err := cs.IchorV1alpha1().TalosBackups(op.Namespace).Get(ctx, op.Spec.EtcdRestore.Backup, metav1.GetOptions{})
	switch {
	case err != nil:
		return fmt.Sprintf(" (backup %s cannot be read: %s)", op.Spec.EtcdRestore.Backup, apiReason(err))
	case b.Status.StartedAt == nil:
		return fmt.Sprintf(" (backup %s has not been taken)", b.Name)
	}
	return fmt.Sprintf(" (backup %s, taken at %s UTC: everything written to the cluster since is lost)", b.Name, b.Status.StartedAt.UTC().Format(time.DateTime))
}

// startable are the operation types who may start in ns, asked of
// kube-apiserver at once.
func (s *Server) startable(r *http.Request, se *session, ns string) []v1alpha1.OperationType {
	allowed := make([]bool, len(v1alpha1.OperationTypes))
	var wg sync.WaitGroup
	for i, t := range v1alpha1.OperationTypes {
		wg.Go(func() { allowed[i] = s.may(r, se, ns, "start", "talosoperations", string(t)) })
	}
	wg.Wait()
	var types []v1alpha1.OperationType
	for i, t := range v1alpha1.OperationTypes {
		if allowed[i] {
			types = append(types, t)
		}
	}
	return types
}

// operations lists a cluster's operations, newest first, with a form to
// create one of a type the person may start.
func (s *Server) operations(w http.ResponseWriter, r *http.Request, se *session) {
	s.renderOperations(w, r, se, http.StatusOK, "")
}

func (s *Server) renderOperations(w http.ResponseWriter, r *http.Request, se *session, status int, refused string) {
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
	machines, err := s.machinesOf(r, cs, ns, name)
	if err != nil {
		s.render(w, apiStatus(err), "operations", withRefusal(data, err))
		return
	}
	data["Machines"] = machines
	list, err := cs.IchorV1alpha1().TalosOperations(ns).List(r.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.clusterName", name).String(),
	})
	if err != nil {
		s.render(w, apiStatus(err), "operations", withRefusal(data, err))
		return
	}
	var rows []operationRow
	for i := range list.Items {
		rows = append(rows, operationRowOf(&list.Items[i]))
	}
	slices.SortFunc(rows, func(a, b operationRow) int { return b.Created.Compare(a.Created) })
	data["Operations"] = rows
	if s.may(r, se, ns, "create", "talosoperations", "") {
		data["Types"] = s.startable(r, se, ns)
		data["InputTypes"] = inputTypes
		data["WipeModes"] = []v1alpha1.WipeMode{v1alpha1.WipeModeAll, v1alpha1.WipeModeSystemDisk, v1alpha1.WipeModeUserDisks}
	}
	s.render(w, status, "operations", data)
}

// machinesOf are the machines of cluster name, by name; an error when the
// cluster cannot be read.
func (s *Server) machinesOf(r *http.Request, cs versioned.Interface, ns, name string) ([]machineRow, error) {
	if _, err := cs.IchorV1alpha1().TalosClusters(ns).Get(r.Context(), name, metav1.GetOptions{}); err != nil {
		return nil, err
	}
	return machinesIn(r.Context(), cs, ns, name)
}

// machinesIn are the machines of cluster in ns, by name.
func machinesIn(ctx context.Context, cs versioned.Interface, ns, cluster string) ([]machineRow, error) {
	list, err := cs.IchorV1alpha1().TalosMachines(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.clusterName", cluster).String(),
	})
	if err != nil {
		return nil, err
	}
	rows := make([]machineRow, 0, len(list.Items))
	for i := range list.Items {
		rows = append(rows, machineRowOf(&list.Items[i]))
	}
	slices.SortFunc(rows, func(a, b machineRow) int { return strings.Compare(a.Name, b.Name) })
	return rows, nil
}

// operationFrom is the operation a creation form asks for; the API
// validates it.
func operationFrom(r *http.Request, cluster string) (*v1alpha1.TalosOperation, error) {
	t := v1alpha1.OperationType(r.PostFormValue("type"))
	d, ok := ichor.OperationFor(ichor.OperationType(t))
	if !ok {
		return nil, fmt.Errorf("type %q: choose one of the operation types", t)
	}
	op := &v1alpha1.TalosOperation{Spec: v1alpha1.TalosOperationSpec{ClusterName: cluster, Type: t}}
	if name := strings.TrimSpace(r.PostFormValue("name")); name != "" {
		op.Name = name
	} else {
		op.GenerateName = string(t) + "-"
	}
	for _, m := range r.PostForm["machines"] {
		if !validNames(m) {
			return nil, fmt.Errorf("machine %q is not a machine's name", m)
		}
		op.Spec.Machines = append(op.Spec.Machines, m)
	}
	if v := strings.TrimSpace(r.PostFormValue("maxUnavailable")); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("maxUnavailable %q: a whole number", v)
		}
		op.Spec.MaxUnavailable = new(int32(n))
	}
	for _, p := range d.Parameters {
		if form, ok := parameterForms[p.Field]; ok {
			form.fill(r.PostForm, &op.Spec)
		}
	}
	return op, nil
}

// createOperation creates an operation as the person, Pending: starting it
// is a separate, confirmed step.
func (s *Server) createOperation(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if !validNames(ns, name) {
		http.NotFound(w, r)
		return
	}
	op, err := operationFrom(r, name)
	if err != nil {
		s.renderOperations(w, r, se, http.StatusBadRequest, err.Error())
		return
	}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	created, err := cs.IchorV1alpha1().TalosOperations(ns).Create(r.Context(), op, metav1.CreateOptions{})
	if err != nil {
		s.renderOperations(w, r, se, apiStatus(err), apiReason(err))
		return
	}
	http.Redirect(w, r, operationPath(ns, name, created.Name), http.StatusSeeOther)
}

func operationPath(ns, cluster, op string) string {
	return "/clusters/" + ns + "/" + cluster + "/operations/" + op
}

// operation shows one operation and its progress, which the page follows
// live; Start leads to a confirmation.
func (s *Server) operation(w http.ResponseWriter, r *http.Request, se *session) {
	s.renderOperation(w, r, se, "operation", http.StatusOK, "")
}

// confirmStart asks the person to confirm what starting the operation does.
func (s *Server) confirmStart(w http.ResponseWriter, r *http.Request, se *session) {
	s.renderOperation(w, r, se, "start", http.StatusOK, "")
}

func (s *Server) renderOperation(w http.ResponseWriter, r *http.Request, se *session, page string, status int, refused string) {
	ns, name, opName := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("operation")
	if !validNames(ns, name, opName) {
		http.NotFound(w, r)
		return
	}
	data := map[string]any{"Who": se.who, "CSRF": se.csrf, "Namespace": ns, "Name": name, "Operation": opName, "Refused": refused}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	op, err := cs.IchorV1alpha1().TalosOperations(ns).Get(r.Context(), opName, metav1.GetOptions{})
	if err == nil && op.Spec.ClusterName != name {
		http.NotFound(w, r)
		return
	}
	var machines []machineRow
	if err == nil {
		machines, err = s.machinesOf(r, cs, ns, name)
	}
	if err != nil {
		s.render(w, apiStatus(err), page, withRefusal(data, err))
		return
	}
	data["UID"] = op.UID
	data["Type"] = op.Spec.Type
	data["Does"] = describe(op, machines) + s.restoredFrom(r.Context(), cs, op)
	data["Destructive"] = destructive(op)
	startPath := ""
	if s.may(r, se, ns, "start", "talosoperations", string(op.Spec.Type)) {
		startPath = operationPath(ns, name, opName) + "/start"
	}
	p := progressOf(op, startPath)
	data["Progress"] = p
	// The page follows the operation from the version it shows.
	data["Live"] = operationPath(ns, name, opName) + "/live?" + url.Values{"resourceVersion": {op.ResourceVersion}}.Encode()
	data["MayStart"] = p.StartPath != ""
	s.render(w, status, page, data)
}

// start starts an operation as the person, once confirmed: a destructive
// one needs the cluster's name typed.
func (s *Server) start(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name, opName := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("operation")
	if !validNames(ns, name, opName) {
		http.NotFound(w, r)
		return
	}
	cs, ok := s.ichorClient(w, s.as(se))
	if !ok {
		return
	}
	ops := cs.IchorV1alpha1().TalosOperations(ns)
	op, err := ops.Get(r.Context(), opName, metav1.GetOptions{})
	if err != nil {
		s.renderOperation(w, r, se, "start", apiStatus(err), apiReason(err))
		return
	}
	if op.Spec.ClusterName != name {
		http.NotFound(w, r)
		return
	}
	// What was confirmed is this object: not another made since under its name.
	if string(op.UID) != r.PostFormValue("uid") {
		s.renderOperation(w, r, se, "start", http.StatusConflict, "the operation changed since you confirmed it: read what it does again")
		return
	}
	if destructive(op) && r.PostFormValue("confirm") != name {
		s.renderOperation(w, r, se, "start", http.StatusBadRequest, fmt.Sprintf("type the cluster's name, %s, to confirm", name))
		return
	}
	// The confirmed object's UID goes with the start, which ichor-apiserver
	// holds as a precondition: a delete and re-create after the check above
	// is refused too.
	confirmed := &v1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: opName, UID: types.UID(r.PostFormValue("uid"))}}
	if _, err := ops.Start(r.Context(), opName, confirmed, metav1.CreateOptions{}); err != nil {
		s.renderOperation(w, r, se, "start", apiStatus(err), apiReason(err))
		return
	}
	http.Redirect(w, r, operationPath(ns, name, opName), http.StatusSeeOther)
}
