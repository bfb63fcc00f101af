// Command controlplane is a hyperkube-style multi-call binary holding the
// upstream kube-apiserver, kube-scheduler, kube-controller-manager, kubectl,
// the node components (kubelet and kube-proxy) and etcd, at the version these
// Kubernetes modules require: from 3.5.13/3.6 etcd answers watch progress
// requests, so the apiserver serves consistent (and paginated) lists from its
// watch cache, as on real clusters (with Debian's etcd 3.4 every page went to
// etcd).
// One binary shares compilation and is linked once, which matters on small
// build machines. The component is chosen by the basename of argv[0] (via
// symlinks) or, failing that, by the first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones, as in the upstream mains

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// servers maps a component name to the constructor of its cobra command.
var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-proxy":              proxy.NewProxyCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

const (
	kubectlName = "kubectl"
	etcdName    = "etcd"
)

func main() {
	name, args := component(os.Args)
	// The upstream commands read os.Args themselves (kubectl for plugins and
	// verbosity, cobra for flags), so present them the single-binary view.
	os.Args = append([]string{name}, args...)
	switch name {
	case kubectlName:
		os.Exit(runKubectl())
	case etcdName:
		etcdmain.Main(os.Args) // exits only through os.Exit or a signal
		return
	}
	newCommand, ok := servers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: controlplane COMPONENT [flags...]; COMPONENT is one of %v\n", componentNames())
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}

// component returns the component to run and its arguments: argv[0]'s basename
// when it names a component (symlink invocation), otherwise the first argument.
func component(argv []string) (string, []string) {
	base := filepath.Base(argv[0])
	if base == kubectlName || base == etcdName || servers[base] != nil {
		return base, argv[1:]
	}
	if len(argv) < 2 {
		return "", nil
	}
	return argv[1], argv[2:]
}

// runKubectl mirrors upstream cmd/kubectl: verbosity is set before the command
// is built so klog works while plugins and .kuberc are handled.
func runKubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func componentNames() []string {
	names := []string{etcdName, kubectlName}
	for name := range servers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
