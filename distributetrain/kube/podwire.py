"""A pod as the inventory reads it, straight from the API server's protobuf encoding.

An inventory folds every pod of the cluster (150,000 on a large one), and nearly all of
each pod is of no use to it: managed fields, probes, env, volumes, statuses. As JSON, a
pod is parsed whole into dicts (50 µs); in Kubernetes' protobuf encoding every field is
length-prefixed, so the fields the inventory reads are picked out and the rest is
skipped unread (some 10 µs, and a third fewer bytes on the wire). What is picked out is
what ``inventory`` and ``podrequests`` read, in the shape of the JSON object: ``slim``
cuts a JSON pod to exactly that, so both encodings give the same dicts (tests compare
them). The list is read as it arrives (``read_pod_list``), a chunk at a time, so a list
of any length takes the manager the same memory.

The encoding (``protowire``): ``k8s\\0`` then a ``runtime.Unknown`` whose field 2 is the
PodList's own protobuf; field numbers are those of k8s.io/api core/v1 and apimachinery
meta/v1 ``generated.proto``, stable across releases (protobuf compatibility).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping

from distributetrain.kube.protowire import LENGTH_DELIMITED, PROTOBUF, Stream, WireError
from distributetrain.kube.protowire import fields as _fields
from distributetrain.kube.protowire import last as _last
from distributetrain.kube.protowire import text as _text

ACCEPT = f"{PROTOBUF}, application/json"  # protobuf if the server has it (any kube-apiserver does)

# Field numbers (generated.proto). A message's fields read here; all others are skipped.
# Strings are on the wire even when empty; an empty one is left out, as JSON leaves it.
LIST_META, LIST_ITEMS = 1, 2
LIST_RESOURCE_VERSION, LIST_CONTINUE = 2, 3
POD_METADATA, POD_SPEC, POD_STATUS = 1, 2, 3
META_NAME, META_NAMESPACE, META_UID, META_LABELS = 1, 3, 5, 11
SPEC_CONTAINERS, SPEC_NODE_NAME, SPEC_AFFINITY, SPEC_INIT_CONTAINERS, SPEC_OVERHEAD, SPEC_RESOURCES = 2, 10, 18, 20, 32, 40
CONTAINER_RESOURCES, CONTAINER_RESTART_POLICY = 8, 24
RESOURCES_LIMITS, RESOURCES_REQUESTS = 1, 2
STATUS_PHASE = 1
AFFINITY_NODE, NODE_AFFINITY_REQUIRED, SELECTOR_TERMS = 1, 1, 1
TERM_EXPRESSIONS, TERM_FIELDS = 1, 2
REQUIREMENT_KEY, REQUIREMENT_OPERATOR, REQUIREMENT_VALUES = 1, 2, 3
MAP_KEY, MAP_VALUE, QUANTITY_STRING = 1, 2, 1
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _tags(*numbers: int) -> frozenset[int]:
    return frozenset(number << 3 | LENGTH_DELIMITED for number in numbers)


# What each message is read for (``_fields`` lists only these of its fields).
METADATA_READ = _tags(META_NAME, META_NAMESPACE, META_UID, META_LABELS)
SPEC_READ = _tags(SPEC_CONTAINERS, SPEC_NODE_NAME, SPEC_AFFINITY, SPEC_INIT_CONTAINERS, SPEC_OVERHEAD, SPEC_RESOURCES)
CONTAINER_READ = _tags(CONTAINER_RESOURCES, CONTAINER_RESTART_POLICY)
RESOURCES_READ = _tags(RESOURCES_LIMITS, RESOURCES_REQUESTS)
STATUS_READ = _tags(STATUS_PHASE)
MEMO_SIZE = 4096  # distinct label pairs, quantities and resource sets remembered (a few MiB at most)


def read_pod_list(content_type: str, chunks: Iterable[bytes], visit: Callable[[dict], None]) -> tuple[str, str]:
    """Each pod of a pod list, cut as ``slim`` cuts it, to ``visit``, decoded as the list's
    bytes arrive (``chunks``, in any sizes), so the manager holds one chunk, not the list;
    returns the list's resourceVersion and continue token (empty but on a page before the
    last). A server that answers JSON (a proxy, an older or a fake one) is read whole, as
    JSON, and cut the same way."""
    if not content_type.startswith(PROTOBUF):
        page = json.loads(b"".join(chunks))
        for pod in page.get("items") or ():
            visit(slim(pod))
        metadata = page.get("metadata") or {}
        return metadata.get("resourceVersion", ""), metadata.get("continue", "")
    stream = Stream(iter(chunks))
    size = stream.object_size()
    end = stream.offset + size
    version = token = ""
    while stream.offset < end:
        number, size = stream.header()
        start, stop = stream.body(size)
        if number == LIST_ITEMS:
            visit(_pod(stream.buffer, start, stop))
        elif number == LIST_META:
            for meta, a, b in _fields(stream.buffer, start, stop):
                if meta == LIST_RESOURCE_VERSION:
                    version = _text(stream.buffer, a, b)
                elif meta == LIST_CONTINUE:
                    token = _text(stream.buffer, a, b)
    if stream.offset != end:
        raise WireError("an item runs past its list")
    return version, token


def slim(pod: Mapping) -> dict:
    """A JSON pod cut to what ``read_pod_list`` reads of each pod."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    cut_spec: dict = {"containers": [_slim_container(c) for c in spec.get("containers") or ()]}
    if spec.get("initContainers"):
        cut_spec["initContainers"] = [_slim_container(c) for c in spec["initContainers"]]
    for key in ("nodeName", "overhead"):
        if spec.get(key):
            cut_spec[key] = dict(spec[key]) if key == "overhead" else spec[key]
    if resources := _slim_resources(spec.get("resources") or {}):
        cut_spec["resources"] = resources
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity")
    if node_affinity is not None:
        terms = (node_affinity.get(REQUIRED) or {}).get("nodeSelectorTerms") or ()
        cut_spec["affinity"] = _affinity([
            ([_requirement(r) for r in t.get("matchExpressions") or ()],
             [_requirement(r) for r in t.get("matchFields") or ()]) for t in terms])
    cut = {"metadata": {key: metadata[key] for key in ("name", "namespace", "uid") if metadata.get(key)},
           "spec": cut_spec, "status": {}}
    cut["metadata"]["labels"] = dict(metadata.get("labels") or {})
    if phase := (pod.get("status") or {}).get("phase"):
        cut["status"]["phase"] = phase
    return cut


