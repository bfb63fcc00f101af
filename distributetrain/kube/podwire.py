"""A pod as the inventory reads it, straight from the API server's protobuf encoding.

An inventory folds every pod of the cluster (150,000 on a large one), and nearly all of
each pod is of no use to it: managed fields, probes, env, volumes, statuses. As JSON, a
pod is parsed whole into dicts (50 µs); in Kubernetes' protobuf encoding every field is
length-prefixed, so the fields the inventory reads are picked out and the rest is
skipped unread (20 µs, and a third fewer bytes on the wire). What is picked out is what
``inventory`` and ``podrequests`` read, in the shape of the JSON object: ``slim`` cuts a
JSON pod to exactly that, so both encodings give the same dicts (tests compare them).

The encoding: ``k8s\\0`` then a ``runtime.Unknown`` whose field 2 is the PodList's own
protobuf; field numbers are those of k8s.io/api core/v1 and apimachinery meta/v1
``generated.proto``, stable across releases (protobuf compatibility).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

PROTOBUF = "application/vnd.kubernetes.protobuf"
ACCEPT = f"{PROTOBUF}, application/json"  # protobuf if the server has it (any kube-apiserver does)
MAGIC = b"k8s\x00"
LENGTH_DELIMITED, VARINT, FIXED64, FIXED32 = 2, 0, 1, 5

# Field numbers (generated.proto). A message's fields read here; all others are skipped.
# Strings are on the wire even when empty; an empty one is left out, as JSON leaves it.
UNKNOWN_RAW = 2
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


class WireError(ValueError):
    """Bytes that are not a protobuf PodList."""


def read_page(content_type: str, body: bytes) -> tuple[list[dict], str, str]:
    """A page of a pod list as the server sent it (``ACCEPT``): its pods cut by ``slim``,
    its resourceVersion and continue token. A server that answers JSON (a proxy, an
    older or a fake one) is read as JSON and cut the same way."""
    if content_type.startswith(PROTOBUF):
        return decode_pod_list(body)
    page = json.loads(body)
    metadata = page.get("metadata") or {}
    return ([slim(pod) for pod in page.get("items") or ()], metadata.get("resourceVersion", ""),
            metadata.get("continue") or "")


def next_token(content_type: str, body: bytes) -> str:
    """A page's continue token, read before its pods (protobuf: the list's metadata comes first)."""
    if not content_type.startswith(PROTOBUF):
        return json.loads(body).get("metadata", {}).get("continue") or ""
    for number, start, end in _fields(body, *_raw(body)):
        if number == LIST_META:
            token = _last(body, start, end, LIST_CONTINUE)
            return _text(body, *token) if token else ""
    return ""


def decode_pod_list(body: bytes) -> tuple[list[dict], str, str]:
    """A protobuf PodList: its pods cut as ``slim`` cuts them, its resourceVersion and
    continue token."""
    items, version, token = [], "", ""
    for number, start, end in _fields(body, *_raw(body)):
        if number == LIST_ITEMS:
            items.append(_pod(body, start, end))
        elif number == LIST_META:
            for meta, a, b in _fields(body, start, end):
                if meta == LIST_RESOURCE_VERSION:
                    version = _text(body, a, b)
                elif meta == LIST_CONTINUE:
                    token = _text(body, a, b)
    return items, version, token


def slim(pod: Mapping) -> dict:
    """A JSON pod cut to what ``decode_pod_list`` reads of each pod."""
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


# -- the wire ---------------------------------------------------------------------------
def _raw(body: bytes) -> tuple[int, int]:
    """Where the object lies in the envelope (``k8s\\0`` then a runtime.Unknown)."""
    if not body.startswith(MAGIC):
        raise WireError("no protobuf envelope (k8s\\0)")
    raw = _last(body, len(MAGIC), len(body), UNKNOWN_RAW)
    if raw is None:
        raise WireError("an envelope without an object")
    return raw


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    byte = buf[i]
    if byte < 0x80:
        return byte, i + 1
    value, shift = byte & 0x7F, 7
    while True:
        i += 1
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7


def _fields(buf: bytes, i: int, end: int) -> list[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in buf[i:end]; fields of
    other wire types (numbers, booleans) are skipped: none is read here. Keys and lengths
    of one or two bytes (nearly all) are read inline: this loop runs some 60 times a pod."""
    found = []
    try:
        while i < end:
            key = buf[i]
            i += 1
            if key >= 0x80:  # field numbers from 16: two bytes
                if buf[i] < 0x80:
                    key, i = key & 0x7F | buf[i] << 7, i + 1
                else:
                    key, i = _varint(buf, i - 1)
            wire = key & 7
            if wire == LENGTH_DELIMITED:
                size = buf[i]
                i += 1
                if size >= 0x80:  # 128 bytes to 16 KiB: two bytes
                    if buf[i] < 0x80:
                        size, i = size & 0x7F | buf[i] << 7, i + 1
                    else:
                        size, i = _varint(buf, i - 1)
                if i + size > end:
                    raise WireError("a field runs past its message")
                found.append((key >> 3, i, i + size))
                i += size
            elif wire == VARINT:
                while buf[i] >= 0x80:
                    i += 1
                i += 1
            elif wire == FIXED64:
                i += 8
            elif wire == FIXED32:
                i += 4
            else:
                raise WireError(f"unsupported wire type {wire}")
    except IndexError:
        raise WireError("truncated") from None
    if i > end:
        raise WireError("a number runs past its message")
    return found


