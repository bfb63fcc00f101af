"""Real nodes: the upstream kubelet, containerd and kube-proxy, one set per node.

Each node lives in its own network namespace on the cluster bridge, as a machine on
a flat network would, with its own containerd (own root, state and sockets: two
kubelets sharing one would garbage-collect each other's pods) and its own cgroup
tree. What the node's processes write on the host is listed in `hostchanges`, and
`down` restores it.

    config.py       pure builders: every file and command line of a node
    network.py      the node's netns, its veth on the bridge, routes to its pods
    cgroups.py      the node's cgroup tree: created, emptied, removed
    hostchanges.py  sysctls and files the kubelet changes on the host, restored
    realnode.py     one node's lifecycle: start, stop, kubelet restart, image cache
"""
