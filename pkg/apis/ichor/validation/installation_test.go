package validation

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// validInstallation is the internal IchorInstallation singleton with the
// v1alpha1 defaults filled in by hand.
func validInstallation() *ichor.IchorInstallation {
	return &ichor.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichor.InstallationName, ResourceVersion: "1"},
		Spec: ichor.IchorInstallationSpec{
			Version: "v0.4.0",
			Settings: ichor.InstallationSettings{
				ProvisioningNetworks: []string{"10.5.0.0/24"},
				ScanInterval:         dur(5 * time.Minute),
				CredentialLifetimes: ichor.CredentialLifetimes{
					TalosCredential:   dur(10 * time.Minute),
					ReaderTalosconfig: dur(time.Hour),
				},
			},
		},
	}
}

func TestValidateIchorInstallation(t *testing.T) {
	settings := "spec.settings"
	lifetimes := settings + ".credentialLifetimes"
	cases := []struct {
		name   string
		mutate func(in *ichor.IchorInstallation)
		want   []fe
	}{
		{name: "valid", mutate: func(in *ichor.IchorInstallation) {}},
		{
			name: "valid at the bounds",
			mutate: func(in *ichor.IchorInstallation) {
				s := &in.Spec.Settings
				s.ProvisioningNetworks = []string{"10.0.0.0/16", "fd00:5::/112", "192.168.1.7/32"}
				s.ScanInterval = dur(30 * time.Second)
				s.CredentialLifetimes.TalosCredential = dur(time.Minute)
				s.CredentialLifetimes.ReaderTalosconfig = dur(time.Minute)
				s.UsersEnabled = true
			},
		},
		{
			name: "an image factory, with and without a registry of its own",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ImageFactory = &ichor.ImageFactory{URL: "https://factory.example.com", Registry: "mirror.example.com:5000"}
			},
		},
		{
			name: "an image factory over http",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ImageFactory = &ichor.ImageFactory{URL: "http://factory.example.com"}
			},
			want: []fe{invalid("spec.settings.imageFactory.url")},
		},
		{
			name: "a registry with a scheme, a path or a bad port",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ImageFactory = &ichor.ImageFactory{URL: "https://factory.example.com", Registry: "https://mirror.example.com/x"}
			},
			want: []fe{invalid("spec.settings.imageFactory.registry")},
		},
		{
			name: "an image factory without its URL",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ImageFactory = &ichor.ImageFactory{Registry: "mirror.example.com"}
			},
			want: []fe{required("spec.settings.imageFactory.url")},
		},
		{
			name: "valid tenants, audiences and ambient buckets",
			mutate: func(in *ichor.IchorInstallation) {
				s := &in.Spec.Settings
				s.NamespaceProvisioningNetworks = []ichor.NamespaceProvisioningNetworks{
					{Namespace: "team-a", Networks: []string{"10.6.0.0/24"}}, {Namespace: "team-b", Networks: []string{"10.0.0.0/8"}}}
				s.ManagementAudiences = []string{"ichor", "ichor-ui"}
				s.AmbientCredentialBuckets = []string{"s3:backups", "s3:minio.example.net:9000/backups", "gcs:backups", "azure:acct/backups"}
			},
		},
		{
			name: "tenants' networks: a namespace once, with canonical CIDRs",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.NamespaceProvisioningNetworks = []ichor.NamespaceProvisioningNetworks{
					{Namespace: "team-a", Networks: []string{"10.6.0.1/24"}}, {Namespace: "team-a", Networks: []string{"10.7.0.0/24"}},
					{Namespace: "Team_B"}, {Networks: []string{"10.8.0.0/24"}}}
			},
			want: []fe{
				invalid(settings + ".namespaceProvisioningNetworks[0].networks[0]"),
				{field.ErrorTypeDuplicate, settings + ".namespaceProvisioningNetworks[1].namespace"},
				invalid(settings + ".namespaceProvisioningNetworks[2].namespace"),
				required(settings + ".namespaceProvisioningNetworks[2].networks"),
				required(settings + ".namespaceProvisioningNetworks[3].namespace"),
			},
		},
		{
			name: "audiences and buckets: well formed, once",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ManagementAudiences = []string{"ichor", "", "two words", "ichor"}
				in.Spec.Settings.AmbientCredentialBuckets = []string{"backups", "azure:acct", "gcs:a/b", "s3:b", "s3:b"}
			},
			want: []fe{
				required(settings + ".managementAudiences[1]"),
				invalid(settings + ".managementAudiences[2]"),
				{field.ErrorTypeDuplicate, settings + ".managementAudiences[3]"},
				invalid(settings + ".ambientCredentialBuckets[0]"),
				invalid(settings + ".ambientCredentialBuckets[1]"),
				invalid(settings + ".ambientCredentialBuckets[2]"),
				{field.ErrorTypeDuplicate, settings + ".ambientCredentialBuckets[4]"},
			},
		},
		{
			name:   "valid with a long scan interval (no maximum)",
			mutate: func(in *ichor.IchorInstallation) { in.Spec.Settings.ScanInterval = dur(24 * time.Hour) },
		},
		{
			name:   "valid without a version or settings (undefaulted)",
			mutate: func(in *ichor.IchorInstallation) { in.Spec = ichor.IchorInstallationSpec{} },
		},
		{
			name:   "not named ichor",
			mutate: func(in *ichor.IchorInstallation) { in.Name = "other" },
			want:   []fe{invalid("metadata.name")},
		},
		{
			name:   "no name",
			mutate: func(in *ichor.IchorInstallation) { in.Name = "" },
			want:   []fe{required("metadata.name")},
		},
		{
			name:   "generated name",
			mutate: func(in *ichor.IchorInstallation) { in.Name = ""; in.GenerateName = "ichor-" },
			want:   []fe{required("metadata.name")},
		},
		{
			name:   "namespaced",
			mutate: func(in *ichor.IchorInstallation) { in.Namespace = "ichor-system" },
			want:   []fe{forbidden("metadata.namespace")},
		},
		{
			name:   "semver without leading v",
			mutate: func(in *ichor.IchorInstallation) { in.Spec.Version = "0.4.0" },
			want:   []fe{invalid("spec.version")},
		},
		{
			name:   "an IPv4 /8 to scan",
			mutate: func(in *ichor.IchorInstallation) { in.Spec.Settings.ProvisioningNetworks = []string{"10.0.0.0/8"} },
			want:   []fe{invalid(settings + ".provisioningNetworks[0]")},
		},
		{
			name: "an IPv6 /64 to scan",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ProvisioningNetworks = []string{"10.5.0.0/24", "fd00:5::/64"}
			},
			want: []fe{invalid(settings + ".provisioningNetworks[1]")},
		},
		{
			name: "networks repeated or not canonical",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.ProvisioningNetworks = []string{"10.5.0.0/24", "10.5.0.0/24", "10.6.0.1/24", "lan"}
			},
			want: []fe{
				duplicate(settings + ".provisioningNetworks[1]"),
				invalid(settings + ".provisioningNetworks[2]"), invalid(settings + ".provisioningNetworks[3]"),
			},
		},
		{
			name:   "scan interval too short",
			mutate: func(in *ichor.IchorInstallation) { in.Spec.Settings.ScanInterval = dur(29 * time.Second) },
			want:   []fe{invalid(settings + ".scanInterval")},
		},
		{
			name:   "negative scan interval",
			mutate: func(in *ichor.IchorInstallation) { in.Spec.Settings.ScanInterval = dur(-time.Minute) },
			want:   []fe{invalid(settings + ".scanInterval")},
		},
		{
			name: "lifetimes over the maximum",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.CredentialLifetimes.TalosCredential = dur(10*time.Minute + time.Second)
				in.Spec.Settings.CredentialLifetimes.ReaderTalosconfig = dur(2 * time.Hour)
			},
			want: []fe{invalid(lifetimes + ".talosCredential"), invalid(lifetimes + ".readerTalosconfig")},
		},
		{
			name: "lifetimes under the minimum",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.CredentialLifetimes.TalosCredential = dur(30 * time.Second)
				in.Spec.Settings.CredentialLifetimes.ReaderTalosconfig = dur(0)
			},
			want: []fe{invalid(lifetimes + ".talosCredential"), invalid(lifetimes + ".readerTalosconfig")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := validInstallation()
			tc.mutate(in)
			expectErrors(t, ValidateIchorInstallation(in), tc.want...)
		})
	}
}

