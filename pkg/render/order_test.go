package render

import (
	"testing"

	ichorv1alpha1 "ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

func TestInstallDisk(t *testing.T) {
	disks := func(ds ...ichorv1alpha1.Disk) *ichorv1alpha1.TalosMachine {
		return &ichorv1alpha1.TalosMachine{Status: ichorv1alpha1.TalosMachineStatus{Hardware: &ichorv1alpha1.HardwareStatus{Disks: ds}}}
	}
	for _, tc := range []struct {
		name string
		m    *ichorv1alpha1.TalosMachine
		want string
	}{
		{"nothing known", &ichorv1alpha1.TalosMachine{}, ""},
		{"no disk reported", disks(), ""},
		{"the smallest", disks(ichorv1alpha1.Disk{Path: "/dev/sdb", SizeBytes: 20 << 30}, ichorv1alpha1.Disk{Path: "/dev/sda", SizeBytes: 10 << 30}), "/dev/sda"},
		{"the first by path among equals", disks(ichorv1alpha1.Disk{Path: "/dev/vdb", SizeBytes: 8 << 30}, ichorv1alpha1.Disk{Path: "/dev/vda", SizeBytes: 8 << 30}), "/dev/vda"},
		{"a USB disk is not picked", disks(ichorv1alpha1.Disk{Path: "/dev/sdb", SizeBytes: 8 << 30, Transport: "usb"}, ichorv1alpha1.Disk{Path: "/dev/nvme0n1", SizeBytes: 512 << 30, Transport: "nvme"}), "/dev/nvme0n1"},
		{"only a USB disk: none", disks(ichorv1alpha1.Disk{Path: "/dev/sdb", SizeBytes: 8 << 30, Transport: "usb"}), ""},
		{"a disk of unknown size is not picked", disks(ichorv1alpha1.Disk{Path: "/dev/sr0"}, ichorv1alpha1.Disk{Path: "/dev/sda", SizeBytes: 1 << 30}), "/dev/sda"},
		{"the spec wins", func() *ichorv1alpha1.TalosMachine {
			m := disks(ichorv1alpha1.Disk{Path: "/dev/sda", SizeBytes: 1 << 30})
			m.Spec.Install.Disk = "/dev/nvme0n1"
			return m
		}(), "/dev/nvme0n1"},
	} {
		if got := InstallDisk(tc.m); got != tc.want {
			t.Errorf("%s: InstallDisk = %q, want %q", tc.name, got, tc.want)
		}
	}
}
