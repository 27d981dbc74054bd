// Command kube-scheduler is the upstream Kubernetes scheduler, built from
// the k8s.io/kubernetes module pinned in this tools module's go.mod. The
// simulated clusters run it so that DaemonSet pods (kube-proxy) are bound
// to their nodes, as in a real cluster.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
