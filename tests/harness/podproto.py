"""Pods and pod lists in Kubernetes' protobuf encoding, written as the API server writes
them: field numbers of core/v1's generated.proto, empty strings written, fields the
inventory never reads around the ones it does (``kube/podwire`` reads them back)."""

from distributetrain.kube.podwire import REQUIRED


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def text(number: int, value: str) -> bytes:
    return field(number, value.encode())


def number(field_number: int, value: int) -> bytes:
    return varint(field_number << 3) + varint(value)


def fixed64(field_number: int) -> bytes:
    return varint(field_number << 3 | 1) + b"\x01" * 8


def entries(field_number: int, mapping: dict, quantity: bool) -> bytes:
    return b"".join(field(field_number, text(1, key) + (field(2, text(1, value)) if quantity else text(2, value)))
                    for key, value in mapping.items())


def resources(r: dict) -> bytes:
    return entries(1, r.get("limits") or {}, True) + entries(2, r.get("requests") or {}, True)


def container(c: dict) -> bytes:
    return (text(1, "c") + text(2, "image:1") + field(8, resources(c.get("resources") or {}))
            + number(14, 1) + (text(24, c["restartPolicy"]) if "restartPolicy" in c else b""))


def requirement(r: dict) -> bytes:
    return text(1, r["key"]) + text(2, r["operator"]) + b"".join(text(3, v) for v in r["values"])


def affinity(a: dict) -> bytes:
    if "nodeAffinity" not in a:
        return field(2, b"")  # a pod affinity only
    terms = a["nodeAffinity"].get(REQUIRED, {}).get("nodeSelectorTerms", [])
    selector = b"".join(field(1, b"".join(field(1, requirement(r)) for r in t["matchExpressions"])
                              + b"".join(field(2, requirement(r)) for r in t["matchFields"])) for t in terms)
    return field(1, field(1, selector) + field(2, b"preferred"))


def pod(p: dict) -> bytes:
    m, s = p["metadata"], p["spec"]
    metadata = (text(1, m.get("name", "")) + text(3, m.get("namespace", "")) + text(5, m.get("uid", ""))
                + number(7, 3) + entries(11, m.get("labels") or {}, False) + field(17, b"\x0a\x07manager" * 20))
    spec = (b"".join(field(2, container(c)) for c in s["containers"]) + text(3, "Always") + number(4, 30)
            + text(10, s.get("nodeName", "")) + (field(18, affinity(s["affinity"])) if "affinity" in s else b"")
            + b"".join(field(20, container(c)) for c in s.get("initContainers") or ())
            + entries(32, s.get("overhead") or {}, True)
            + (field(40, resources(s["resources"])) if "resources" in s else b"") + fixed64(99))
    status = text(1, p["status"].get("phase", "")) + field(2, text(1, "Ready") + text(2, "True")) + text(7, "10.0.0.1")
    return field(1, metadata) + field(2, spec) + field(3, status)


ENVELOPE_TRAILER = text(3, "") + text(4, "")  # the runtime.Unknown's content encoding and type, empty


def pod_list(pods: list[dict], version: str = "42", token: str = "") -> bytes:
    listed = field(1, text(2, version) + text(3, token)) + b"".join(field(2, pod(p)) for p in pods)
    return b"k8s\x00" + field(1, text(1, "v1") + text(2, "PodList")) + field(2, listed) + ENVELOPE_TRAILER


def status(body: dict) -> bytes:
    """A meta/v1 Status in protobuf, as the API server writes an error to a client that
    asked for protobuf (``body`` as its JSON reads)."""
    details = body.get("details")
    encoded = field(1, b"".join(text(n, body["metadata"][k]) for n, k in ((2, "resourceVersion"), (3, "continue"))
                                if body.get("metadata", {}).get(k)))
    encoded += text(2, body.get("status", "")) + text(3, body.get("message", "")) + text(4, body.get("reason", ""))
    if details is not None:
        causes = b"".join(field(4, b"".join(text(n, c[k]) for n, k in ((1, "reason"), (2, "message"), (3, "field"))
                                            if k in c)) for c in details.get("causes") or ())
        named = ((1, "name"), (2, "group"), (3, "kind"), (6, "uid"))
        encoded += field(5, b"".join(text(n, details[k]) for n, k in named if k in details) + causes
                         + (number(5, details["retryAfterSeconds"]) if "retryAfterSeconds" in details else b""))
    encoded += number(6, body.get("code", 0) & (1 << 64) - 1)
    return b"k8s\x00" + field(1, text(1, "v1") + text(2, "Status")) + field(2, encoded) + ENVELOPE_TRAILER
