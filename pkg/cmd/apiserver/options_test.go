package apiserver

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"ichor.dev/ichor/pkg/apis/ichor"
	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
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

func TestValidateRefusesAnUnknownStorageMediaType(t *testing.T) {
	for _, args := range [][]string{
		{"--storage-media-type=text/plain"},
		{"--storage-media-type=text/plain", "--etcd-servers=https://10.0.0.1:2379"},
	} {
		if err := parse(t, args...).Validate(); err == nil || !strings.Contains(err.Error(), "--storage-media-type") {
			t.Errorf("%v: Validate() = %v, want an error naming --storage-media-type", args, err)
		}
	}
}

func TestValidateAcceptsDefaults(t *testing.T) {
	if err := parse(t).Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestObjectsAreStoredAsProtobuf(t *testing.T) {
	m := &v1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1"}, Spec: v1alpha1.TalosMachineSpec{Address: "10.0.0.1:50000"}}
	for _, tc := range []struct {
		flags  []string
		prefix string
	}{
		{nil, "k8s\x00"},
		{[]string{"--storage-media-type=application/json"}, "{"},
	} {
		o := parse(t, tc.flags...)
		if err := o.applyStorageCodec(); err != nil {
			t.Fatal(err)
		}
		codec := o.Recommended.Etcd.StorageConfig.Codec
		stored, err := runtime.Encode(codec, m)
		if err != nil {
			t.Fatalf("%v: encode: %v", tc.flags, err)
		}
		if !bytes.HasPrefix(stored, []byte(tc.prefix)) {
			t.Errorf("%v: stored %q, want it to start with %q", tc.flags, stored, tc.prefix)
		}
		// Either encoding decodes, whichever is the default, into the internal type.
		for _, other := range [][]byte{stored, []byte(`{"apiVersion":"ichor.dev/v1alpha1","kind":"TalosMachine","metadata":{"name":"old"}}`)} {
			obj, err := runtime.Decode(codec, other)
			if err != nil {
				t.Errorf("%v: decode %q: %v", tc.flags, other, err)
			} else if _, ok := obj.(*ichor.TalosMachine); !ok {
				t.Errorf("%v: decoded a %T, want the internal TalosMachine", tc.flags, obj)
			}
		}
	}
}

func TestAskCollectionFirstIsOnUnlessTurnedOff(t *testing.T) {
	if !parse(t).AskCollectionFirst {
		t.Error("off by default")
	}
	if parse(t, "--authorization-ask-collection-first=false").AskCollectionFirst {
		t.Error("--authorization-ask-collection-first=false left it on")
	}
}
