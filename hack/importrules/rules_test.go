package importrules

// Who may import what. Ichor's packages are named from the module's root
// ("pkg/cli"), others by their import path. A pattern ending in "/..." is
// that package and everything under it, "..." alone every package of
// Ichor's, and {X} one path element, the same wherever it appears in a
// rule. A package's tests are held to the rules too, except for the edges
// in testOnly.
//
// The layers, from the bottom:
//
//	pkg/apis           the API: types, defaults, validation, schedule syntax
//	pkg/generated      clients, listers, informers, OpenAPI, made from the API
//	libraries          every other pkg/X: one job each, for any layer above
//	pkg/registry, pkg/apiserver, pkg/admission   ichor-apiserver
//	pkg/controller/X   one reconciler each, for ichor-controller
//	pkg/ui, pkg/cli    the console and the CLI: clients of the API
//	pkg/cmd/X, cmd/X   a binary's wiring, and its main
//	test/...           tests and their tools
var rules = []rule{
	{
		Packages: []string{"pkg/apis/..."},
		Only:     []string{"pkg/apis/..."},
		Why:      "the API imports nothing of Ichor's outside pkg/apis: every layer builds on it, and validation checks an object with the API alone",
	},
	{
		Packages: []string{"pkg/generated/..."},
		Only:     []string{"pkg/apis/...", "pkg/generated/..."},
		Why:      "generated code is made from the API alone",
	},
	{
		Packages: []string{"pkg/controller/{X}/..."},
		Never:    []string{"pkg/controller/..."},
		Unless:   []string{"pkg/controller/{X}/..."},
		Why:      "reconcilers never import each other; move what they share into a library",
	},
	{
		Packages: []string{"..."},
		Except:   []string{"pkg/controller/...", "pkg/cmd/controller", "test/..."},
		Never:    []string{"pkg/controller/..."},
		Why:      "only pkg/cmd/controller wires reconcilers; what another layer needs of one belongs in a library",
	},
	{
		Packages: []string{"pkg/cli/...", "cmd/ichor"},
		Linked:   true,
		Never:    []string{"pkg/controller/...", "pkg/registry/...", "pkg/apiserver/...", "pkg/admission/...", "pkg/ui/...", "pkg/cmd/..."},
		Why:      "the ichor CLI links no server code: it is a client of the API, and what it shares with the servers is a library",
	},
	{
		Packages: []string{"pkg/cli/...", "cmd/ichor"},
		Linked:   true,
		Never:    []string{"sigs.k8s.io/controller-runtime/..."},
		Why:      "the ichor CLI links no controller-runtime: it uses client-go and the generated clientset, and libraries it imports keep to that",
	},
	{
		Packages: []string{"pkg/..."},
		Except: []string{"pkg/apis/...", "pkg/generated/...", "pkg/controller/...", "pkg/registry/...", "pkg/apiserver/...",
			"pkg/admission/...", "pkg/ui/...", "pkg/cli/...", "pkg/cmd/..."},
		Never: []string{"pkg/registry/...", "pkg/apiserver/...", "pkg/ui/...", "pkg/cli/..."},
		Why:   "a library serves the layers above it and imports none of them",
	},
	{
		Packages: []string{"pkg/controller/..."},
		Never:    []string{"pkg/registry/...", "pkg/apiserver/...", "pkg/admission/...", "pkg/ui/...", "pkg/cli/..."},
		Why:      "a reconciler talks to ichor-apiserver through the API, never through its code",
	},
	{
		Packages: []string{"pkg/registry/...", "pkg/apiserver/...", "pkg/admission/..."},
		Never:    []string{"pkg/ui/...", "pkg/cli/..."},
		Why:      "ichor-apiserver imports neither the console nor the CLI",
	},
	{
		Packages: []string{"pkg/ui/..."},
		Never:    []string{"pkg/registry/...", "pkg/apiserver/...", "pkg/admission/...", "pkg/cli/..."},
		Why:      "the console is a client of the API, as the CLI is",
	},
	{
		Packages: []string{"..."},
		Except:   []string{"cmd/...", "pkg/cmd/...", "test/..."},
		Never:    []string{"pkg/cmd/..."},
		Why:      "pkg/cmd/X wires a binary: only its main (cmd/X), pkg/cmd and the tests under test/ start one",
	},
	{
		Packages: []string{"..."},
		Except:   []string{"test/..."},
		Never:    []string{"test/..."},
		Why:      "test/ holds tests and their tools; nothing shipped imports it",
	},
}

// testOnly are the edges only a package's tests may have, and why.
var testOnly = []edge{
	{From: "pkg/registry/ichor/talosbackup", To: "pkg/controller/uploadserver",
		Why: "the upload forwarder's test streams through the controller's real upload endpoint"},
	{From: "pkg/talos", To: "test/talossim",
		Why: "the Talos client's fidelity tests run against the node simulator"},
	{From: "hack/images", To: "test/ociimage",
		Why: "the image test unpacks each image to run it as the test node does"},
}
