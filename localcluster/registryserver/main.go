// Command registry is the upstream distribution registry with the filesystem
// storage driver only: `registry serve CONFIG.yml`, as upstream cmd/registry.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
