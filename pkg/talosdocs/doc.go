// Package talosdocs holds the Talos machine-config documents Ichor writes for
// version contracts newer than the Talos machinery it is built with (v1.13),
// and loads configs that carry them.
//
// Machinery decodes only the document kinds registered in its own (internal)
// registry, so a document added by a later Talos release cannot be loaded by
// configloader. Such documents are typed here, encode byte for byte the way
// that Talos release writes them, and live in a machinery config container
// beside the documents machinery knows, so validation, conflict checks and
// encoding all go through machinery's container as usual.
package talosdocs
