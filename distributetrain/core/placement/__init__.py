"""The plan: which nodes take how many GPUs (``placement``, ``topology``, ``scaleup``), and what it
reads of the cluster: the free GPUs per node (``inventory``), what a pod fits, claims, quotas."""
