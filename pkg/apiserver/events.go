package apiserver

import (
	"fmt"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
)

// eventRecorder records the server's Events (a started operation, a granted
// override) in the kube-apiserver the server extends, from when the server
// runs until it shuts down. Without a kube-apiserver it records none.
func eventRecorder(server *genericapiserver.GenericAPIServer, kube *rest.Config) (events.EventRecorder, error) {
	if kube == nil {
		return nil, nil
	}
	client, err := kubernetes.NewForConfig(kube)
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := server.AddPostStartHook("ichor-events", func(ctx genericapiserver.PostStartHookContext) error {
		broadcaster.StartRecordingToSink(ctx.Done())
		return nil
	}); err != nil {
		return nil, err
	}
	return broadcaster.NewRecorder(clientgoscheme.Scheme, Name), nil
}
