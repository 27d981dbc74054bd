package ui

import (
	"fmt"
	"io"
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor"
)

// machineDownloads are the downloads of a machine's that the console
// offers: those of ichor.Downloads that take no options. Each is a
// credential purpose: ichor-apiserver gets a Talos certificate of the least
// role for it, per download, as the person.
var machineDownloads = func() []ichor.Download {
	var out []ichor.Download
	for _, d := range ichor.Downloads {
		if d.Resource == "talosmachines" && d.Options == "" {
			out = append(out, d)
		}
	}
	return out
}()

// download streams a machine's download subresource to the browser,
// through ichor-apiserver as the person: the console holds no Talos
// credential, not even for the length of a download. A stream the node or
// the API cuts is aborted, so the browser reports a failed download
// instead of saving a short file.
func (s *Server) download(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name, machine := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("machine")
	purpose := r.PathValue("download")
	i := slices.IndexFunc(machineDownloads, func(d ichor.Download) bool { return d.Subresource == purpose })
	if i < 0 || !validNames(ns, name, machine) {
		http.NotFound(w, r)
		return
	}
	d := machineDownloads[i]
	out := newStream(w)
	cs, ok := s.ichorClient(w, s.streamingAs(se))
	if !ok {
		return
	}
	fail := func(err error) {
		data := map[string]any{"Who": se.who, "CSRF": se.csrf, "Namespace": ns, "Name": name,
			"Title": fmt.Sprintf("The %s of %s", purpose, machine)}
		s.render(w, apiStatus(err), "refused", withRefusal(data, err))
	}
	m, err := cs.IchorV1alpha1().TalosMachines(ns).Get(r.Context(), machine, metav1.GetOptions{})
	if err != nil {
		fail(err)
		return
	}
	if m.Spec.ClusterName != name {
		http.NotFound(w, r)
		return
	}
	body, err := cs.IchorV1alpha1().RESTClient().Get().Namespace(ns).Resource("talosmachines").Name(machine).
		SubResource(purpose).Stream(r.Context())
	if err != nil {
		fail(err)
		return
	}
	defer body.Close() //nolint:errcheck
	h := w.Header()
	h.Set("Content-Type", d.ContentType)
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, fmt.Sprintf(d.File, machine)))
	w.WriteHeader(http.StatusOK)
	n, err := io.Copy(out, body)
	if err != nil {
		klog.InfoS("a download was cut", "user", se.who.User, "download", purpose, "machine", machine, "namespace", ns, "bytes", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}
