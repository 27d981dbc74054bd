package validation

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// validOperation is an internal TalosOperation of the given type with every
// parameter block of the type, and the v1alpha1 defaults filled in by hand.
func validOperation(typ ichor.OperationType) *ichor.TalosOperation {
	o := &ichor.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "op-1", Namespace: "team-a", ResourceVersion: "1"},
		Spec:       ichor.TalosOperationSpec{ClusterName: "prod", Type: typ},
	}
	s := &o.Spec
	switch typ {
	case ichor.OperationTalosUpgrade:
		s.TalosUpgrade = &ichor.TalosUpgradeParameters{Version: "v1.13.1"}
	case ichor.OperationKubernetesUpgrade:
		s.KubernetesUpgrade = &ichor.KubernetesUpgradeParameters{Version: "v1.38.0"}
	case ichor.OperationEtcdRestore:
		s.EtcdRestore = &ichor.EtcdRestoreParameters{Backup: "prod-20261204-0300", IdentitySecret: "backup-identity"}
	case ichor.OperationNodeReset:
		s.Machines = []string{"node-3"}
		s.NodeReset = &ichor.NodeResetParameters{Graceful: ptr(true), Wipe: ichor.WipeModeAll}
	case ichor.OperationReboot:
		s.Reboot = &ichor.RebootParameters{}
	case ichor.OperationNodeShutdown:
		s.Machines = []string{"node-3", "node-4"}
		s.NodeShutdown = &ichor.NodeShutdownParameters{}
	case ichor.OperationCARotation:
		s.CARotation = &ichor.CARotationParameters{Talos: ptr(true)}
	case ichor.OperationKeyRotation:
		s.KeyRotation = &ichor.KeyRotationParameters{Keys: []ichor.RotatableKey{ichor.KeyDiskEncryption}}
	}
	return o
}

// TestValidateTalosOperationEveryType: every type of ichor.Operations is
// accepted with what it needs, and refused as its descriptor says: its
// machines, its parameters and every other type's, maxUnavailable.
func TestValidateTalosOperationEveryType(t *testing.T) {
	for _, d := range ichor.Operations {
		t.Run(string(d.Type), func(t *testing.T) {
			expectErrors(t, ValidateTalosOperation(validOperation(d.Type)))

			o := validOperation(d.Type)
			switch d.Machines {
			case ichor.MachinesRequired:
				o.Spec.Machines = nil
				expectErrors(t, ValidateTalosOperation(o), required("spec.machines"))
			case ichor.MachinesForbidden:
				o.Spec.Machines = []string{"node-1"}
				expectErrors(t, ValidateTalosOperation(o), forbidden("spec.machines"))
			case ichor.MachinesOptional:
				o.Spec.Machines = []string{"node-1"}
				expectErrors(t, ValidateTalosOperation(o))
				o.Spec.Machines = nil
				expectErrors(t, ValidateTalosOperation(o))
			default:
				t.Errorf("machine scope %q", d.Machines)
			}

			o = validOperation(d.Type)
			o.Spec.MaxUnavailable = ptr[int32](2)
			if d.Batched {
				expectErrors(t, ValidateTalosOperation(o))
			} else {
				expectErrors(t, ValidateTalosOperation(o), forbidden("spec.maxUnavailable"))
			}

			for _, p := range d.Parameters {
				o := validOperation(d.Type)
				unset(t, &o.Spec, p.Field)
				if p.Presence == ichor.ParameterOptional {
					expectErrors(t, ValidateTalosOperation(o))
				} else {
					expectErrors(t, ValidateTalosOperation(o), required(p.Path()))
				}
			}
			for _, other := range ichor.Operations {
				if other.Type == d.Type {
					continue
				}
				for _, p := range other.Parameters {
					o := validOperation(d.Type)
					setFrom(t, &o.Spec, &validOperation(other.Type).Spec, p.Field)
					if !p.IsSet(&o.Spec) {
						t.Fatalf("validOperation(%s) leaves %s out", other.Type, p.Path())
					}
					expectErrors(t, ValidateTalosOperation(o), forbidden(p.Path()))
				}
			}
		})
	}
}

