"""What the local cluster raises when it cannot be started, attached to or used."""


class ClusterError(RuntimeError):
    """The cluster cannot be started, attached to or used."""


class ClusterNotRunning(ClusterError):
    """attach() found no running control plane in the run directory."""