def _slim_container(container: Mapping) -> dict:
    cut = {}
    if resources := _slim_resources(container.get("resources") or {}):
        cut["resources"] = resources
    if container.get("restartPolicy"):
        cut["restartPolicy"] = container["restartPolicy"]
    return cut


def _slim_resources(resources: Mapping) -> dict:
    return {kind: dict(resources[kind]) for kind in ("limits", "requests") if resources.get(kind)}


def _requirement(requirement: Mapping) -> dict:
    return {"key": requirement.get("key", ""), "operator": requirement.get("operator", ""),
            "values": list(requirement.get("values") or ())}


def _affinity(terms: list[tuple[list[dict], list[dict]]]) -> dict:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": expressions, "matchFields": fields} for expressions, fields in terms]}}}


# -- the pod, field by field ------------------------------------------------------------
def _entry(buf: bytes, start: int, end: int, quantity: bool) -> tuple[str, str]:
    """A map entry: string key, and a string value or a Quantity's string."""
    key = value = ""
    for number, a, b in _fields(buf, start, end):
        if number == MAP_KEY:
            key = _text(buf, a, b)
        elif number == MAP_VALUE:
            value = _text(buf, *(_last(buf, a, b, QUANTITY_STRING) or (a, a))) if quantity else _text(buf, a, b)
    return key, value


# A cluster's pods repeat themselves: the replicas of a workload carry the same labels and
# the same resources, byte for byte. Those are decoded once per distinct bytes, and the
# pods share what was decoded: read it, never change it. (Not whole containers: each
# carries its pod's own service-account token mount, named with a random suffix.)
@functools.lru_cache(maxsize=MEMO_SIZE)
def _same_entry(raw: bytes, quantity: bool) -> tuple[str, str]:
    return _entry(raw, 0, len(raw), quantity)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _same_resources(raw: bytes) -> dict:
    """A ResourceRequirements message: its limits and requests that are not empty."""
    resources: dict = {}
    for number, a, b in _fields(raw, 0, len(raw), RESOURCES_READ):
        key, value = _entry(raw, a, b, quantity=True)
        resources.setdefault(RESOURCE_KINDS[number], {})[key] = value
    return resources


