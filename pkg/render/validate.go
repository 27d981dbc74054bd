package render

import (
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// metalMode is the validation runtime mode of a bare-metal node being
// installed, as `talosctl validate --mode metal` uses: it requires install
// instructions, which every config Ichor renders carries.
type metalMode struct{}

// String implements validation.RuntimeMode.
func (metalMode) String() string { return "metal" }

// RequiresInstall implements validation.RuntimeMode.
func (metalMode) RequiresInstall() bool { return true }

// InContainer implements validation.RuntimeMode.
func (metalMode) InContainer() bool { return false }

// validate runs machinery's validation and returns its warnings.
func validate(cfg config.Provider) ([]string, error) {
	return cfg.Validate(metalMode{})
}
