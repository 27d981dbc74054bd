package ichor

import "slices"

// Download is a download subresource: a GET of resource/NAME/subresource
// that streams what a node or a cluster hands out, with the download verb
// on resource/subresource. ichor-apiserver gets a Talos certificate for
// each download through a TalosCredentialRequest whose purpose is the
// subresource's name, and records who downloaded what.
//
// Downloads is the one table of them: the registry serves them, the CLI
// and the console offer them, CredentialPurposes and
// docs/reference/downloads.md are built from it, and a test checks
// artifacts/roles.yaml against it.
// +k8s:deepcopy-gen=false
type Download struct {
	// Resource and Subresource name the endpoint (talosmachines, etcd-snapshot).
	Resource, Subresource string
	// File is the name a download is saved under, %s the object's name.
	File string
	// ContentType is what the stream is served as.
	ContentType string
	// Streams says what the download is, in one line.
	Streams string
	// TalosRole is the Talos role of the certificate it reads with, the
	// least that does it.
	TalosRole string
	// Role is the lowest of the default roles that holds download on it.
	Role UserRole
	// ControlPlanesOnly downloads exist only on control planes.
	ControlPlanesOnly bool
	// Options are its query parameters beyond dryRun (which every download
	// refuses), for people; "" when it takes none.
	Options string
	// AlsoRequires are rights beyond download on the subresource that the
	// requester of its credential must hold: what else its Talos role lets
	// a holder of the certificate do on the cluster's nodes.
	AlsoRequires []PurposeRight
}

// Path is the endpoint as RBAC names it: resource/subresource.
func (d Download) Path() string { return d.Resource + "/" + d.Subresource }

// Purpose is the purpose of the Talos credential each download gets.
func (d Download) Purpose() CredentialPurpose { return CredentialPurpose(d.Subresource) }

// Downloads are every download subresource of the API.
var Downloads = []Download{
	{
		Resource: "talosmachines", Subresource: string(PurposeSupportBundle), File: "%s-support-bundle.zip", ContentType: "application/zip",
		Streams:   "a zip of the node's version, services, logs, kernel log and main resources",
		TalosRole: "os:reader", Role: UserRoleAdmin,
	},
	{
		Resource: "talosmachines", Subresource: string(PurposeEtcdSnapshot), File: "%s-etcd.snapshot", ContentType: "application/octet-stream",
		Streams:   "the control plane's etcd database, as talosctl etcd snapshot saves it",
		TalosRole: "os:etcd:backup", Role: UserRoleAdmin, ControlPlanesOnly: true,
	},
	{
		Resource: "talosmachines", Subresource: string(PurposePacketCapture), File: "%s.pcap", ContentType: "application/vnd.tcpdump.pcap",
		Streams:   "a pcap of one of the node's links for a bounded time, as talosctl pcap saves it",
		TalosRole: "os:operator", Role: UserRoleAdmin,
		Options: "interface (required), promiscuous, snapLength, durationSeconds",
		// os:operator also reboots, shuts down and upgrades any node of
		// the cluster and snapshots its etcd.
		AlsoRequires: []PurposeRight{
			{VerbDownload, "talosmachines", string(PurposeEtcdSnapshot), true},
			{VerbStart, "talosoperations", string(OperationReboot), true},
			{VerbStart, "talosoperations", string(OperationNodeShutdown), true},
			{VerbStart, "talosoperations", string(OperationTalosUpgrade), true},
		},
	},
	{
		Resource: "talosclusters", Subresource: string(PurposeTalosconfigReader), File: "%s-talosconfig", ContentType: "application/yaml",
		Streams:   "a one-hour os:reader talosconfig of the cluster's control planes",
		TalosRole: "os:reader", Role: UserRoleOperator,
	},
	{
		Resource: "talosclusters", Subresource: string(PurposeCredentials), File: "%s-credentials.zip", ContentType: "application/zip",
		Streams:   "after a CA rotation, once: a zip of a one-hour os:admin talosconfig and system:masters kubeconfig",
		TalosRole: "os:admin", Role: UserRoleAdmin,
	},
}

// DownloadAt is the download at resource/subresource, if it is one.
func DownloadAt(resource, subresource string) (Download, bool) {
	i := slices.IndexFunc(Downloads, func(d Download) bool { return d.Resource == resource && d.Subresource == subresource })
	if i < 0 {
		return Download{}, false
	}
	return Downloads[i], true
}