def _last(buf: bytes, i: int, end: int, wanted: int) -> tuple[int, int] | None:
    found = None
    for number, start, stop in _fields(buf, i, end):
        if number == wanted:
            found = (start, stop)
    return found


def _text(buf: bytes, start: int, end: int) -> str:
    return buf[start:end].decode()


def _entry(buf: bytes, start: int, end: int, quantity: bool) -> tuple[str, str]:
    """A map entry: string key, and a string value or a Quantity's string."""
    key = value = ""
    for number, a, b in _fields(buf, start, end):
        if number == MAP_KEY:
            key = _text(buf, a, b)
        elif number == MAP_VALUE:
            value = _text(buf, *(_last(buf, a, b, QUANTITY_STRING) or (a, a))) if quantity else _text(buf, a, b)
    return key, value


def _amounts(buf: bytes, start: int, end: int, into: dict, kinds: Mapping[int, str]) -> None:
    """Quantity maps of a message into ``into[kinds[number]]``, by their field numbers."""
    for number, a, b in _fields(buf, start, end):
        if number in kinds:
            key, value = _entry(buf, a, b, quantity=True)
            into.setdefault(kinds[number], {})[key] = value


RESOURCE_KINDS = {RESOURCES_LIMITS: "limits", RESOURCES_REQUESTS: "requests"}


def _container(buf: bytes, start: int, end: int) -> dict:
    container: dict = {}
    for number, a, b in _fields(buf, start, end):
        if number == CONTAINER_RESOURCES:
            resources: dict = {}
            _amounts(buf, a, b, resources, RESOURCE_KINDS)
            if resources:
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
    for number, a, b in _fields(buf, start, end):
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
            resources: dict = {}
            _amounts(buf, a, b, resources, RESOURCE_KINDS)
            if resources:
                spec["resources"] = resources
    return spec


def _metadata(buf: bytes, start: int, end: int) -> dict:
    metadata: dict = {}
    labels: dict = {}
    for number, a, b in _fields(buf, start, end):
        if number == META_LABELS:
            key, value = _entry(buf, a, b, quantity=False)
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
            phase = _last(buf, a, b, STATUS_PHASE)
            if phase and phase[1] > phase[0]:
                pod["status"]["phase"] = _text(buf, *phase)
    return pod
