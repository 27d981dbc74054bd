//go:build tools

// Tools module for SeaweedFS, the S3-compatible object store the backup
// tests write to; hack/build-seaweedfs.sh builds its weed command. It is a
// separate module so the root module never depends on it.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
