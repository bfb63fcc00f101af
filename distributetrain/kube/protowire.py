"""Kubernetes' protobuf encoding, read by hand: the envelope, the fields, and the Status an
error comes back in.

An object in protobuf is ``k8s\\0`` then a ``runtime.Unknown`` whose field 2 is the
object's own message (apimachinery ``runtime/generated.proto``); every field read here is
length-delimited, and a message's fields are picked out by number and the rest skipped
(``podwire`` reads pods so). A request that asks for protobuf gets its error in protobuf
too: a ``meta/v1`` ``Status`` (``status``), decoded here whole, as its JSON reads, so an
error keeps its reason and message ("pods is forbidden: User ... cannot list ..."), never
only "HTTP 403 Forbidden". Field numbers are those of ``generated.proto``, stable across
releases (protobuf compatibility).
"""

from __future__ import annotations

from collections.abc import Iterator

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
LENGTH_DELIMITED, VARINT, FIXED64, FIXED32 = 2, 0, 1, 5
UNKNOWN_TYPE_META, UNKNOWN_RAW = 1, 2
TYPE_META_API_VERSION, TYPE_META_KIND = 1, 2
# meta/v1 Status, StatusDetails, StatusCause, ListMeta.
STATUS_METADATA, STATUS_STATUS, STATUS_MESSAGE, STATUS_REASON, STATUS_DETAILS, STATUS_CODE = 1, 2, 3, 4, 5, 6
DETAILS_FIELDS = {1: "name", 2: "group", 3: "kind", 6: "uid"}
DETAILS_CAUSES, DETAILS_RETRY_AFTER = 4, 5
CAUSE_FIELDS = {1: "reason", 2: "message", 3: "field"}
LIST_META_FIELDS = {1: "selfLink", 2: "resourceVersion", 3: "continue"}


class WireError(ValueError):
    """Bytes that are not the protobuf message they should be."""


class Stream:
    """A protobuf message arriving in chunks, read front to back: ``buffer`` holds what
    has arrived and is not yet consumed, from ``position`` on."""

    HEADER_BYTES = 20  # a field's key and length: two varints

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self.buffer = b""
        self.position = 0
        self._before = 0  # bytes of the stream before ``buffer``

    @property
    def offset(self) -> int:
        return self._before + self.position

    def _fill(self, size: int) -> bool:
        """``size`` bytes past ``position`` in ``buffer``, unless the stream ends first."""
        while len(self.buffer) - self.position < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                return False
            self._before += self.position
            self.buffer = self.buffer[self.position:] + chunk
            self.position = 0
        return True

    def expect(self, prefix: bytes) -> None:
        if not self._fill(len(prefix)) or not self.buffer.startswith(prefix, self.position):
            raise WireError("no protobuf envelope (k8s\\0)")
        self.position += len(prefix)

    def header(self) -> tuple[int, int]:
        """The next field's number and length (every field read here is length-delimited)."""
        self._fill(self.HEADER_BYTES)  # fewer only at the stream's end
        try:
            key, i = varint(self.buffer, self.position)
            size, i = varint(self.buffer, i)
        except IndexError:
            raise WireError("truncated") from None
        if key & 7 != LENGTH_DELIMITED:
            raise WireError(f"unsupported wire type {key & 7}")
        self.position = i
        return key >> 3, size

    def body(self, size: int) -> tuple[int, int]:
        """Where the field's bytes lie in ``buffer`` (valid until the next ``header``)."""
        if not self._fill(size):
            raise WireError("truncated")
        start = self.position
        self.position += size
        return start, self.position

    def object_size(self) -> int:
        """Past the envelope (``k8s\\0``, the Unknown's type): the object's length; its
        bytes follow."""
        self.expect(MAGIC)
        while True:
            number, size = self.header()
            if number == UNKNOWN_RAW:
                return size
            self.body(size)  # the envelope's type, before the object


def varint(buf: bytes, i: int) -> tuple[int, int]:
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


