package bench

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// epoch keeps generated timestamps fixed, so objects are the same on both paths.
var epoch = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// Every machine has an address of its own, in every namespace: Ichor
// refuses a second TalosMachine at an address another holds (and the JSON
// and protobuf paths write to one API). Each machine, by namespace and
// name, takes the next address of 10.20.0.0/16 and the /16s after it;
// the same machine always gets the same one.
const maxMachines = 64 * 65536

var (
	addressesMu sync.Mutex
	addresses   = map[string]int{}
)

// machineIP is the address of machine name of ns.
func machineIP(ns, name string) string {
	addressesMu.Lock()
	n, ok := addresses[ns+"/"+name]
	if !ok {
		n = len(addresses)
		addresses[ns+"/"+name] = n
	}
	addressesMu.Unlock()
	if n >= maxMachines {
		panic(fmt.Sprintf("the benchmark has addresses for %d machines", maxMachines))
	}
	return fmt.Sprintf("10.%d.%d.%d", 20+n/65536, n/256%256, n%256)
}

// provisioningNetworks hold every benchmark machine's address.
func provisioningNetworks() []string {
	var nets []string
	for b := range maxMachines / 65536 {
		nets = append(nets, fmt.Sprintf("10.%d.0.0/16", 20+b))
	}
	return nets
}

// machine returns TalosMachine number i of a namespace as the controller
// leaves it once its node is Ready: about 3 KiB of JSON once its status is
// written, most of it status (conditions, hardware facts, pinned certificate).
func machine(ns, name string, i int) *v1alpha1.TalosMachine {
	sum := func(s string) [32]byte { return sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d/%s", ns, name, i, s)) }
	fingerprint, configHash, uuid := sum("spki"), sum("config"), sum("uuid")
	role := v1alpha1.MachineRoleWorker
	if i%10 == 0 {
		role = v1alpha1.MachineRoleControlPlane
	}
	ip := machineIP(ns, name)
	condition := func(typ, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, ObservedGeneration: 1,
			LastTransitionTime: epoch, Reason: reason, Message: message}
	}
	disk := func(n int, size int64, model string) v1alpha1.Disk {
		return v1alpha1.Disk{Path: fmt.Sprintf("/dev/nvme%dn1", n), SizeBytes: size, Model: model,
			Serial: fmt.Sprintf("S6EWNX0T%06d%d", i, n)}
	}
	return &v1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{
				"ichor.dev/cluster": "prod-eu-1", "ichor.dev/role": string(role),
				"topology.kubernetes.io/zone": fmt.Sprintf("eu-west-1%c", 'a'+i%3),
				"ichor.dev/rack":              fmt.Sprintf("r%02d", i%40),
			},
			Annotations: map[string]string{
				"ichor.dev/discovered-by": "provisioning-network 10.20.0.0/16",
				"ichor.dev/asset-tag":     fmt.Sprintf("DC1-%08d", i),
				"ichor.dev/location":      fmt.Sprintf("dc1/hall-2/row-%c/rack-%02d/u%02d", 'a'+i%8, i%40, i%42+1),
			},
		},
		Spec: v1alpha1.TalosMachineSpec{
			ClusterName: "prod-eu-1", Role: role, Address: ip + ":50000",
			Hostname: name, Install: v1alpha1.InstallSpec{Disk: "/dev/nvme0n1"},
		},
		Status: v1alpha1.TalosMachineStatus{
			Phase: v1alpha1.MachinePhaseReady, ObservedGeneration: 1,
			Conditions: []metav1.Condition{
				condition("Reachable", "Connected", "Talos API answered at "+ip+":50000 with the pinned certificate"),
				condition("Approved", "ApprovedByOperator", "approved by alice@example.com: rack inventory matches the asset tag"),
				condition("ConfigApplied", "Applied", "machine config applied without reboot; hash "+hex.EncodeToString(configHash[:8])),
				condition("KubeletServingCertificate", "Issued", "kubelet serving certificate approved after checking NodeIP and Nodename over the Talos API"),
				condition("TalosVersionCurrent", "UpToDate", "node runs Talos v1.13.0, the version cluster prod-eu-1 asks for; no upgrade pending"),
				condition("Ready", "NodeReady", "node "+name+" is Ready in cluster prod-eu-1 and runs Talos v1.13.0"),
			},
			Maintenance: &v1alpha1.MaintenanceStatus{
				CertificateFingerprint: base64.StdEncoding.EncodeToString(fingerprint[:]), SeenAt: epoch,
			},
			Hardware: &v1alpha1.HardwareStatus{
				UUID:   fmt.Sprintf("%x-%x-%x-%x-%x", uuid[0:4], uuid[4:6], uuid[6:8], uuid[8:10], uuid[10:16]),
				Serial: fmt.Sprintf("CZ2%07d", i),
				Disks: []v1alpha1.Disk{
					disk(0, 960197124096, "SAMSUNG MZQL2960HCJR-00A07"),
					disk(1, 3840755982336, "SAMSUNG MZQL23T8HCLS-00A07"),
					disk(2, 3840755982336, "SAMSUNG MZQL23T8HCLS-00A07"),
					disk(3, 3840755982336, "SAMSUNG MZQL23T8HCLS-00A07"),
				},
				Addresses: []string{ip + "/16", fmt.Sprintf("fd00:20::%x/64", i+1), fmt.Sprintf("192.168.%d.%d/24", i/256%256, i%256)},
			},
			TalosVersion: "v1.13.0",
			NodeName:     name,
			Approval: &v1alpha1.ApprovalStatus{
				Decision: v1alpha1.ApprovalApproved, By: "alice@example.com", At: epoch,
				Reason: "rack inventory matches the asset tag",
			},
			AppliedConfig: &v1alpha1.AppliedConfigStatus{
				Hash: hex.EncodeToString(configHash[:]), Effect: v1alpha1.ConfigEffectNoReboot, AppliedAt: epoch,
			},
			KubeletServingCertificate: &v1alpha1.KubeletServingCertificateStatus{
				Request: "csr-" + hex.EncodeToString(uuid[:5]), IssuedAt: &epoch,
			},
		},
	}
}

// readyCondition is the server-side apply configuration that moves one
// condition of machine name, as a controller reporting a new observation does.
func readyCondition(gv, name string, n int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":%q,"kind":"TalosMachine","metadata":{"name":%q},`+
		`"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":1,`+
		`"lastTransitionTime":%q,"reason":"NodeReady","message":"observation %d: node is Ready"}]}}`,
		gv, name, epoch.Add(time.Duration(n)*time.Second).UTC().Format(time.RFC3339), n)
}
