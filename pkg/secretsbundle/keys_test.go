package secretsbundle

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
)

// TestKeysInForceByPhase: the service-account key that signs and those
// accepted, and the secretbox keys in kube-apiserver's order, in each
// phase of a key rotation and once the bundle holds the new keys.
func TestKeysInForceByPhase(t *testing.T) {
	data, err := Generate("v1.14.1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &v1alpha1.TalosCluster{}
	next, err := NewRotationKeys(cluster, bundle, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if next.Encryption.Name != "key3" {
		t.Errorf("the new secretbox key after key2 is named %q, want key3", next.Encryption.Name)
	}
	oldPub, err := PublicKeyPEM(bundle.Certs.K8sServiceAccount.Key)
	if err != nil {
		t.Fatal(err)
	}
	newPub, err := PublicKeyPEM(next.ServiceAccount.Key)
	if err != nil {
		t.Fatal(err)
	}
	old := render.EncryptionKey{Name: "key2", Secret: bundle.Secrets.SecretboxEncryptionSecret}
	for _, tc := range []struct {
		phase    v1alpha1.CARotationPhase
		issuing  []byte
		accepted [][]byte
		keys     []render.EncryptionKey
	}{
		{v1alpha1.CARotationAcceptNew, bundle.Certs.K8sServiceAccount.Key, [][]byte{newPub}, []render.EncryptionKey{old, *next.Encryption}},
		{v1alpha1.CARotationIssueNew, next.ServiceAccount.Key, [][]byte{oldPub}, []render.EncryptionKey{*next.Encryption, old}},
		{v1alpha1.CARotationDropOld, next.ServiceAccount.Key, nil, []render.EncryptionKey{*next.Encryption}},
	} {
		rotation := &v1alpha1.KubernetesKeyRotationStatus{Phase: tc.phase, ServiceAccount: true, SecretsEncryption: true}
		got, err := (&Secrets{Bundle: bundle}).WithKeys(rotation, next, "")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Certs.K8sServiceAccount.Key, tc.issuing) || !slices.EqualFunc(got.ServiceAccountAccepted, tc.accepted, bytes.Equal) ||
			!slices.Equal(got.EncryptionKeys, tc.keys) {
			t.Errorf("phase %s: the wrong keys are in force", tc.phase)
		}
	}
	if !bytes.Equal(bundle.Certs.K8sServiceAccount.Key, (&Secrets{Bundle: bundle}).Certs.K8sServiceAccount.Key) {
		t.Fatal("WithKeys changed the bundle")
	}

	// The rotation ends: the bundle takes the new keys, then the cluster
	// records the new key's name.
	stored, changed, err := WithKeys(bundle, next)
	if err != nil || !changed {
		t.Fatalf("WithKeys: changed %v, %v", changed, err)
	}
	ended, err := Parse(stored)
	if err != nil {
		t.Fatal(err)
	}
	got, err := (&Secrets{Bundle: ended}).WithKeys(&v1alpha1.KubernetesKeyRotationStatus{Phase: v1alpha1.CARotationDropOld}, next, "key2")
	if err != nil || !slices.Equal(got.EncryptionKeys, []render.EncryptionKey{*next.Encryption}) || got.ServiceAccountAccepted != nil {
		t.Errorf("between the bundle's write and the status's, the keys in force are not the new ones alone: %v", err)
	}
	got, err = (&Secrets{Bundle: ended}).WithKeys(nil, nil, next.Encryption.Name)
	if err != nil || !slices.Equal(got.EncryptionKeys, []render.EncryptionKey{*next.Encryption}) {
		t.Errorf("after the rotation, the secretbox key in force is not the new one under its name: %v", err)
	}
	if again, _ := NewRotationKeys(&v1alpha1.TalosCluster{Status: v1alpha1.TalosClusterStatus{SecretsEncryptionKeyName: "key3"}}, ended, false, true); again.Encryption.Name != "key4" {
		t.Errorf("the key after key3 is named %q, want key4", again.Encryption.Name)
	}
}

func TestDecodeRotationKeysRefusesWithoutQuoting(t *testing.T) {
	const secret = "c2VjcmV0LW1hdGVyaWFsLXRoYXQtbXVzdC1ub3Qtc2hvdw=="
	for name, data := range map[string]map[string][]byte{
		"empty":             {},
		"not a key":         {serviceAccountKeyKey: []byte("-----BEGIN RSA PRIVATE KEY-----\n" + secret + "\n-----END RSA PRIVATE KEY-----\n")},
		"short secretbox":   {encryptionNameKey: []byte("key3"), encryptionSecretKey: []byte(secret)},
		"secretbox no name": {encryptionSecretKey: []byte("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=")},
		"key2 again":        {encryptionNameKey: []byte("key2"), encryptionSecretKey: []byte("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=")},
	} {
		if _, err := DecodeRotationKeys(data); err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