def fields(buf: bytes, i: int, end: int, wanted: frozenset[int] | None = None) -> list[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in buf[i:end] (of those
    whose tags are ``wanted``, if given); fields of other wire types (numbers, booleans)
    are skipped. Keys and lengths of one or two bytes (nearly all) are read inline: this
    loop runs some 40 times a pod of an inventory."""
    found = []
    try:
        while i < end:
            key = buf[i]
            i += 1
            if key >= 0x80:  # field numbers from 16: two bytes
                if buf[i] < 0x80:
                    key, i = key & 0x7F | buf[i] << 7, i + 1
                else:
                    key, i = varint(buf, i - 1)
            wire = key & 7
            if wire == LENGTH_DELIMITED:
                size = buf[i]
                i += 1
                if size >= 0x80:  # 128 bytes to 16 KiB: two bytes
                    if buf[i] < 0x80:
                        size, i = size & 0x7F | buf[i] << 7, i + 1
                    else:
                        size, i = varint(buf, i - 1)
                if i + size > end:
                    raise WireError("a field runs past its message")
                if wanted is None or key in wanted:
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


def last(buf: bytes, i: int, end: int, wanted: int) -> tuple[int, int] | None:
    found = None
    for number, start, stop in fields(buf, i, end):
        if number == wanted:
            found = (start, stop)
    return found


def text(buf: bytes, start: int, end: int) -> str:
    return buf[start:end].decode()


# -- a Status ---------------------------------------------------------------------------
def status(data: bytes) -> dict | None:
    """An error's body in protobuf, as its JSON reads (``kind``, ``apiVersion``,
    ``metadata``, ``status``, ``message``, ``reason``, ``details``, ``code``; empty fields
    left out as JSON leaves them); None if ``data`` is not a protobuf Status."""
    if not data.startswith(MAGIC):
        return None
    try:
        envelope = _message(data, len(MAGIC), len(data))
        type_meta = _strings(data, *envelope.get(UNKNOWN_TYPE_META, [(0, 0)])[-1],
                             {TYPE_META_API_VERSION: "apiVersion", TYPE_META_KIND: "kind"})
        if type_meta.get("kind") != "Status" or UNKNOWN_RAW not in envelope:
            return None
        return {**type_meta, **_status(data, *envelope[UNKNOWN_RAW][-1])}
    except (WireError, IndexError, UnicodeDecodeError):
        return None


def _status(buf: bytes, start: int, end: int) -> dict:
    found = _message(buf, start, end)
    decoded: dict = {"metadata": _strings(buf, *found.get(STATUS_METADATA, [(start, start)])[-1], LIST_META_FIELDS)}
    decoded |= _strings(buf, start, end, {STATUS_STATUS: "status", STATUS_MESSAGE: "message", STATUS_REASON: "reason"})
    if STATUS_DETAILS in found:
        a, b = found[STATUS_DETAILS][-1]
        details = _message(buf, a, b)
        decoded["details"] = _strings(buf, a, b, DETAILS_FIELDS)
        if causes := [_strings(buf, c, d, CAUSE_FIELDS) for c, d in details.get(DETAILS_CAUSES, ())]:
            decoded["details"]["causes"] = causes
        if retry := _number(details, DETAILS_RETRY_AFTER):
            decoded["details"]["retryAfterSeconds"] = retry
    if code := _number(found, STATUS_CODE):
        decoded["code"] = code
    return decoded


def _message(buf: bytes, i: int, end: int) -> dict[int, list]:
    """Every field of buf[i:end] by number: (start, end) of a length-delimited one, the
    value of a varint; in order."""
    found: dict[int, list] = {}
    while i < end:
        key, i = varint(buf, i)
        if key & 7 == VARINT:
            value, i = varint(buf, i)
            found.setdefault(key >> 3, []).append(value)
        elif key & 7 == LENGTH_DELIMITED:
            size, i = varint(buf, i)
            if i + size > end:
                raise WireError("a field runs past its message")
            found.setdefault(key >> 3, []).append((i, i + size))
            i += size
        else:
            raise WireError(f"unsupported wire type {key & 7} in a Status")
    return found


def _strings(buf: bytes, start: int, end: int, names: dict[int, str]) -> dict[str, str]:
    """The string fields ``names`` of buf[start:end] that are not empty, by their JSON names."""
    found = _message(buf, start, end)
    return {name: text(buf, *found[number][-1]) for number, name in names.items()
            if number in found and found[number][-1][1] > found[number][-1][0]}


def _number(found: dict[int, list], number: int) -> int:
    """An int32 field's value (negative ones come as ten-byte varints)."""
    value = found.get(number, [0])[-1]
    return value - (1 << 64) if value >= 1 << 63 else value