// TestValidateTalosOperationRetiredType: a type the API no longer takes is
// refused, saying what to use instead.
func TestValidateTalosOperationRetiredType(t *testing.T) {
	for typ := range ichor.RetiredOperationTypes {
		errs := ValidateTalosOperation(validOperation(typ))
		expectErrors(t, errs, invalid("spec.type"))
		if len(errs) == 1 && !strings.Contains(errs[0].Detail, "TalosBackup") {
			t.Errorf("%s: %q does not say what to use instead", typ, errs[0].Detail)
		}
	}
}

// unset clears the parameter block named field (as the API names it) of s.
func unset(t *testing.T, s *ichor.TalosOperationSpec, field string) {
	t.Helper()
	f := specField(t, reflect.ValueOf(s).Elem(), field)
	f.SetZero()
}

// setFrom copies the parameter block named field from src to dst.
func setFrom(t *testing.T, dst, src *ichor.TalosOperationSpec, field string) {
	t.Helper()
	specField(t, reflect.ValueOf(dst).Elem(), field).Set(specField(t, reflect.ValueOf(src).Elem(), field))
}

// specField is the field of an internal spec whose versioned field is
// named field: the internal and versioned fields share their Go names.
func specField(t *testing.T, spec reflect.Value, field string) reflect.Value {
	t.Helper()
	versioned := reflect.TypeFor[v1alpha1.TalosOperationSpec]()
	for i := range versioned.NumField() {
		f := versioned.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == field {
			return spec.FieldByName(f.Name)
		}
	}
	t.Fatalf("TalosOperationSpec has no field %s", field)
	return reflect.Value{}
}

