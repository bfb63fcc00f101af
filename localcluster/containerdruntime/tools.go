//go:build tools

// The wrapper's only job: keep containerd's commands in this module's requirements, so that
// `go build github.com/containerd/containerd/cmd/...` builds them at the pinned version.
package tools

import (
	_ "github.com/containerd/containerd/cmd/containerd"
	_ "github.com/containerd/containerd/cmd/containerd-shim-runc-v2"
)
