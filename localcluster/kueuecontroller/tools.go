//go:build tools

// The wrapper's only job: keep Kueue's command in this module's requirements, so that
// `go build sigs.k8s.io/kueue/cmd/kueue` builds it at the pinned version.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