func TestValidateTalosOperation(t *testing.T) {
	cases := []struct {
		name   string
		typ    ichor.OperationType
		mutate func(s *ichor.TalosOperationSpec)
		want   []fe
	}{
		{
			name:   "talos upgrade of some machines, staged",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"node-1"}; s.TalosUpgrade.Stage = true },
		},
		{
			name:   "reboot two workers at a time",
			typ:    ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) { s.MaxUnavailable = ptr[int32](2) },
		},
		{
			name:   "maxUnavailable zero",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.MaxUnavailable = ptr[int32](0) },
			want:   []fe{invalid("spec.maxUnavailable")},
		},
		{
			name:   "maxUnavailable over the limit",
			typ:    ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) { s.MaxUnavailable = ptr[int32](101) },
			want:   []fe{invalid("spec.maxUnavailable")},
		},
		{
			name:   "maxUnavailable for an etcd operation",
			typ:    ichor.OperationEtcdDefrag,
			mutate: func(s *ichor.TalosOperationSpec) { s.MaxUnavailable = ptr[int32](2) },
			want:   []fe{forbidden("spec.maxUnavailable")},
		},
		{
			name:   "etcd defrag of one control plane",
			typ:    ichor.OperationEtcdDefrag,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"cp-1"} },
		},
		{
			name:   "node reset without parameters",
			typ:    ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) { s.NodeReset = nil },
		},
		{
			name: "node reset keeping user disks, not graceful",
			typ:  ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.NodeReset = &ichor.NodeResetParameters{Graceful: ptr(false), Wipe: ichor.WipeModeSystemDisk}
			},
		},
		{
			name: "node reset of a user disk",
			typ:  ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.NodeReset = &ichor.NodeResetParameters{Graceful: ptr(true), Wipe: ichor.WipeModeUserDisks, UserDisks: []string{"/dev/sdb"}}
			},
		},
		{
			name: "node reset of user disks naming none",
			typ:  ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.NodeReset = &ichor.NodeResetParameters{Graceful: ptr(true), Wipe: ichor.WipeModeUserDisks}
			},
			want: []fe{required("spec.nodeReset.userDisks")},
		},
		{
			name: "node reset of the system disk naming user disks",
			typ:  ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.NodeReset = &ichor.NodeResetParameters{Graceful: ptr(true), Wipe: ichor.WipeModeSystemDisk, UserDisks: []string{"/dev/sdb"}}
			},
			want: []fe{forbidden("spec.nodeReset.userDisks")},
		},
		{
			name: "node reset naming disks that are not device paths, or twice",
			typ:  ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.NodeReset.UserDisks = []string{"sdb", "/dev/", "/dev/../etc", "/dev/sdc", "/dev/sdc"}
			},
			want: []fe{invalid("spec.nodeReset.userDisks[0]"), invalid("spec.nodeReset.userDisks[1]"), invalid("spec.nodeReset.userDisks[2]"),
				duplicate("spec.nodeReset.userDisks[4]")},
		},
		{
			name:   "shutdown of the whole cluster, workers two at a time",
			typ:    ichor.OperationShutdown,
			mutate: func(s *ichor.TalosOperationSpec) { s.MaxUnavailable = ptr[int32](2) },
		},
		{
			name: "node shutdown without draining",
			typ:  ichor.OperationNodeShutdown,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.NodeShutdown = &ichor.NodeShutdownParameters{Force: true}
				s.MaxUnavailable = ptr[int32](2)
			},
		},
		{
			name:   "node shutdown parameters on a reboot",
			typ:    ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) { s.NodeShutdown = &ichor.NodeShutdownParameters{} },
			want:   []fe{forbidden("spec.nodeShutdown")},
		},
		{
			name:   "maxUnavailable for a node reset",
			typ:    ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) { s.MaxUnavailable = ptr[int32](2) },
			want:   []fe{forbidden("spec.maxUnavailable")},
		},
		{
			name:   "cluster name missing",
			typ:    ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) { s.ClusterName = "" },
			want:   []fe{required("spec.clusterName")},
		},
		{
			name:   "type missing",
			typ:    "",
			mutate: func(s *ichor.TalosOperationSpec) {},
			want:   []fe{required("spec.type")},
		},
		{
			name: "unknown type stops further checks",
			typ:  "format-everything",
			mutate: func(s *ichor.TalosOperationSpec) {
				s.Machines = []string{"a", "a"}
				s.TalosUpgrade = &ichor.TalosUpgradeParameters{}
			},
			want: []fe{notSupported("spec.type")},
		},
		{
			name:   "talos upgrade without parameters",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.TalosUpgrade = nil },
			want:   []fe{required("spec.talosUpgrade")},
		},
		{
			name:   "talos upgrade to a semver without leading v",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.TalosUpgrade.Version = "1.13.1" },
			want:   []fe{invalid("spec.talosUpgrade.version")},
		},
		{
			name:   "talos upgrade to a release Ichor does not manage",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.TalosUpgrade.Version = "v1.15.0" },
			want:   []fe{invalid("spec.talosUpgrade.version")},
		},
		{
			name:   "talos upgrade to v1.14",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.TalosUpgrade.Version = "v1.14.1" },
		},
		{
			name:   "talos upgrade without version",
			typ:    ichor.OperationTalosUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.TalosUpgrade.Version = "" },
			want:   []fe{required("spec.talosUpgrade.version")},
		},
		{
			name:   "kubernetes upgrade without parameters",
			typ:    ichor.OperationKubernetesUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.KubernetesUpgrade = nil },
			want:   []fe{required("spec.kubernetesUpgrade")},
		},
		{
			name:   "kubernetes upgrade to a bad version",
			typ:    ichor.OperationKubernetesUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.KubernetesUpgrade.Version = "latest" },
			want:   []fe{invalid("spec.kubernetesUpgrade.version")},
		},
		{
			name:   "kubernetes upgrade of some machines",
			typ:    ichor.OperationKubernetesUpgrade,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"node-1"} },
			want:   []fe{forbidden("spec.machines")},
		},
		{
			name:   "ca rotation of some machines",
			typ:    ichor.OperationCARotation,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"cp-1"} },
			want:   []fe{forbidden("spec.machines")},
		},
		{
			name:   "ca rotation without its parameters",
			typ:    ichor.OperationCARotation,
			mutate: func(s *ichor.TalosOperationSpec) { s.CARotation = nil },
			want:   []fe{required("spec.caRotation")},
		},
		{
			name: "ca rotation of no CA",
			typ:  ichor.OperationCARotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.CARotation.Talos, s.CARotation.Kubernetes = ptr(false), ptr(false)
			},
			want: []fe{required("spec.caRotation")},
		},
		{
			name:   "ca rotation of the Kubernetes CA alone",
			typ:    ichor.OperationCARotation,
			mutate: func(s *ichor.TalosOperationSpec) { s.CARotation.Talos, s.CARotation.Kubernetes = ptr(false), ptr(true) },
		},
		{
			name:   "ca rotation parameters on a reboot",
			typ:    ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) { s.CARotation = &ichor.CARotationParameters{Talos: ptr(true)} },
			want:   []fe{forbidden("spec.caRotation")},
		},
		{
			name:   "key rotation without its parameters",
			typ:    ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) { s.KeyRotation = nil },
			want:   []fe{required("spec.keyRotation")},
		},
		{
			name:   "key rotation of no key",
			typ:    ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) { s.KeyRotation.Keys = nil },
			want:   []fe{required("spec.keyRotation.keys")},
		},
		{
			name: "key rotation of keys by other names, of an unknown one, and of one twice",
			typ:  ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation.Keys = []ichor.RotatableKey{"secretbox", "aescbc", "talosCA", "luks", ichor.KeyDiskEncryption, ichor.KeyDiskEncryption}
			},
			want: []fe{invalid("spec.keyRotation.keys[0]"), invalid("spec.keyRotation.keys[1]"), invalid("spec.keyRotation.keys[2]"),
				notSupported("spec.keyRotation.keys[3]"), duplicate("spec.keyRotation.keys[5]")},
		},
		{
			name: "key rotation of the disk-encryption key with a Kubernetes key",
			typ:  ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation.Keys = []ichor.RotatableKey{ichor.KeyDiskEncryption, ichor.KeySecretsEncryption}
			},
			want: []fe{invalid("spec.keyRotation.keys")},
		},
		{
			name: "key rotation with a grace period for a key it does not rotate, and one out of range",
			typ:  ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation.ServiceAccountGracePeriod = &metav1.Duration{Duration: time.Hour}
			},
			want: []fe{forbidden("spec.keyRotation.serviceAccountGracePeriod")},
		},
		{
			name: "key rotation of the service-account key with a negative grace period",
			typ:  ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation.Keys = []ichor.RotatableKey{ichor.KeyServiceAccount}
				s.KeyRotation.ServiceAccountGracePeriod = &metav1.Duration{Duration: -time.Second}
			},
			want: []fe{invalid("spec.keyRotation.serviceAccountGracePeriod")},
		},
		{
			name: "key rotation of the service-account key with a grace period past a month",
			typ:  ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation.Keys = []ichor.RotatableKey{ichor.KeyServiceAccount}
				s.KeyRotation.ServiceAccountGracePeriod = &metav1.Duration{Duration: 721 * time.Hour}
			},
			want: []fe{invalid("spec.keyRotation.serviceAccountGracePeriod")},
		},
		{
			name: "key rotation of both Kubernetes keys, the old service-account key dropped at once",
			typ:  ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation.Keys = []ichor.RotatableKey{ichor.KeyServiceAccount, ichor.KeySecretsEncryption}
				s.KeyRotation.ServiceAccountGracePeriod = &metav1.Duration{}
			},
		},
		{
			name:   "key rotation of some machines",
			typ:    ichor.OperationKeyRotation,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"cp-1"} },
			want:   []fe{forbidden("spec.machines")},
		},
		{
			name: "key rotation parameters on a ca rotation",
			typ:  ichor.OperationCARotation,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.KeyRotation = &ichor.KeyRotationParameters{Keys: []ichor.RotatableKey{ichor.KeyDiskEncryption}}
			},
			want: []fe{forbidden("spec.keyRotation")},
		},
		{
			name:   "shutdown of some machines",
			typ:    ichor.OperationShutdown,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"cp-1"} },
			want:   []fe{forbidden("spec.machines")},
		},
		{
			name:   "node reset without machines",
			typ:    ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = nil },
			want:   []fe{required("spec.machines")},
		},
		{
			name:   "node shutdown without machines",
			typ:    ichor.OperationNodeShutdown,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{} },
			want:   []fe{required("spec.machines")},
		},
		{
			name:   "machines repeated or invalid",
			typ:    ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) { s.Machines = []string{"node-1", "node-1", "Node_2"} },
			want:   []fe{duplicate("spec.machines[1]"), invalid("spec.machines[2]")},
		},
		{
			name:   "node reset with an unknown wipe mode",
			typ:    ichor.OperationNodeReset,
			mutate: func(s *ichor.TalosOperationSpec) { s.NodeReset.Wipe = "everything" },
			want:   []fe{notSupported("spec.nodeReset.wipe")},
		},
		{
			name: "parameters of other types",
			typ:  ichor.OperationReboot,
			mutate: func(s *ichor.TalosOperationSpec) {
				s.TalosUpgrade = &ichor.TalosUpgradeParameters{Version: "v1.13.1"}
				s.KubernetesUpgrade = &ichor.KubernetesUpgradeParameters{Version: "v1.38.0"}
				s.NodeReset = &ichor.NodeResetParameters{}
				s.EtcdRestore = &ichor.EtcdRestoreParameters{Backup: "b", IdentitySecret: "k"}
			},
			want: []fe{
				forbidden("spec.talosUpgrade"), forbidden("spec.kubernetesUpgrade"),
				forbidden("spec.nodeReset"), forbidden("spec.etcdRestore"),
			},
		},
		{
			name:   "forbidden parameters are still checked",
			typ:    ichor.OperationEtcdDefrag,
			mutate: func(s *ichor.TalosOperationSpec) { s.TalosUpgrade = &ichor.TalosUpgradeParameters{Version: "1.13"} },
			want:   []fe{forbidden("spec.talosUpgrade"), invalid("spec.talosUpgrade.version")},
		},
		{
			name:   "etcd restore without parameters",
			typ:    ichor.OperationEtcdRestore,
			mutate: func(s *ichor.TalosOperationSpec) { s.EtcdRestore = nil },
			want:   []fe{required("spec.etcdRestore")},
		},
		{
			name:   "etcd restore naming no backup",
			typ:    ichor.OperationEtcdRestore,
			mutate: func(s *ichor.TalosOperationSpec) { s.EtcdRestore.Backup = "" },
			want:   []fe{required("spec.etcdRestore.backup")},
		},
		{
			name:   "etcd restore naming no identity",
			typ:    ichor.OperationEtcdRestore,
			mutate: func(s *ichor.TalosOperationSpec) { s.EtcdRestore.IdentitySecret = "" },
			want:   []fe{required("spec.etcdRestore.identitySecret")},
		},
		{
			name:   "etcd restore naming an identity Secret by no valid name",
			typ:    ichor.OperationEtcdRestore,
			mutate: func(s *ichor.TalosOperationSpec) { s.EtcdRestore.IdentitySecret = "Keys/age" },
			want:   []fe{invalid("spec.etcdRestore.identitySecret")},
		},
		{
			name:   "etcd restore naming a backup by no valid name",
			typ:    ichor.OperationEtcdRestore,
			mutate: func(s *ichor.TalosOperationSpec) { s.EtcdRestore.Backup = "Backups/db" },
			want:   []fe{invalid("spec.etcdRestore.backup")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := validOperation(tc.typ)
			tc.mutate(&o.Spec)
			expectErrors(t, ValidateTalosOperation(o), tc.want...)
		})
	}
}

