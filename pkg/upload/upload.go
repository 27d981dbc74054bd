// Package upload is the protocol between ichor-apiserver, which takes
// uploads from people (POST talosbackups/NAME/upload), and
// ichor-controller's upload endpoint, which writes them: where an upload is
// sent, who may send it, and how the uploader is named.
package upload

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"ichor.dev/ichor/pkg/apis/ichor/v1alpha1"
)

// ReceiveSubresource is the subresource whose create verb lets a caller
// hand ichor-controller an upload: ichor-apiserver's, and nobody else's.
const ReceiveSubresource = "receive"

// UploaderHeader carries the user ichor-apiserver accepted the upload from.
const UploaderHeader = "Ichor-Uploader"

// pathPrefix starts every upload's path.
const pathPrefix = "/uploads/" + v1alpha1.GroupName + "/" + "namespaces/"

// Path is where the upload into the backup namespace/name is sent.
func Path(namespace, name string) string {
	return pathPrefix + namespace + "/talosbackups/" + name
}

// ParsePath is Path's inverse.
func ParsePath(p string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(p, pathPrefix)
	if !ok {
		return types.NamespacedName{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] != "talosbackups" || parts[2] == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: parts[0], Name: parts[2]}, true
}

// NotAnUpload refuses an upload into the backup name, one the controller
// takes: ichor-apiserver says it before it reads the body, and the
// controller again, deciding on the stored object.
func NotAnUpload(name string) string {
	return fmt.Sprintf("TalosBackup %s is a backup the controller takes, not an upload: create a TalosBackup with spec.upload.digest to upload a snapshot", name)
}
