package ui

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
	"ichor.dev/ichor/pkg/generated/clientset/versioned"
)

// maxEvents is how many of a cluster's Events its page shows, newest first.
const maxEvents = 50

// Reading Events is bounded: at most maxEventPages pages of eventPage
// Events from each of Ichor's reporters, so that a namespace with a flood
// of Events costs the console and kube-apiserver a bounded read.
const (
	eventPage     = 500
	maxEventPages = 4
)

// eventRow is an Event as a cluster's page shows it.
type eventRow struct {
	Time, Type, Reason, Object, Message string
	at                                  time.Time
}

// clusterEvents are the newest Events about a cluster and what belongs to
// it (its machines, operations, backups and, where the person may read
// them, patches), read as the person; refused is the server's reason when
// the person may not read Events.
func (s *Server) clusterEvents(ctx context.Context, se *session, ns, cluster string, machines []machineRow) (rows []eventRow, refused string) {
	kube, err := kubernetes.NewForConfig(s.as(se))
	if err != nil {
		return nil, err.Error()
	}
	ichor, err := versioned.NewForConfig(s.as(se))
	if err != nil {
		return nil, err.Error()
	}
	// Only Events Ichor's own components reported about Ichor's objects:
	// anyone who may create Events in the namespace could write others.
	var events []corev1.Event
	for _, reporter := range v1alpha1.Reporters {
		opts := metav1.ListOptions{Limit: eventPage, FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.apiVersion", v1alpha1.SchemeGroupVersion.String()),
			fields.OneTermEqualSelector("reportingComponent", reporter)).String()}
		for range maxEventPages {
			list, err := kube.CoreV1().Events(ns).List(ctx, opts)
			if err != nil {
				return nil, apiReason(err)
			}
			events = append(events, list.Items...)
			if opts.Continue = list.Continue; opts.Continue == "" {
				break
			}
		}
	}
	objects := map[string]bool{"TalosCluster/" + cluster: true}
	for _, m := range machines {
		objects["TalosMachine/"+m.Name] = true
	}
	ofCluster := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.clusterName", cluster).String()}
	if ops, err := ichor.IchorV1alpha1().TalosOperations(ns).List(ctx, ofCluster); err == nil {
		for _, o := range ops.Items {
			objects["TalosOperation/"+o.Name] = true
		}
	}
	if backups, err := ichor.IchorV1alpha1().TalosBackups(ns).List(ctx, ofCluster); err == nil {
		for _, b := range backups.Items {
			objects["TalosBackup/"+b.Name] = true
		}
	}
	// Viewers may not read patches: their Events stay out of their page.
	if patches, err := ichor.IchorV1alpha1().TalosConfigPatches(ns).List(ctx, ofCluster); err == nil {
		for _, p := range patches.Items {
			objects["TalosConfigPatch/"+p.Name] = true
		}
	}
	for i := range events {
		e := &events[i]
		o := e.InvolvedObject
		if o.APIVersion != v1alpha1.SchemeGroupVersion.String() || !objects[o.Kind+"/"+o.Name] {
			continue
		}
		at := eventTime(e)
		rows = append(rows, eventRow{Time: at.UTC().Format(time.DateTime), Type: e.Type, Reason: e.Reason,
			Object: o.Kind + " " + o.Name, Message: e.Message, at: at})
	}
	slices.SortStableFunc(rows, func(a, b eventRow) int { return b.at.Compare(a.at) })
	if len(rows) > maxEvents {
		rows = rows[:maxEvents]
	}
	return rows, ""
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
