"""A local Kubernetes cluster for developing and testing distributetrain.

The real upstream control plane (built from source by controlplane/build.sh)
runs as host processes; each node (localcluster.node) is an upstream kubelet with
a containerd of its own in the node's network namespace, pulling images from a
local registry; GPUs are advertised, not real. Entry points:
`python -m localcluster up|down|status` and `localcluster.cluster.Cluster`.
"""
