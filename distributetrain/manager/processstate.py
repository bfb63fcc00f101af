"""The process state: what one manager process holds while it drives the job.

``JobSettings`` is what the user asked for and never changes. The process state adds what does:
the current attempt (moved on by the job's loop alone, recorded on the manager pod so
that the next process, post-training or a restarted container, picks it up), and what
belongs to this process: its deadlines, the hosts it serves the chief, and the job's pods
as it follows them.
"""

from __future__ import annotations

from dataclasses import dataclass

from distributetrain.core.clock import Clock
from distributetrain.core.names import Attempt
from distributetrain.core.settings import JobSettings
from distributetrain.kube.informer import Informer
from distributetrain.manager.pods.discovery import HostList
from distributetrain.manager.reporting.reporting import Reporter


@dataclass
class ProcessState:
    settings: JobSettings
    reporter: Reporter  # the job's record and Events
    attempt: Attempt
    deadline: float  # of ``clock``; --active-deadline
    gpus_until: float  # of ``clock``; how long plans may wait for GPUs (--wait-for-gpus)
    hosts: HostList  # the current attempt's workers, as the chief is told them
    clock: Clock  # what every window, deadline and wait of the process reads
    # The job's pods (its selector), listed once, then watched: every wait on them reads
    # this one store (an attempt's start, its new nodes, its admission, its training, its
    # pods gone), so the process holds one copy and lists again only when it must.
    pods: Informer
    # Why the job stopped making the cluster grow (``scaleup.NodesNotComing``): its plans
    # then wait for free GPUs, as without --scale-up-node-gpus. Empty while it may grow.
    growth_stopped: str = ""
