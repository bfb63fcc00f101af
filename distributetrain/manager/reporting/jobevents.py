"""The job's Events on the manager pod: each reason (the REASON column of
``kubectl describe pod MANAGER``), its type and the action the manager took
(docs/exit-codes.md, "The job's story"). ``kube.events`` writes them.

Planned, workers created and Ready, chief created and started, waiting for GPUs, an
attempt released, a pod that cannot start, succeeded or failed.
"""

from __future__ import annotations

from distributetrain.core.watching.startprogress import AwaitingNode, Pulling
from distributetrain.kube.events import Kind

NORMAL = "Normal"
WARNING = "Warning"

# Reasons: what happened (the REASON column of `kubectl describe`).
PLANNED = "Planned"
QUEUED = "Queued"  # the attempt's pods wait in a Kueue queue as one workload
WORKERS_CREATED = "WorkersCreated"
WORKERS_READY = "WorkersReady"
CHIEF_CREATED = "ChiefCreated"
CHIEF_STARTED = "ChiefStarted"
WAITING_FOR_GPUS = "WaitingForGPUs"
WAITING_FOR_QUOTA = "WaitingForQuota"  # a ResourceQuota refused the job for what others use: it waits
NODES_ADDED = "NodesAdded"  # the cluster added nodes for the job's scale-up pods (``core.placement.scaleup``)
WAITING_FOR_NODES = "WaitingForNodes"  # no autoscaler answers for the job's scale-up pods
RELEASED = "Released"
RESTARTING = "Restarting"
RESIZED = "Resized"  # an elastic job lost or gained GPUs
NODE_LOST = "NodeLost"  # a node holding the job's pods stopped being Ready: they were deleted
REPLACE_FAILED = "ReplaceFailed"  # an elastic job could not grow back this time: it goes on, and tries again
POD_WAITING = "PodWaiting"
PULLING = "Pulling"  # a job pod's node pulls its image: progress, not counted against --worker-ready-timeout
AWAITING_NODE = "AwaitingNode"  # a job pod waits for a node an autoscaler launches for it: progress too
# What each slow start (a stage of ``startprogress``) is recorded as.
SLOW_START_REASONS = {Pulling: PULLING, AwaitingNode: AWAITING_NODE}
SUCCEEDED = "Succeeded"
FAILED = "Failed"
# reason -> (type, action): the action is what the manager did, or does, about it.
KINDS: dict[str, Kind] = {
    PLANNED: (NORMAL, "Plan"),
    QUEUED: (NORMAL, "Queue"),
    WORKERS_CREATED: (NORMAL, "Create"),
    WORKERS_READY: (NORMAL, "Wait"),
    CHIEF_CREATED: (NORMAL, "Create"),
    CHIEF_STARTED: (NORMAL, "Wait"),
    WAITING_FOR_GPUS: (WARNING, "Plan"),
    WAITING_FOR_QUOTA: (WARNING, "Wait"),
    NODES_ADDED: (NORMAL, "Wait"),
    WAITING_FOR_NODES: (WARNING, "Release"),
    RELEASED: (WARNING, "Release"),
    RESTARTING: (WARNING, "Restart"),
    RESIZED: (NORMAL, "Resize"),
    NODE_LOST: (WARNING, "Delete"),
    REPLACE_FAILED: (WARNING, "Replace"),
    POD_WAITING: (WARNING, "Wait"),
    PULLING: (NORMAL, "Wait"),
    AWAITING_NODE: (NORMAL, "Wait"),
    SUCCEEDED: (NORMAL, "Finish"),
    FAILED: (WARNING, "Finish"),
}
