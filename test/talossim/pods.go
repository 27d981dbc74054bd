package talossim

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// podRunner is the simulated kubelet's part in the life of the pods bound to its node, driven by a
// watch of them as a kubelet's is: a pod the scheduler bound here (a DaemonSet's, or one created with
// its nodeName) is reported Running and Ready at once, its containers at their images, as if they had
// started; a pod asked to leave (evicted, or deleted gracefully) is removed for good, as the kubelet
// does once its containers stopped. No container runs. Mirror pods are the static pods' (mirrorPods).
type podRunner struct {
	client kubernetes.Interface
	node   string
	ip     string
	lister cache.Indexer
	queue  workqueue.TypedRateLimitingInterface[string]
}

// runPods runs the pods bound to node until ctx ends.
func runPods(ctx context.Context, client kubernetes.Interface, node, ip string) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + node
	}))
	informer := factory.Core().V1().Pods().Informer()

	r := &podRunner{
		client: client, node: node, ip: ip, lister: informer.GetIndexer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, kubeletRetryInterval),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "talossim-pods-" + node}),
	}
	defer r.queue.ShutDown()

	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}

	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()

	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()

	for r.next(ctx) {
	}
}

// next handles one queued pod; false once the queue shut down.
func (r *podRunner) next(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)

	if err := r.sync(ctx, key); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("syncing pod", "pod", key, "err", err)
		r.queue.AddRateLimited(key)

		return true
	}

	r.queue.Forget(key)

	return true
}

func (r *podRunner) sync(ctx context.Context, key string) error {
	obj, exists, err := r.lister.GetByKey(key)
	if err != nil || !exists {
		return err
	}

	pod := obj.(*corev1.Pod) //nolint:forcetypeassert // the informer's type
	pods := r.client.CoreV1().Pods(pod.Namespace)

	switch {
	case pod.DeletionTimestamp != nil:
		err = pods.Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or a new pod of that name
		}

		return err
	case pod.Annotations[corev1.MirrorPodAnnotationKey] != "",
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed,
		pod.Status.Phase == corev1.PodRunning:
		return nil
	}

	running := pod.DeepCopy()
	running.Status = runningStatus(pod, r.ip, metav1.Now())

	_, err = pods.UpdateStatus(ctx, running, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the watch brings the newer pod
	}

	return err
}

// runningStatus is the status of pod once its containers started on a node at ip: Running, Ready, every
// container running at its image. A host-network pod has the node's IP; others get none (no CNI here).
func runningStatus(pod *corev1.Pod, ip string, now metav1.Time) corev1.PodStatus {
	status := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    ip,
		HostIPs:   []corev1.HostIP{{IP: ip}},
		StartTime: &now,
		QOSClass:  pod.Status.QOSClass,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}

	if pod.Spec.HostNetwork {
		status.PodIP, status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}

	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}

	return status
}
