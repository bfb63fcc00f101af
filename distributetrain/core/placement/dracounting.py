"""DRA GPUs per node: devices of the job's DeviceClass in ResourceSlices, minus those
allocated in ResourceClaims (Dynamic Resource Allocation, ``resource.k8s.io/v1``, GA in
Kubernetes 1.34).

A node whose GPUs a DRA driver publishes advertises none in its allocatable. The driver
writes ResourceSlices instead: a pool of devices per node (``spec.nodeName``), each
device with its attributes; the scheduler allocates a pod's ResourceClaim from them, and
records which devices it got (``status.allocation.devices.results``: driver, pool,
device). So a node's DRA GPUs are the devices of its slices that the job's DeviceClass
selects, and the free ones those of them no claim holds. What is read, and why:

- **Slices**: node-local ones only (``spec.nodeName``); of a pool, only the slices of its
  newest generation (a driver that republishes a pool raises ``spec.pool.generation``, and
  the older slices are stale until it deletes them). Devices of slices that several nodes
  reach (``nodeSelector``, ``allNodes``: network-attached) are no node's GPUs here.
- **The DeviceClass's selectors** (``spec.selectors[].cel.expression``, all of which a
  device must pass). CEL is not evaluated here: of each expression, the terms of its
  top-level conjunction (``&&``) that compare ``device.driver`` or one attribute
  (``device.attributes['DOMAIN'].NAME``) with a literal are applied, the forms the drivers'
  own classes use: the example driver's ``device.driver == 'gpu.example.com'``, NVIDIA's
  ``gpu.nvidia.com`` (``device.driver == 'gpu.nvidia.com' &&
  device.attributes['gpu.nvidia.com'].type == 'gpu'``, its chart's deviceclass-gpu.yaml).
  Any other term, and an expression that is not a conjunction (``||``, ``?:``), is not
  applied (``ClassSelector.unread``): the class then counts devices the scheduler may not
  give it, and a plan on them waits out --worker-ready-timeout and plans again.
- **Claims**: every device allocated, except to the jobs' own claims (made from their
  ResourceClaimTemplates, labelled as theirs: ``names.is_job_claim``). Those are counted
  from the jobs' pods, which say how many devices they claim (``names.LABEL_DRA_GPUS``),
  pinned to their node before the scheduler allocates anything: once allocated, they
  would count twice. Devices held for admin access are not taken from anyone.

Not counted: a device's share of counters another device consumes too (partitionable
devices: a MIG slice allocated on a GPU that a whole-GPU class also lists).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from distributetrain.core import names

API_VERSION = "resource.k8s.io/v1"
DRIVER = "driver"  # a selector's key for the device's driver (attribute keys are qualified: DOMAIN/NAME)
DeviceId = tuple[str, str, str]  # driver, pool, device: as a claim's allocation names a device
Value = tuple[str, object]  # an attribute's value with its type: ("string", "gpu"), ("int", 0), ("bool", True)
VALUE_TYPES = ("string", "int", "bool", "version")


@dataclass(frozen=True)
class Device:
    """One device of a node-local ResourceSlice, with its attributes by qualified name."""

    driver: str
    pool: str
    name: str
    attributes: tuple[tuple[str, Value], ...] = ()

    @property
    def id(self) -> DeviceId:
        return self.driver, self.pool, self.name


@dataclass(frozen=True)
class ClassSelector:
    """What of a DeviceClass's selectors is applied: equalities of the driver (key ``DRIVER``)
    or of qualified attributes with a value, all of which a device must pass."""

    name: str  # the DeviceClass
    terms: tuple[tuple[str, Value], ...] = ()
    unread: tuple[str, ...] = ()  # terms (or whole expressions) not applied

    def selects(self, device: Device) -> bool:
        attributes = dict(device.attributes)
        return all((device.driver == value[1]) if key == DRIVER else attributes.get(key) == value
                   for key, value in self.terms)


# -- the DeviceClass ------------------------------------------------------------------------
_QUOTED = r"""(?P<q{n}>['"])(?P<{name}>[^'"]*)(?P=q{n})"""
_DRIVER_TERM = re.compile(r"device\.driver\s*==\s*(?P<value>.+)")
_ATTRIBUTE_TERM = re.compile(
    r"device\.attributes\[\s*" + _QUOTED.format(n=1, name="domain") + r"\s*\]"
    r"(?:\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\[\s*" + _QUOTED.format(n=2, name="quoted") + r"\s*\])"
    r"\s*==\s*(?P<value>.+)")
_STRING = re.compile(_QUOTED.format(n=3, name="text"))
_INT = re.compile(r"-?[0-9]+")


def class_selector(device_class: Mapping) -> ClassSelector:
    """The applicable part of a DeviceClass's selectors (see the module's docstring)."""
    terms: list[tuple[str, Value]] = []
    unread: list[str] = []
    for selector in (device_class.get("spec") or {}).get("selectors") or ():
        expression = ((selector or {}).get("cel") or {}).get("expression", "")
        conjuncts = _conjuncts(expression)
        if conjuncts is None:
            unread.append(expression.strip())
            continue
        for conjunct in conjuncts:
            term = _term(conjunct)
            if term is None:
                unread.append(conjunct)
            else:
                terms.append(term)
    name = (device_class.get("metadata") or {}).get("name", "")
    return ClassSelector(name, tuple(terms), tuple(unread))


def _conjuncts(expression: str) -> list[str] | None:
    """The terms of a top-level ``&&`` chain (outside parentheses and string literals); None
    if the top level is no conjunction (an ``||`` or a ``?:`` there)."""
    terms, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(expression):
        char, pair = expression[i], expression[i:i + 2]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and (pair == "||" or char == "?"):
            return None
        elif depth == 0 and pair == "&&":
            terms.append(expression[start:i].strip())
            start, i = i + 2, i + 1
        i += 1
    terms.append(expression[start:].strip())
    return [term for term in terms if term]


def _term(text: str) -> tuple[str, Value] | None:
    if match := _DRIVER_TERM.fullmatch(text):
        value = _literal(match["value"].strip())
        return (DRIVER, value) if value and value[0] == "string" else None
    if match := _ATTRIBUTE_TERM.fullmatch(text):
        value = _literal(match["value"].strip())
        name = match["name"] or match["quoted"]
        return (f"{match['domain']}/{name}", value) if value else None
    return None


def _literal(text: str) -> Value | None:
    if match := _STRING.fullmatch(text):
        return "string", match["text"]
    if text in ("true", "false"):
        return "bool", text == "true"
    if _INT.fullmatch(text):
        return "int", int(text)
    return None


# -- ResourceSlices -------------------------------------------------------------------------
def attributes(driver: str, raw: Mapping) -> tuple[tuple[str, Value], ...]:
    """A device's attributes, each by its qualified name (an unqualified one is in the
    driver's domain, as CEL's ``device.attributes[driver]`` reads it) with its typed value."""
    found = []
    for name, typed in (raw or {}).items():
        kind = next((kind for kind in VALUE_TYPES if kind in (typed or {})), None)
        if kind:
            found.append((name if "/" in name else f"{driver}/{name}", (kind, typed[kind])))
    return tuple(sorted(found))


def node_devices(slices: Iterable[Mapping]) -> dict[str, list[Device]]:
    """Every device of the node-local slices, by node: of each pool, its newest generation's."""
    local = [spec for spec in ((s.get("spec") or {}) for s in slices) if spec.get("nodeName")]
    newest: dict[tuple[str, str], int] = {}
    for spec in local:
        pool = spec.get("pool") or {}
        key = (spec.get("driver", ""), pool.get("name", ""))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation", 0)))
    devices: dict[str, list[Device]] = defaultdict(list)
    for spec in local:
        driver, pool = spec.get("driver", ""), spec.get("pool") or {}
        if int(pool.get("generation", 0)) != newest[(driver, pool.get("name", ""))]:
            continue
        devices[spec["nodeName"]].extend(Device(driver, pool.get("name", ""), device.get("name", ""),
                                                attributes(driver, device.get("attributes") or {}))
                                         for device in spec.get("devices") or ())
    return dict(devices)


def class_devices(devices: Mapping[str, Iterable[Device]], selector: ClassSelector) -> dict[str, set[DeviceId]]:
    """The devices of each node that the class selects (nodes with none are left out)."""
    selected = {node: {device.id for device in on_node if selector.selects(device)}
                for node, on_node in devices.items()}
    return {node: ids for node, ids in selected.items() if ids}


# -- ResourceClaims -------------------------------------------------------------------------
def claim_devices(claim: Mapping) -> tuple[DeviceId, ...]:
    """The devices allocated to a claim that are taken from others (not for admin access);
    none for a job's own claim, which its pod accounts for."""
    if names.is_job_claim((claim.get("metadata") or {}).get("labels") or {}):
        return ()
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or ()
    return tuple((r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in results
                 if not r.get("adminAccess"))


def allocated_devices(claims: Iterable[Mapping]) -> set[DeviceId]:
    return {device for claim in claims for device in claim_devices(claim)}


def taken_per_node(selected: Mapping[str, set[DeviceId]], allocated: Iterable[DeviceId]) -> Counter:
    """How many of each node's selected devices are allocated."""
    node_of = {device: node for node, ids in selected.items() for device in ids}
    return Counter(node_of[device] for device in set(allocated) if device in node_of)


def free_devices(slices: Iterable[Mapping], claims: Iterable[Mapping], selector: ClassSelector) -> dict[str, int]:
    """Devices of the class free per node: in its slices, allocated to no claim but the jobs'."""
    selected = class_devices(node_devices(slices), selector)
    taken = taken_per_node(selected, allocated_devices(claims))
    return {node: len(ids) - taken[node] for node, ids in selected.items()}


def pod_devices(labels: Mapping[str, str]) -> int:
    """The devices a booking's claim asks for, as the pod says (0 for any other pod)."""
    text = labels.get(names.LABEL_DRA_GPUS, "")
    return int(text) if text.isdigit() and names.is_booking(labels) else 0