RESOURCE_KINDS = {RESOURCES_LIMITS: "limits", RESOURCES_REQUESTS: "requests"}


def _container(buf: bytes, start: int, end: int) -> dict:
    container: dict = {}
    for number, a, b in _fields(buf, start, end, CONTAINER_READ):
        if number == CONTAINER_RESOURCES:
            if resources := _same_resources(buf[a:b]):
                container["resources"] = resources
        elif number == CONTAINER_RESTART_POLICY and b > a:
            container["restartPolicy"] = _text(buf, a, b)
    return container


def _requirement_of(buf: bytes, start: int, end: int) -> dict:
    requirement: dict = {"key": "", "operator": "", "values": []}
    for number, a, b in _fields(buf, start, end):
        if number == REQUIREMENT_KEY:
            requirement["key"] = _text(buf, a, b)
        elif number == REQUIREMENT_OPERATOR:
            requirement["operator"] = _text(buf, a, b)
        elif number == REQUIREMENT_VALUES:
            requirement["values"].append(_text(buf, a, b))
    return requirement


def _node_affinity(buf: bytes, start: int, end: int) -> dict:
    terms = []
    for _, a, b in _nested(buf, start, end, NODE_AFFINITY_REQUIRED, SELECTOR_TERMS):
        expressions, fields = [], []
        for number, c, d in _fields(buf, a, b):
            if number in (TERM_EXPRESSIONS, TERM_FIELDS):
                (expressions if number == TERM_EXPRESSIONS else fields).append(_requirement_of(buf, c, d))
        terms.append((expressions, fields))
    return _affinity(terms)


def _nested(buf: bytes, start: int, end: int, *path: int) -> Iterator[tuple[int, int, int]]:
    """Every field at ``path`` (field numbers, outermost first) inside buf[start:end]."""
    for number, a, b in _fields(buf, start, end):
        if number == path[0]:
            yield from (_nested(buf, a, b, *path[1:]) if len(path) > 1 else ((number, a, b),))


def _spec(buf: bytes, start: int, end: int) -> dict:
    spec: dict = {"containers": []}
    for number, a, b in _fields(buf, start, end, SPEC_READ):
        if number == SPEC_CONTAINERS:
            spec["containers"].append(_container(buf, a, b))
        elif number == SPEC_INIT_CONTAINERS:
            spec.setdefault("initContainers", []).append(_container(buf, a, b))
        elif number == SPEC_NODE_NAME and b > a:
            spec["nodeName"] = _text(buf, a, b)
        elif number == SPEC_AFFINITY:
            for _, c, d in _nested(buf, a, b, AFFINITY_NODE):
                spec["affinity"] = _node_affinity(buf, c, d)
        elif number == SPEC_OVERHEAD:
            key, value = _entry(buf, a, b, quantity=True)
            spec.setdefault("overhead", {})[key] = value
        elif number == SPEC_RESOURCES:
            if resources := _same_resources(buf[a:b]):
                spec["resources"] = resources
    return spec


def _metadata(buf: bytes, start: int, end: int) -> dict:
    metadata: dict = {}
    labels: dict = {}
    for number, a, b in _fields(buf, start, end, METADATA_READ):
        if number == META_LABELS:
            key, value = _same_entry(buf[a:b], False)
            labels[key] = value
        elif number == META_NAME and b > a:
            metadata["name"] = _text(buf, a, b)
        elif number == META_NAMESPACE and b > a:
            metadata["namespace"] = _text(buf, a, b)
        elif number == META_UID and b > a:
            metadata["uid"] = _text(buf, a, b)
    metadata["labels"] = labels
    return metadata


def _pod(buf: bytes, start: int, end: int) -> dict:
    pod: dict = {"metadata": {"labels": {}}, "spec": {"containers": []}, "status": {}}
    for number, a, b in _fields(buf, start, end):
        if number == POD_METADATA:
            pod["metadata"] = _metadata(buf, a, b)
        elif number == POD_SPEC:
            pod["spec"] = _spec(buf, a, b)
        elif number == POD_STATUS:
            phases = _fields(buf, a, b, STATUS_READ)
            if phases and phases[-1][2] > phases[-1][1]:  # the last one counts, as in protobuf
                pod["status"]["phase"] = _text(buf, *phases[-1][1:])
    return pod
