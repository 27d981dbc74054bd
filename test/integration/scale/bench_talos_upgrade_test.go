package scale

import (
	"fmt"
	"testing"
	"time"

	"ichor.dev/ichor/test/integration/itest"
)

// BenchmarkTalosUpgradeRollout measures a rolling Talos upgrade of three
// control planes and n workers whose nodes each take upgradeRebootDelay to
// reboot, one node at a time as the operation runs it. The floor is the
// sum of the time the nodes actually spent away (from their timestamped
// phase history); the benchmark reports the total, the floor, their ratio
// and Ichor's overhead in percent of the floor, and the test process's
// CPU time and peak heap during the rollout (an upper bound for the
// controller's: the process also runs ichor-apiserver and the simulated
// nodes). With pull=1s each node takes upgradePullDelay to download its
// installer, as a real node does (not counted in the floor: the node runs
// meanwhile): the overhead shows how much of that the rollout hides by
// pulling on the next nodes while one reboots.
// The to=v1.14.1 cases upgrade across a minor release, from v1.13.0 to
// v1.14.1, whose nodes boot into the other Talos's machined.
// Run: go test ./test/integration/scale -run '^$' -bench TalosUpgradeRollout -benchtime 1x
func BenchmarkTalosUpgradeRollout(b *testing.B) {
	for _, c := range []struct {
		workers int
		pull    time.Duration
		to      string
	}{{10, 0, "v1.13.1"}, {10, itest.UpgradePullDelay, "v1.13.1"}, {100, 0, "v1.13.1"}, {10, 0, "v1.14.1"}, {100, 0, "v1.14.1"}} {
		if testing.Short() && c.workers > 10 {
			continue
		}
		name := fmt.Sprintf("controlplanes=3,workers=%d", c.workers)
		if c.pull > 0 {
			name += ",pull=" + c.pull.String()
		}
		if c.to != "v1.13.1" {
			name += ",to=" + c.to
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				r := itest.UpgradeRollout(b, c.workers, c.pull, c.to)
				b.ReportMetric(r.Total.Seconds(), "total-s")
				b.ReportMetric(r.Floor.Seconds(), "floor-s")
				b.ReportMetric(r.Total.Seconds()/r.Floor.Seconds(), "total/floor")
				b.ReportMetric(100*(r.Total.Seconds()-r.Floor.Seconds())/r.Floor.Seconds(), "overhead-%")
				b.ReportMetric(r.Cpu.Seconds(), "process-cpu-s")
				b.ReportMetric(float64(r.PeakHeap)/(1<<20), "peak-heap-MiB")
			}
		})
	}
}
