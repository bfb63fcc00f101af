//go:build tools

// The wrapper's only job: keep the plugin's command in this module's requirements, so that
// `go build sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin` builds it at the
// pinned version.
package tools

import _ "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"
