package machineaddresses

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned/fake"
	"ichor.dev/ichor/pkg/generated/informers/externalversions"
)

// TestOneMachinePerHeldAddress: a machine at an address another machine
// holds is refused, whatever the spelling and namespace, naming the holder
// only in its own namespace; an unheld address, an update that keeps the
// address, and a reclaim's machine for the machine it resets pass.
func TestOneMachinePerHeldAddress(t *testing.T) {
	f := externalversions.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)
	p := New()
	p.SetIchorInformers(f)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	add := func(o any) {
		var err error
		switch o := o.(type) {
		case *v1alpha1.TalosMachine:
			err = f.Ichor().V1alpha1().TalosMachines().Informer().GetIndexer().Add(o)
		case *v1alpha1.MachineReclaim:
			err = f.Ichor().V1alpha1().MachineReclaims().Informer().GetIndexer().Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	add(&v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "held", UID: "u-held"},
		Spec:   v1alpha1.TalosMachineSpec{Address: "10.5.0.7:50000"},
		Status: v1alpha1.TalosMachineStatus{Maintenance: &v1alpha1.MaintenanceStatus{CertificateFingerprint: "x"}}})
	add(&v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "waiting", UID: "u-waiting"},
		Spec: v1alpha1.TalosMachineSpec{Address: "10.5.0.8:50000"}})
	add(&v1alpha1.MachineReclaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "take-held"},
		Spec: v1alpha1.MachineReclaimSpec{MachineRef: &v1alpha1.MachineReference{Namespace: "team-a", Name: "held"}}})

	machine := func(ns, name, address string, labels map[string]string) *ichor.TalosMachine {
		return &ichor.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: ichor.TalosMachineSpec{Address: address}}
	}
	validate := func(obj, old *ichor.TalosMachine) error {
		op := admission.Create
		if old != nil {
			op = admission.Update
		}
		var oldObj runtime.Object
		if old != nil {
			oldObj = old
		}
		return p.Validate(context.Background(), admission.NewAttributesRecord(obj, oldObj, ichor.Kind("TalosMachine").WithVersion("v1alpha1"),
			obj.Namespace, obj.Name, ichor.Resource("talosmachines").WithVersion("v1alpha1"), "", op, nil, false, &user.DefaultInfo{Name: "olivia"}), nil)
	}
	moved := machine("team-a", "held", "10.5.0.7:50000", nil)
	moved.UID = types.UID("u-held")
	for _, c := range []struct {
		name     string
		obj, old *ichor.TalosMachine
		refused  string
	}{
		{"another namespace", machine("team-b", "claim", "10.5.0.7:50000", nil), nil, "a TalosMachine in another namespace holds"},
		{"an IPv4-mapped spelling", machine("team-b", "claim", "[::ffff:10.5.0.7]:50000", nil), nil, "another namespace"},
		{"without the default port", machine("team-b", "claim", "10.5.0.7", nil), nil, "another namespace"},
		{"its own namespace", machine("team-a", "second", "10.5.0.7:50000", nil), nil, "TalosMachine held holds"},
		{"moved there", machine("team-b", "m", "10.5.0.7:50000", nil), machine("team-b", "m", "10.5.0.9:50000", nil), "another namespace"},
		{"an address nobody holds yet", machine("team-b", "claim", "10.5.0.8:50000", nil), nil, ""},
		{"the holder itself, unchanged", moved, moved, ""},
		{"a reclaim's machine for the one it resets", machine("team-b", "take-held", "10.5.0.7:50000", map[string]string{v1alpha1.LabelMachineReclaim: "take-held"}), nil, ""},
		{"a label naming a reclaim of another machine", machine("team-b", "x", "10.5.0.7:50000", map[string]string{v1alpha1.LabelMachineReclaim: "no-such"}), nil, "another namespace"},
	} {
		err := validate(c.obj, c.old)
		if (c.refused == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.refused) {
			t.Errorf("%s: %v, want refused %q", c.name, err, c.refused)
		}
		if err != nil && c.obj.Namespace != "team-a" && strings.Contains(err.Error(), "held holds") {
			t.Errorf("%s: the refusal names another namespace's machine: %v", c.name, err)
		}
	}
}
