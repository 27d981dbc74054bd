package discovery

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// namePrefix starts the name of every discovered TalosMachine.
const namePrefix = "machine-"

// uuidPattern is an SMBIOS UUID as Talos reports it.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// machineName is the deterministic name of a discovered machine: from its
// SMBIOS UUID, so a machine found twice (say at a new address) is one
// object; from its certificate's fingerprint when the firmware reports no
// usable UUID (none, or all zeros or ones as some boards do).
func machineName(uuid, fingerprint string) string {
	u := strings.ToLower(uuid)
	if uuidPattern.MatchString(u) && strings.Trim(u, "0-") != "" && strings.Trim(u, "f-") != "" {
		return namePrefix + u
	}
	sum := sha256.Sum256([]byte(fingerprint))
	return namePrefix + "spki-" + hex.EncodeToString(sum[:10])
}
