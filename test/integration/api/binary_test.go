package api

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
	"ichor.dev/ichor/test/harness"
)

// TestBinaryWithEmbeddedEtcd runs the real ichor-apiserver binary the way the
// Deployment does, with its embedded etcd, behind a control plane of its own:
// objects written through the aggregator survive, and SIGTERM ends it cleanly.
func TestBinaryWithEmbeddedEtcd(t *testing.T) {
	binary, err := harness.BuildIchorAPIServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	own, err := harness.Start(ctx, harness.Options{IchorBinary: binary, IchorEmbeddedEtcd: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()

	client := versioned.NewForConfigOrDie(own.AdminConfig)
	install := &v1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.InstallationName},
		Spec:       v1alpha1.IchorInstallationSpec{Version: "v0.1.0"},
	}
	if _, err := client.IchorV1alpha1().IchorInstallations().Create(ctx, install, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := client.IchorV1alpha1().IchorInstallations().Get(ctx, v1alpha1.InstallationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Settings.ScanInterval == nil || got.Spec.Settings.ScanInterval.Duration != v1alpha1.DefaultScanInterval {
		t.Errorf("defaults not applied by the binary: %+v", got.Spec.Settings)
	}
	if err := own.StopIchor(); err != nil {
		t.Errorf("ichor-apiserver did not shut down cleanly on SIGTERM: %v", err)
	}
}
