// Command pause is the pod sandbox's process, as upstream's pause.c: it holds the
// pod's namespaces, reaps the zombies of the processes it adopts as PID 1 and exits
// on SIGINT or SIGTERM. Built static, it is the whole registry.k8s.io/pause image of
// the local cluster (no image registry is reachable to pull the upstream one).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
