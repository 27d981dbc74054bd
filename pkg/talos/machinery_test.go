package talos_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/test/talossim"
)

func startNode(t *testing.T, opts talossim.Options) *talossim.Node {
	t.Helper()
	n, err := talossim.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start simulated node: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func session(t *testing.T, address string, pin talos.Pin) talos.Node {
	t.Helper()
	s, err := talos.Machinery{}.Maintenance(callContext(t), address, pin)
	if err != nil {
		t.Fatalf("Maintenance(%s): %v", address, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func simOptions() talossim.Options {
	return talossim.Options{
		SystemUUID:   "0b3b7c56-5d0c-4c8e-9a51-2f7f6e0d9a11",
		SystemSerial: "SER-42",
		Disks: []talossim.Disk{
			{Path: "/dev/vda", Size: 20 << 30, Model: "VIRTIO", Serial: "V1"},
			{Path: "/dev/nvme0n1", Size: 500 << 30, Model: "NVME", Serial: "N1"},
		},
		Addresses: []netip.Prefix{netip.MustParsePrefix("fd00:5::7/64"), netip.MustParsePrefix("10.5.0.7/24")},
		Version:   "v1.13.0",
	}
}

func TestObserveRecordsFingerprintAndReadsFacts(t *testing.T) {
	n := startNode(t, simOptions())
	s := session(t, n.Addr(), talos.Observe())
	if got := s.Fingerprint(); got != "" {
		t.Fatalf("fingerprint before any call = %q", got)
	}
	f, err := s.Facts(callContext(t))
	if err != nil {
		t.Fatalf("Facts: %v", err)
	}
	if got, want := s.Fingerprint(), n.MaintenanceFingerprint(); got != want {
		t.Errorf("observed fingerprint %q, the node's is %q", got, want)
	}
	want := &talos.Facts{
		TalosVersion: "v1.13.0",
		UUID:         "0b3b7c56-5d0c-4c8e-9a51-2f7f6e0d9a11",
		Serial:       "SER-42",
		Disks: []talos.Disk{
			{Path: "/dev/nvme0n1", SizeBytes: 500 << 30, Model: "NVME", Serial: "N1"},
			{Path: "/dev/vda", SizeBytes: 20 << 30, Model: "VIRTIO", Serial: "V1"},
		},
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.5.0.7/24"), netip.MustParsePrefix("fd00:5::7/64")},
	}
	if f.TalosVersion != want.TalosVersion || f.UUID != want.UUID || f.Serial != want.Serial ||
		!slices.Equal(f.Disks, want.Disks) || !slices.Equal(f.Addresses, want.Addresses) {
		t.Errorf("facts\n got %+v\nwant %+v", f, want)
	}
}

func TestPinnedAcceptsOnlyThePinnedCertificate(t *testing.T) {
	n := startNode(t, simOptions())
	other := startNode(t, talossim.Options{})

	pin, err := talos.Pinned(n.MaintenanceFingerprint())
	if err != nil {
		t.Fatal(err)
	}
	s := session(t, n.Addr(), pin)
	if _, err := s.Facts(callContext(t)); err != nil {
		t.Fatalf("Facts with the right pin: %v", err)
	}
	if s.Fingerprint() != n.MaintenanceFingerprint() {
		t.Errorf("fingerprint %q, want %q", s.Fingerprint(), n.MaintenanceFingerprint())
	}

	// The same pin at another machine's address: refused at the handshake.
	s = session(t, other.Addr(), pin)
	_, err = s.Facts(callContext(t))
	m, ok := talos.AsFingerprintMismatch(err)
	if !ok {
		t.Fatalf("Facts at another machine: %v, want a fingerprint mismatch", err)
	}
	if m.Pinned != n.MaintenanceFingerprint() || m.Presented != other.MaintenanceFingerprint() || m.Address != other.Addr() {
		t.Errorf("mismatch %+v; pinned %s, presented %s", m, n.MaintenanceFingerprint(), other.MaintenanceFingerprint())
	}
	if s.Fingerprint() != "" {
		t.Errorf("a refused certificate was recorded as accepted: %q", s.Fingerprint())
	}
}

func TestPinnedRefusesImpostor(t *testing.T) {
	n := startNode(t, simOptions())
	pin, err := talos.Pinned(n.MaintenanceFingerprint())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetFaults(talossim.Faults{Impostor: true}); err != nil {
		t.Fatal(err)
	}
	_, err = session(t, n.Addr(), pin).Facts(callContext(t))
	m, ok := talos.AsFingerprintMismatch(err)
	if !ok {
		t.Fatalf("Facts from an impostor: %v, want a fingerprint mismatch", err)
	}
	if m.Presented == n.MaintenanceFingerprint() {
		t.Errorf("the impostor presented the real fingerprint: %+v", m)
	}

	// Observing a session that met the real node, then the impostor, refuses the impostor too.
	n.ClearFaults()
	s := session(t, n.Addr(), talos.Observe())
	if _, err := s.Facts(callContext(t)); err != nil {
		t.Fatalf("Facts: %v", err)
	}
	if err := n.SetFaults(talossim.Faults{Impostor: true}); err != nil {
		t.Fatal(err)
	}
	// The impostor cut the session's connection; the call that notices may
	// fail on the broken transport, and a later one reconnects and meets
	// the impostor's certificate. No call may succeed.
	var last error
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, last = s.Facts(ctx); last == nil {
			return false, errors.New("an observing session accepted a second certificate after a reconnect")
		}
		_, ok := talos.AsFingerprintMismatch(last)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("second certificate: %v (last: %v), want a fingerprint mismatch", err, last)
	}
	if len(n.ImpostorConfigs()) != 0 {
		t.Errorf("the impostor received %d configs", len(n.ImpostorConfigs()))
	}
}

func TestUnreachableIsNotAMismatch(t *testing.T) {
	n := startNode(t, simOptions())
	if err := n.SetFaults(talossim.Faults{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	_, err := session(t, n.Addr(), talos.Observe()).Facts(callContext(t))
	if err == nil {
		t.Fatal("Facts from an unreachable node succeeded")
	}
	if _, ok := talos.AsFingerprintMismatch(err); ok {
		t.Fatalf("unreachable reported as a mismatch: %v", err)
	}
}

func TestPinnedRejectsMalformedFingerprints(t *testing.T) {
	for _, fp := range []string{"", "not base64!", "AAAA"} {
		if _, err := talos.Pinned(fp); err == nil {
			t.Errorf("Pinned(%q) accepted", fp)
		}
	}
	if !talos.Observe().Observing() {
		t.Error("Observe() is not observing")
	}
}
