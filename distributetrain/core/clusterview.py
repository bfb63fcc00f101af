"""The cluster as every booking starts from: its nodes, and what its other pods hold.

A booking reads the bookings (every job's workers and chiefs) afresh under the placement
Lease, and everything else from a survey taken before: the nodes, and what every other
pod holds of each node (``manager.booking``). On a large cluster that survey is the long
list (150,000 pods), the same for every job: so one manager takes it and publishes it
(``manager.clusterview``), and the managers that start within ``MAX_AGE_S`` read it
instead of listing the cluster again. This is that survey, for any job:

- each node as the inventory reads it (``slim_node``: labels, taints, whether it is
  cordoned or Ready, its allocatable);
- each node's usage: what its pods, but the bookings, request of every resource (GPUs
  of any name among them), and how many they are;
- DRA GPUs, for whatever DeviceClass a job names (``dracounting``): each node's devices of
  its node-local ResourceSlices with their attributes (each distinct set of attributes
  once), and the devices allocated to ResourceClaims but the jobs' own (those are counted
  from the bookings, like their pods' other requests).

A job builds its ledger from it (``ledger``): its candidates, and those pods' part, by
the same rules as an inventory of the objects themselves (tests compare the two).
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from distributetrain.core import dracounting, names
from distributetrain.core.dracounting import Device, DeviceId
from distributetrain.core.inventory import TERMINAL_PHASES, GpuLedger, pinned_node
from distributetrain.core.podrequests import PODS, pod_amounts, requested_resources

SCHEMA = 2  # of the encoded form: a reader skips a survey of another
# A survey older than this is taken again: the managers starting in one burst share it,
# and a plan it makes is at most this late in seeing another tenant's pods.
MAX_AGE_S = 10.0


def slim_node(node: Mapping) -> dict:
    """A Node cut to what the inventory reads of it."""
    metadata, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = [{key: condition[key] for key in ("type", "status", "reason", "message") if condition.get(key)}
             for condition in status.get("conditions") or () if condition.get("type") == "Ready"]
    slim_spec = {key: spec[key] for key in ("taints", "unschedulable") if spec.get(key)}
    return {"metadata": {"name": metadata["name"], "labels": dict(metadata.get("labels") or {})},
            "spec": slim_spec, "status": {"allocatable": dict(status.get("allocatable") or {}), "conditions": ready}}


@dataclass
class ClusterView:
    """Nodes (``slim_node``) and, by node name, what pods other than the bookings request there."""

    taken_at: float = 0.0  # wall-clock seconds, of the manager that took it
    nodes: list[dict] = field(default_factory=list)
    usage: dict[str, Counter] = field(default_factory=dict)
    devices: dict[str, list[list]] = field(default_factory=dict)  # by node: [driver, pool, name, attribute set]
    attribute_sets: list[list] = field(default_factory=list)  # [[qualified name, [type, value]], ...]
    allocated: set[DeviceId] = field(default_factory=set)  # to claims but the jobs' own

    def add_node(self, node: Mapping) -> None:
        self.nodes.append(slim_node(node))

    def add_pod(self, pod: Mapping) -> None:
        """Count a bound or pinned, unfinished pod, unless it is a booking (read afresh)."""
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName") or pinned_node(spec)
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return
        if names.is_booking(metadata.get("labels") or {}):
            return
        used = self.usage.setdefault(node, Counter())
        used.update({resource: amount for resource, amount in pod_amounts(spec, requested_resources(spec)).items()
                     if amount})
        used[PODS] += 1

    def forget_pods(self) -> None:
        self.usage.clear()

    def add_slices(self, slices: Iterable[Mapping]) -> None:
        """Every ResourceSlice of the cluster, at once (a pool's generations are compared)."""
        index = {tuple((name, tuple(value)) for name, value in attributes): i
                 for i, attributes in enumerate(self.attribute_sets)}
        for node, devices in dracounting.node_devices(slices).items():
            for device in devices:
                if device.attributes not in index:
                    index[device.attributes] = len(self.attribute_sets)
                    self.attribute_sets.append([[name, list(value)] for name, value in device.attributes])
                self.devices.setdefault(node, []).append([device.driver, device.pool, device.name,
                                                          index[device.attributes]])

    def add_claims(self, claims: Iterable[Mapping]) -> None:
        self.allocated.update(dracounting.allocated_devices(claims))

    def node_devices(self) -> dict[str, list[Device]]:
        sets = [tuple((name, tuple(value)) for name, value in attributes) for attributes in self.attribute_sets]
        return {node: [Device(driver, pool, name, sets[i]) for driver, pool, name, i in devices]
                for node, devices in self.devices.items()}

    def ledger(self, empty: GpuLedger, tolerations: Iterable[Mapping], node_selector: Mapping[str, str]) -> GpuLedger:
        """``empty`` (a job's ledger, no node yet) with every node and every pod but the bookings;
        with its ``device_class``, each node's devices of that class and the claims holding some."""
        selected = dracounting.class_devices(self.node_devices(), empty.device_class) if empty.device_class else {}
        empty.dra = {node: len(ids) for node, ids in selected.items()}
        for node in self.nodes:
            empty.add_node(node, tolerations, node_selector)
        for node, amounts in self.usage.items():
            empty.add_usage(node, amounts)
        for node, taken in dracounting.taken_per_node(selected, self.allocated).items():
            empty.add_usage(node, {empty.resource: taken})
        return empty

    def encode(self) -> bytes:
        body = {"schema": SCHEMA, "takenAt": self.taken_at, "nodes": self.nodes,
                "usage": {node: dict(amounts) for node, amounts in self.usage.items()},
                "devices": self.devices, "attributeSets": self.attribute_sets,
                "allocated": sorted(list(device) for device in self.allocated)}
        return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 6)

    @classmethod
    def decode(cls, data: bytes) -> ClusterView | None:
        """The view ``encode`` wrote; None for anything else (another schema, damage)."""
        try:
            body = json.loads(zlib.decompress(data))
        except (zlib.error, ValueError):
            return None
        if not isinstance(body, dict) or body.get("schema") != SCHEMA:
            return None
        return cls(float(body["takenAt"]), body["nodes"],
                   {node: Counter(amounts) for node, amounts in body["usage"].items()},
                   body["devices"], body["attributeSets"], {tuple(device) for device in body["allocated"]})
