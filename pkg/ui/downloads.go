package ui

import (
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// machineDownload is a download of a machine's that the console offers:
// the subresource (a credential purpose: ichor-apiserver gets a Talos
// certificate of the least role for it, per download, as the person), what
// the file is called and its media type.
type machineDownload struct {
	Purpose     v1alpha1.CredentialPurpose
	File        string
	ContentType string
	// ControlPlaneOnly downloads exist only on control planes.
	ControlPlaneOnly bool
}

var machineDownloads = []machineDownload{
	{Purpose: v1alpha1.PurposeSupportBundle, File: "%s-support-bundle.zip", ContentType: "application/zip"},
	{Purpose: v1alpha1.PurposeEtcdSnapshot, File: "%s-etcd.snapshot", ContentType: "application/octet-stream", ControlPlaneOnly: true},
}

// download streams a machine's download subresource to the browser,
// through ichor-apiserver as the person: the console holds no Talos
// credential, not even for the length of a download. A stream the node or
// the API cuts is aborted, so the browser reports a failed download
// instead of saving a short file.
func (s *Server) download(w http.ResponseWriter, r *http.Request, se *session) {
	ns, name, machine := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("machine")
	purpose := v1alpha1.CredentialPurpose(r.PathValue("download"))
	var d *machineDownload
	for i := range machineDownloads {
		if machineDownloads[i].Purpose == purpose {
			d = &machineDownloads[i]
		}
	}
	if d == nil || !validNames(ns, name, machine) {
		http.NotFound(w, r)
		return
	}
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
		SubResource(string(purpose)).Stream(r.Context())
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
