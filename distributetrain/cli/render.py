"""`render`: the YAML of every object a job would create, without any cluster.

Free GPUs come from ``--nodes``; the manager's address is a placeholder (it exists only
once its pod runs) and the Secret shows placeholders instead of keys (each job's keys are
made by the manager at submission and never printed). With ``--queue`` the pods are those
the manager creates for Kueue (``core.pods.podgroup``): unpinned, gated, in one pod group whose
name ends in a random token per group, shown as a placeholder. The NetworkPolicy of the
job's pods is shown; the manager's own selects it by its UID, which exists only once it runs.
Pods on ``--dra-nodes`` claim their GPUs through the ResourceClaimTemplates shown before them
(``core.placement.gpuclaims``); queued pods never do.
"""

from __future__ import annotations

from collections.abc import Mapping

import yaml

from distributetrain.core import errors
from distributetrain.core.placement import inventory, placement
from distributetrain.core.pods import networkpolicy, podgroup
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys, KeyPair
from distributetrain.manager.pods import discovery
from distributetrain.manager.placement import kinds, placing, queueing

PLACEHOLDER_KEYS = JobKeys(
    client=KeyPair("<private key generated per job>", "<public key generated per job>"),
    host=KeyPair("<host key generated per job>", "ssh-ed25519 <host public key generated per job> host"),
)

# The manager draws a few random characters per group (manager.placement.queueing).
PLACEHOLDER_GROUP_TOKEN = "<random per group>"


def parse_nodes(text: str) -> dict[str, int]:
    free = {}
    for term in filter(None, text.split(",")):
        node, sep, count = term.partition("=")
        if not sep or not node or not count.isdigit():
            raise errors.UsageError("--nodes", f"must be NODE=FREE[,NODE=FREE...] like gpu-a=5,gpu-b=3, got {text!r}")
        free[node] = int(count)
    if not free:
        raise errors.UsageError("--nodes", "must name at least one node, like gpu-a=5,gpu-b=3")
    return free


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the pod scripts) as readable literal blocks."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def ledger_of(settings: JobSettings, free: Mapping[str, int], dra_nodes: set[str]) -> inventory.GpuLedger:
    """The GPUs of ``--nodes`` as the manager's booking reads a cluster: each a Ready node
    with that many free (of ``--device-class`` on ``--dra-nodes``), with nothing but GPUs
    counted and no labels (so no network domains: each node one of its own)."""
    ledger = inventory.GpuLedger(settings.gpu_resource, levels=settings.topology,
                                 dra={node: free[node] for node in dra_nodes})
    for node, gpus in free.items():
        allocatable = {} if node in dra_nodes else {settings.gpu_resource: str(gpus)}
        ledger.add_node({"metadata": {"name": node, "labels": {}},
                         "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}})
    return ledger


def render(settings: JobSettings, nodes: str, dra_nodes: str = "") -> str:
    free = parse_nodes(nodes)
    on_dra = {node for node in dra_nodes.split(",") if node}
    if on_dra and not settings.device_class:
        raise errors.UsageError("--dra-nodes", "needs --device-class: the DeviceClass their pods claim GPUs of")
    if on_dra - set(free):
        raise errors.UsageError("--dra-nodes", f"names nodes not in --nodes: {', '.join(sorted(on_dra - set(free)))}")
    if not settings.discovery_url:
        settings = settings.replace(discovery_url=discovery.hosts_url("<manager pod IP>"))
    ledger = ledger_of(settings, free, set() if settings.queue else on_dra)
    kind = kinds.kind_of(settings)
    try:
        # What the manager plans and creates at the first attempt (``directplacement``, ``queueing``).
        if settings.queue:
            group = podgroup.group_name(settings.job_name, 0, PLACEHOLDER_GROUP_TOKEN)
            objects = podgroup.queued_attempt(settings, queueing.shares(ledger, settings.num_gpus, kind),
                                              PLACEHOLDER_KEYS, 0, group)
        else:
            objects = placing.attempt_objects(settings, placing.plan_attempt(kind, ledger, settings, may_grow=True),
                                              PLACEHOLDER_KEYS, 0)
    except placement.InsufficientGPUs as e:
        raise errors.UsageError("--num-gpus", str(e)) from None
    secret, *pods = objects  # the manager creates its NetworkPolicies after the Secret, before any pod (and template)
    return yaml.dump_all([secret, *networkpolicy.job_policies(settings), *pods], Dumper=_Dumper, sort_keys=False,
                         default_flow_style=False)