// TestValidateIchorInstallationDefaulted checks that the defaults of an empty
// installation are within the bounds validation enforces.
func TestValidateIchorInstallationDefaulted(t *testing.T) {
	in := &v1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName}}
	out := &ichor.IchorInstallation{}
	defaultedInternal(t, in, out)
	s := out.Spec.Settings
	if s.ScanInterval == nil || s.CredentialLifetimes.TalosCredential == nil || s.CredentialLifetimes.ReaderTalosconfig == nil {
		t.Fatalf("settings not defaulted: %+v", s)
	}
	expectErrors(t, ValidateIchorInstallation(out))
	if v1alpha1.MaxTalosCredentialLife != maxTalosCredentialLife || v1alpha1.MaxReaderTalosconfigAge != maxReaderTalosconfig {
		t.Errorf("v1alpha1 defaults and validation maxima disagree")
	}
}

func TestValidateIchorInstallationUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *ichor.IchorInstallation)
		want   []fe
	}{
		{name: "unchanged", mutate: func(in *ichor.IchorInstallation) {}},
		{
			name: "version and settings change only through their subresources",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Version = "v0.5.0"
				in.Spec.Settings.UsersEnabled = true
			},
			want: []fe{forbidden("spec.version"), forbidden("spec.settings")},
		},
		{
			name:   "rename",
			mutate: func(in *ichor.IchorInstallation) { in.Name = "ichor2" },
			want:   []fe{invalid("metadata.name")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstallation()
			in := old.DeepCopy()
			tc.mutate(in)
			expectErrors(t, ValidateIchorInstallationUpdate(in, old), tc.want...)
		})
	}
}

func TestValidateIchorInstallationStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(s *ichor.IchorInstallationStatus)
		want   []fe
	}{
		{name: "empty status", mutate: func(s *ichor.IchorInstallationStatus) {}},
		{
			name: "full status",
			mutate: func(s *ichor.IchorInstallationStatus) {
				s.ObservedGeneration = 7
				s.Components = []ichor.ComponentVersion{{Name: "ichor-apiserver", Version: "v0.4.0"}, {Name: "ichor-controller", Version: "v0.4.0"}}
				s.Conditions = []metav1.Condition{goodCondition("Available")}
			},
		},
		{
			name: "component without name",
			mutate: func(s *ichor.IchorInstallationStatus) {
				s.Components = []ichor.ComponentVersion{{Version: "v0.4.0"}}
			},
			want: []fe{required("status.components[0].name")},
		},
		{
			name: "component listed twice",
			mutate: func(s *ichor.IchorInstallationStatus) {
				s.Components = []ichor.ComponentVersion{{Name: "ichor-apiserver", Version: "v0.4.0"}, {Name: "ichor-apiserver", Version: "v0.3.0"}}
			},
			want: []fe{duplicate("status.components[1].name")},
		},
	}
	for _, bc := range badConditionCases {
		cond := bc.conditions
		cases = append(cases, struct {
			name   string
			mutate func(s *ichor.IchorInstallationStatus)
			want   []fe
		}{bc.name, func(s *ichor.IchorInstallationStatus) { s.Conditions = cond }, bc.want("status.conditions")})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstallation()
			in := old.DeepCopy()
			tc.mutate(&in.Status)
			expectErrors(t, ValidateIchorInstallationStatusUpdate(in, old), tc.want...)
		})
	}
}

func TestValidateIchorInstallationFieldUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(in *ichor.IchorInstallation)
		want   []fe
	}{
		{
			name: "upgrade and change settings",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Version = "v0.5.0"
				in.Spec.Settings.ProvisioningNetworks = nil
				in.Spec.Settings.UsersEnabled = true
			},
		},
		{
			name: "settings are still validated",
			mutate: func(in *ichor.IchorInstallation) {
				in.Spec.Settings.CredentialLifetimes.ReaderTalosconfig = dur(48 * time.Hour)
			},
			want: []fe{invalid("spec.settings.credentialLifetimes.readerTalosconfig")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstallation()
			in := old.DeepCopy()
			tc.mutate(in)
			expectErrors(t, ValidateIchorInstallationFieldUpdate(in, old), tc.want...)
		})
	}
}
