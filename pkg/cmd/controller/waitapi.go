package controller

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// apiPollInterval is how often waitForAPI asks whether ichor.dev is served.
const apiPollInterval = 2 * time.Second

// waitForAPI returns once the kube-apiserver serves ichor.dev/v1alpha1:
// the manager's informers and indexes need it. Installed together,
// ichor-controller usually starts before ichor-apiserver is available
// behind the aggregator; rather than exit and crash-loop, it waits, alive
// (/healthz answers) and not ready (/readyz says what it waits for).
func (o *Options) waitForAPI(ctx context.Context, cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	gv := v1alpha1.SchemeGroupVersion.String()
	served := func() error {
		_, err := dc.ServerResourcesForGroupVersion(gv)
		return err
	}
	if served() == nil {
		return nil
	}
	log := ctrl.Log.WithName("setup")
	stop, err := o.serveWaitingProbes(gv)
	if err != nil {
		return err
	}
	defer stop()
	last := time.Time{}
	t := time.NewTicker(apiPollInterval)
	defer t.Stop()
	for {
		err := served()
		if err == nil {
			log.Info("The API is served", "groupVersion", gv)
			return nil
		}
		if time.Since(last) >= 30*time.Second {
			log.Info("Waiting for the kube-apiserver to serve the API (is ichor-apiserver running, its APIService Available?)", "groupVersion", gv, "reason", err.Error())
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// serveWaitingProbes answers the health probes while waitForAPI waits, on
// the address the manager serves them on after; stop frees it.
func (o *Options) serveWaitingProbes(gv string) (stop func(), err error) {
	if o.HealthProbeBindAddress == "" || o.HealthProbeBindAddress == "0" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", o.HealthProbeBindAddress)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the kube-apiserver to serve "+gv, http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			ctrl.Log.WithName("setup").Error(err, "serve health probes")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
