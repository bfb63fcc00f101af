"""The cluster as every booking starts from: its nodes, and what its other pods hold.

A booking reads the bookings (every job's workers and chiefs) afresh under the placement
Lease, and everything else from a survey taken before: the nodes, and what every other
pod holds of each node (``manager.placement.booking``). On a large cluster that survey is the long
list (150,000 pods), the same for every job: so one manager takes it and publishes it
(``manager.placement.clusterview``), and the managers that asked for one while it was taken read
it instead of listing the cluster again. This is that survey, for any job:

- each node as the inventory reads it (``slim_node``: labels, taints, whether it is
  cordoned or Ready, its allocatable);
- each node's usage: what its pods, but the bookings, request of every resource (GPUs
  of any name among them), and how many they are;
- the bookings (every job's workers and chiefs, as the inventory reads them), and the
  booking journal's position when the survey began (``bookingjournal``): under the
  Lease, a booking adds what was booked since from the journal, or lists the bookings
  afresh;
- in the survey of a job with --device-class, which it takes alone (never published): DRA
  GPUs (``dracounting``), each node's devices of its node-local ResourceSlices, and the
  devices allocated to ResourceClaims but the jobs' own (those are counted from the
  bookings, like their pods' other requests).

A job builds its ledger from it (``ledger``): its candidates, and those pods' part, by
the same rules as an inventory of the objects themselves (tests compare the two).
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from distributetrain.core.placement import dracounting
from distributetrain.core import names
from distributetrain.core.placement.dracounting import Device, DeviceId
from distributetrain.core.placement.inventory import TERMINAL_PHASES, GpuLedger, pinned_node
from distributetrain.core.placement.podrequests import PODS, pod_amounts, requested_resources

SCHEMA = 2  # of the encoded form: a reader skips a survey of another


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

    taken_at: float = 0.0  # wall-clock seconds when it was begun, of the manager that took it
    nodes: list[dict] = field(default_factory=list)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # as decoded: plain dicts
    bookings: list[dict] = field(default_factory=list)  # unfinished, bound or not
    position: int | None = None  # the booking journal's next entry before the pods were listed
    # DRA GPUs, in the survey of a job with --device-class only (never published): each node's
    # devices (``dracounting``), and those allocated to claims but the jobs' own.
    devices: dict[str, list[Device]] = field(default_factory=dict)
    allocated: set[DeviceId] = field(default_factory=set)

    def add_node(self, node: Mapping) -> None:
        self.nodes.append(slim_node(node))

    def add_pod(self, pod: Mapping) -> None:
        """Count a bound or pinned, unfinished pod; keep an unfinished booking as it is (the
        ledger under the Lease counts it, or the bookings read afresh)."""
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return
        if names.is_booking(metadata.get("labels") or {}):
            self.bookings.append(dict(pod))
            return
        node = spec.get("nodeName") or pinned_node(spec)
        if not node:
            return
        used = self.usage.setdefault(node, Counter())
        used.update({resource: amount for resource, amount in pod_amounts(spec, requested_resources(spec)).items()
                     if amount})
        used[PODS] += 1

    def forget_pods(self) -> None:
        self.usage.clear()
        self.bookings.clear()

    def add_slices(self, slices: Iterable[Mapping]) -> None:
        """Every ResourceSlice of the cluster, at once (a pool's generations are compared)."""
        self.devices = dracounting.node_devices(slices)

    def add_claims(self, claims: Iterable[Mapping]) -> None:
        self.allocated.update(dracounting.allocated_devices(claims))

    def ledger(self, empty: GpuLedger, tolerations: Iterable[Mapping], node_selector: Mapping[str, str]) -> GpuLedger:
        """``empty`` (a job's ledger, no node yet) with every node and every pod but the bookings;
        with its ``device_class``, each node's devices of that class and the claims holding some."""
        selected = dracounting.class_devices(self.devices, empty.device_class) if empty.device_class else {}
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
                "bookings": self.bookings, "position": self.position}
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
        return cls(float(body["takenAt"]), body["nodes"], body["usage"],  # read as they are: 5,000 of them
                   body["bookings"], body["position"])
