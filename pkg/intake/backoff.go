package intake

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// RetryAfter is how long to wait before contacting an unreachable machine
// again: as long as it has been unreachable, between min and max. The wait
// so roughly doubles with each attempt and survives a controller restart,
// because it is derived from the Reachable condition's lastTransitionTime
// rather than kept in memory.
func RetryAfter(s *v1alpha1.TalosMachineStatus, now time.Time, minimum, maximum time.Duration) time.Duration {
	c := meta.FindStatusCondition(s.Conditions, v1alpha1.MachineConditionReachable)
	if c == nil {
		return minimum
	}
	return min(max(now.Sub(c.LastTransitionTime.Time), minimum), maximum)
}