// TestValidateTalosOperationDefaulted checks that a node reset written without
// parameters is defaulted to a graceful reset of every disk, which validates.
func TestValidateTalosOperationDefaulted(t *testing.T) {
	in := &v1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: "reset-node-3", Namespace: "team-a"},
		Spec: v1alpha1.TalosOperationSpec{
			ClusterName: "prod",
			Type:        v1alpha1.OperationNodeReset,
			Machines:    []string{"node-3"},
		},
	}
	out := &ichor.TalosOperation{}
	defaultedInternal(t, in, out)
	r := out.Spec.NodeReset
	if r == nil || r.Graceful == nil || !*r.Graceful || r.Wipe != ichor.WipeModeAll {
		t.Fatalf("node reset defaulted to %+v, want graceful and wipe all", r)
	}
	expectErrors(t, ValidateTalosOperation(out))
}

func TestValidateTalosOperationUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(o *ichor.TalosOperation)
		want   []fe
	}{
		{name: "unchanged", mutate: func(o *ichor.TalosOperation) {}},
		{
			name:   "labels may change",
			mutate: func(o *ichor.TalosOperation) { o.Labels = map[string]string{"ticket": "ops-42"} },
		},
		{
			name:   "same parameters in a new pointer",
			mutate: func(o *ichor.TalosOperation) { o.Spec.TalosUpgrade = &ichor.TalosUpgradeParameters{Version: "v1.13.1"} },
		},
		{
			name:   "machines changed",
			mutate: func(o *ichor.TalosOperation) { o.Spec.Machines = []string{"node-1"} },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "version changed",
			mutate: func(o *ichor.TalosOperation) { o.Spec.TalosUpgrade.Version = "v1.14.0" },
			want:   []fe{invalid("spec")},
		},
		{
			name:   "type changed",
			mutate: func(o *ichor.TalosOperation) { o.Spec.Type = ichor.OperationReboot; o.Spec.TalosUpgrade = nil },
			want:   []fe{invalid("spec")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validOperation(ichor.OperationTalosUpgrade)
			o := old.DeepCopy()
			tc.mutate(o)
			expectErrors(t, ValidateTalosOperationUpdate(o, old), tc.want...)
		})
	}
}

func TestValidateTalosOperationStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.TalosOperationStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.TalosOperationStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.TalosOperationStatus) {
				s.Phase = ichor.OperationRunning
				s.ObservedGeneration = 1
				s.StartedBy = "alice"
				s.StartedAt = &fixedTime
				s.Steps = []ichor.OperationStep{
					{Machine: "node-1", Phase: ichor.OperationSucceeded, StartedAt: &fixedTime, CompletedAt: &fixedTime},
					{Machine: "node-2", Phase: ichor.OperationRunning, Message: "draining"},
					{Machine: "node-3", Phase: ichor.OperationPending},
				}
				s.Conditions = []metav1.Condition{goodCondition("Progressing")}
			},
		},
		{
			name:   "unknown phase",
			mutate: func(s *ichor.TalosOperationStatus) { s.Phase = "Paused" },
			want:   []fe{notSupported("status.phase")},
		},
		{
			name: "bad steps",
			mutate: func(s *ichor.TalosOperationStatus) {
				s.Steps = []ichor.OperationStep{
					{Machine: "", Phase: ichor.OperationPending},
					{Machine: "node-2"},
					{Machine: "node-3", Phase: "Paused"},
				}
			},
			want: []fe{required("status.steps[0].machine"), required("status.steps[1].phase"), notSupported("status.steps[2].phase")},
		},
		{
			name: "two steps for one machine",
			mutate: func(s *ichor.TalosOperationStatus) {
				s.Steps = []ichor.OperationStep{
					{Machine: "node-1", Phase: ichor.OperationSucceeded},
					{Machine: "node-1", Phase: ichor.OperationRunning},
				}
			},
			want: []fe{duplicate("status.steps[1].machine")},
		},
		{
			name: "kubernetes-upgrade steps: one per machine and component",
			mutate: func(s *ichor.TalosOperationStatus) {
				s.Steps = []ichor.OperationStep{
					{Machine: "node-1", Component: ichor.ComponentAPIServer, Phase: ichor.OperationSucceeded},
					{Machine: "node-1", Component: ichor.ComponentKubelet, Phase: ichor.OperationRunning},
					{Machine: "node-1", Component: ichor.ComponentKubelet, Phase: ichor.OperationPending},
					{Machine: "node-2", Component: "etcd", Phase: ichor.OperationPending},
				}
			},
			want: []fe{duplicate("status.steps[2].component"), notSupported("status.steps[3].component")},
		},
		{
			name: "etcd-restore steps: one per machine and action",
			mutate: func(s *ichor.TalosOperationStatus) {
				s.Steps = []ichor.OperationStep{
					{Machine: "node-1", Action: ichor.ActionWipeEtcd, Phase: ichor.OperationSucceeded},
					{Machine: "node-1", Action: ichor.ActionRecoverEtcd, Phase: ichor.OperationRunning},
					{Machine: "node-1", Action: ichor.ActionRecoverEtcd, Phase: ichor.OperationPending},
					{Machine: "node-2", Action: "format", Phase: ichor.OperationPending},
					{Machine: "node-3", Action: ichor.ActionJoinEtcd, Component: ichor.ComponentKubelet, Phase: ichor.OperationPending},
				}
			},
			want: []fe{duplicate("status.steps[2].action"), notSupported("status.steps[3].action"), forbidden("status.steps[4].action")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.TalosOperationStatus)
			want   []fe
		}{bc.name, func(s *ichor.TalosOperationStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validOperation(ichor.OperationReboot)
			o := old.DeepCopy()
			tc.mutate(&o.Status)
			expectErrors(t, ValidateTalosOperationStatusUpdate(o, old), tc.want...)
		})
	}
}
