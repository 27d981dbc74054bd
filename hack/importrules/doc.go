// Package importrules is the test of Ichor's layers: which of its packages
// may import which. The rules are a table (rules_test.go) checked against
// `go list` of the whole module by `go test ./hack/importrules`, which needs
// nothing but the go command and takes a few seconds. docs/architecture.md
// explains the layers.
package importrules
