"""Every placement path: a booking under the placement Lease and the one wait for free GPUs
(``booking``, ``placing``), an attempt placed directly, through a Kueue queue, an elastic job's
replacements, the nodes the cluster adds."""
