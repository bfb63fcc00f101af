//go:build tools

// The wrapper's only job: keep kube-router's command in this module's requirements, so that
// `go build github.com/cloudnativelabs/kube-router/v2/cmd/kube-router` builds it at the pinned version.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
