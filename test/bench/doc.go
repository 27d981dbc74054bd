// Package bench measures ichor-apiserver against the anchor it must not fall
// behind: the same ichor.dev/v1alpha1 schema served as CustomResourceDefinitions
// (test/bench/crds, group bench.ichor.dev) by the same kube-apiserver. Both
// paths are driven by identical client code through the real kube-apiserver,
// so every difference in the numbers is a difference in how the API is served.
//
// `make bench` runs it at full size (cmd/ichor-bench); `make test` runs it at
// tiny sizes as a smoke test that both paths produce sane numbers.
package bench
