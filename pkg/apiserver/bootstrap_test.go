package apiserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadBootstrapInstallation(t *testing.T) {
	const good = `apiVersion: ichor.dev/v1alpha1
kind: IchorInstallation
metadata:
  name: ichor
spec:
  settings:
    managementAudiences: [ichor, ichor-ui]
    provisioningNetworks: [10.5.0.0/24]
    usersEnabled: true
`
	for _, tc := range []struct {
		name, file, wantErr string
	}{
		{name: "good", file: good},
		{name: "unnamed is the singleton", file: strings.Replace(good, "  name: ichor\n", "", 1)},
		{name: "unknown field", file: strings.Replace(good, "usersEnabled", "userEnabled", 1), wantErr: `unknown field "spec.settings.userEnabled"`},
		{name: "another name", file: strings.Replace(good, "name: ichor", "name: mine", 1), wantErr: "metadata.name: Invalid value: \"mine\""},
		{name: "bad network", file: strings.Replace(good, "10.5.0.0/24", "10.5.0.0/33", 1), wantErr: "spec.settings.provisioningNetworks[0]"},
		{name: "another kind", file: "apiVersion: ichor.dev/v1alpha1\nkind: TalosCluster\nmetadata: {name: c}\n", wantErr: "holds a ichor.dev/v1alpha1, Kind=TalosCluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "installation.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			in, err := ReadBootstrapInstallation(path)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if in.Name != "ichor" || !in.Spec.Settings.UsersEnabled || len(in.Spec.Settings.ManagementAudiences) != 2 {
					t.Errorf("read %+v", in)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
	if _, err := ReadBootstrapInstallation(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "--bootstrap-installation-file") {
		t.Errorf("a missing file: %v", err)
	}
}
