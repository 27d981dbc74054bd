package render

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// PatchFailure says at which step a patch failed; it is meant to be the
// reason of the condition the controller sets on the patch's status.
type PatchFailure string

const (
	// PatchInvalidTarget means the patch's target cannot be evaluated (a bad label selector,
	// or more than one kind of target).
	PatchInvalidTarget PatchFailure = "InvalidTarget"
	// PatchParseFailed means the patch text is neither a strategic-merge nor a JSON6902 patch.
	PatchParseFailed PatchFailure = "ParseFailed"
	// PatchApplyFailed means configpatcher could not apply the patch to the config.
	PatchApplyFailed PatchFailure = "ApplyFailed"
	// PatchInvalidResult means the config stopped passing machinery's validation with this patch.
	PatchInvalidResult PatchFailure = "InvalidResult"
)

// PatchError is returned when a patch keeps a machine's config from rendering.
// It names the patch so the caller can report the failure on that patch's status.
type PatchError struct {
	// Patch is the namespace and name of the TalosConfigPatch at fault.
	Patch types.NamespacedName
	// Reason is the step that failed.
	Reason PatchFailure
	// Err is the underlying error, from machinery where machinery found it.
	Err error
}

// Error implements error.
func (e *PatchError) Error() string {
	// Machinery's multi-errors end in blank lines; a condition message should not.
	return fmt.Sprintf("config patch %s: %s: %s", e.Patch, e.Reason, strings.TrimSpace(fmt.Sprint(e.Err)))
}

// Unwrap returns the underlying error.
func (e *PatchError) Unwrap() error { return e.Err }

// InputError is returned when the cluster or machine inputs cannot make a
// valid config before any patch is applied.
type InputError struct {
	// Field is the spec field at fault, as a path such as
	// "TalosCluster.spec.kubernetesVersion".
	Field string
	// Err says what is wrong with it.
	Err error
}

// Error implements error.
func (e *InputError) Error() string {
	return fmt.Sprintf("%s: %s", e.Field, strings.TrimSpace(fmt.Sprint(e.Err)))
}

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }

// ResetRequiredError is returned by Classify for a change that Talos cannot
// make to an installed node, whatever it takes: turning the encryption of
// its system volumes on or off, which Talos sets only when it formats them,
// or replacing every key they were made with (a key-rotation adds a slot
// before it drops one). Applied anyway, the node would fail to open the
// volume at its next boot.
// The change needs the machine reset with those volumes wiped (node-reset),
// after which it is installed with the new config.
type ResetRequiredError struct {
	// Paths are the fields at fault, as Change.Path names them.
	Paths []string
}

// Error implements error.
func (e *ResetRequiredError) Error() string {
	return fmt.Sprintf("%s: Talos sets the encryption of a system volume only when it formats it, and opens it only with a key it was made with (a key-rotation TalosOperation replaces a tpm key), so an installed node cannot take this change; reset the machine with its system disk wiped (a node-reset TalosOperation) to install it with this config",
		strings.Join(e.Paths, ", "))
}
