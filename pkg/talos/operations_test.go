package talos_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/render"
	"ichor.dev/ichor/pkg/talos"
	"ichor.dev/ichor/test/talossim"
)

// TestConfigureBootstrapReset walks one control plane through the calls the
// controller makes: apply over the pinned maintenance session, status, bootstrap
// (twice), etcd members, reset back to maintenance.
func TestConfigureBootstrapReset(t *testing.T) {
	ctx := callContext(t)
	n := startNode(t, simOptions())
	bundle, cfg := controlPlaneConfig(t)

	maintenance := n.MaintenanceFingerprint()
	s := installed(ctx, t, n, bundle, cfg)

	st, err := s.Status(ctx)
	if err != nil || !st.Running() {
		t.Fatalf("Status = %+v, %v; want running and ready", st, err)
	}
	if st.Nodename == "" {
		t.Error("Status reports no node name")
	}
	id, err := s.Identity(ctx)
	if err != nil || id.Nodename != st.Nodename || id.Hostname == "" || len(id.KubeletAddresses) == 0 {
		t.Fatalf("Identity = %+v, %v", id, err)
	}
	if got, err := s.Config(ctx); err != nil || len(got) == 0 {
		t.Fatalf("Config = %d bytes, %v", len(got), err)
	}
	if _, err := s.EtcdMembers(ctx); err == nil {
		t.Error("etcd members listed before bootstrap")
	}
	if err := s.Bootstrap(ctx); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	if err := s.Bootstrap(ctx); err != talos.ErrAlreadyBootstrapped {
		t.Errorf("second Bootstrap = %v, want ErrAlreadyBootstrapped", err)
	}
	members, err := s.EtcdMembers(ctx)
	if err != nil || len(members) != 1 || members[0].ID == "" || members[0].Learner {
		t.Fatalf("EtcdMembers = %+v, %v; want one voting member", members, err)
	}

	// An unchanged config needs no reboot.
	if res, err := s.ApplyConfiguration(ctx, cfg, talos.ApplyNoReboot); err != nil || res.Rebooting {
		t.Fatalf("re-apply = %+v, %v", res, err)
	}

	if err := s.Reset(ctx, talos.ResetToMaintenance); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if err := n.WaitPhase(ctx, talossim.PhaseMaintenance); err != nil {
		t.Fatal(err)
	}
	if n.MaintenanceFingerprint() == maintenance {
		t.Error("the node kept its maintenance certificate across a reset of STATE")
	}

	if _, err := talos.MintCredentials(nil, role.MakeSet(role.Admin), time.Now(), time.Minute); err == nil {
		t.Error("minted credentials without a bundle")
	}
}

// TestConfigReadsAV1_14Config reads back the config of a Talos v1.14 node in
// the v1.14 layout: Kubernetes configured in documents of their own.
func TestConfigReadsAV1_14Config(t *testing.T) {
	ctx := callContext(t)
	opts := simOptions()
	opts.Version = "v1.14.1"
	n := startNode(t, opts)
	bundle, cfg := controlPlaneConfigOf(t, opts.Version)

	s := installed(ctx, t, n, bundle, cfg)

	got, err := s.Config(ctx)
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	effect, changes, err := render.Classify(cfg, got, render.ApplyWithReboot)
	if err != nil || effect != ichorv1alpha1.ConfigEffectNone {
		t.Fatalf("the config read back differs from the one applied: %s %+v %v", effect, changes, err)
	}
	if !bytes.Contains(got, []byte("kind: KubeletConfig")) {
		t.Fatalf("no KubeletConfig document in\n%s", got)
	}
}

// installed applies cfg to the maintenance-mode node n over its pinned
// session, waits until it runs, and returns an os:admin session with it,
// closed at test end.
func installed(ctx context.Context, t *testing.T, n *talossim.Node, bundle *secrets.Bundle, cfg []byte) talos.Node {
	t.Helper()
	pin, err := talos.Pinned(n.MaintenanceFingerprint())
	if err != nil {
		t.Fatal(err)
	}
	res, err := session(t, n.Addr(), pin).ApplyConfiguration(ctx, cfg, talos.ApplyNoReboot)
	if err != nil {
		t.Fatalf("apply over the pinned maintenance session: %v", err)
	}
	if res.Details == "" {
		t.Errorf("apply result has no details: %+v", res)
	}
	if err := n.WaitPhase(ctx, talossim.PhaseRunning); err != nil {
		t.Fatal(err)
	}
	return sessionAs(ctx, t, n.Addr(), bundle, role.Admin)
}

// sessionAs opens a session with the node at addr with a certificate of
// bundle's CA holding only roles, closed at test end.
func sessionAs(ctx context.Context, t *testing.T, addr string, bundle *secrets.Bundle, roles ...role.Role) talos.Node {
	t.Helper()
	creds, err := talos.MintCredentials(bundle, role.MakeSet(roles...), time.Now(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s, err := talos.Machinery{}.Configured(ctx, addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
