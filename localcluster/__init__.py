"""A local Kubernetes cluster for developing and testing distributetrain.

The real upstream control plane (built from source by controlplane/build.sh)
runs as host processes; node agents (localcluster.agent) register fake-GPU
nodes and run each pod's containers from their images (podman with runc) in the
pod's network namespace. Entry points:
`python -m localcluster up|down|status` and `localcluster.cluster.Cluster`.
"""
