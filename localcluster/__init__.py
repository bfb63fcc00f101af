"""A local Kubernetes cluster for developing and testing distributetrain.

The real upstream control plane (built from source by controlplane/build.sh)
runs as host processes; node agents (localcluster.agent) register fake-GPU
nodes and run pods as local processes in network namespaces. Entry points:
`python -m localcluster up|down|status` and `localcluster.cluster.Cluster`.
"""
