package apiserver

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestEtcdPrefixIsIchors(t *testing.T) {
	if got := NewOptions().Recommended.Etcd.StorageConfig.Prefix; got != "/registry/ichor.dev" {
		t.Errorf("etcd prefix %q", got)
	}
}

func TestEmbeddedEtcdIsTheDefault(t *testing.T) {
	if !parse(t).UsesEmbeddedEtcd() {
		t.Error("no --etcd-servers, yet the embedded etcd is not used")
	}
	if parse(t, "--etcd-servers=https://10.0.0.1:2379").UsesEmbeddedEtcd() {
		t.Error("--etcd-servers given, yet the embedded etcd would start")
	}
}

func TestValidateEmbeddedEtcdNeedsADataDir(t *testing.T) {
	o := parse(t, "--embedded-etcd-data-dir=")
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--embedded-etcd-data-dir") {
		t.Fatalf("Validate() = %v, want an error naming --embedded-etcd-data-dir", err)
	}
	// Validation must not have dropped the etcd options it set aside.
	if o.Recommended.Etcd == nil {
		t.Fatal("Validate lost the etcd options")
	}
}

func TestValidateAcceptsDefaults(t *testing.T) {
	if err := parse(t).Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}
