"""Kubernetes resource quantities for the job pods' cpu, memory and /dev/shm.

Parsed once at the edge into whole units (millicores, bytes), so the builders multiply
integers by a pod's GPU share, and formatted back in the shortest exact form
("8Gi", not "8589934592"; "1500m", not "1.5").
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from kubernetes.utils.quantity import parse_quantity

MIB = 2**20
GIB = 2**30
# Below this, neither sshd nor a Python rank starts; mostly it catches a forgotten unit
# ("16" is 16 bytes, not 16Gi).
MIN_MEMORY_BYTES = 64 * MIB
_SUFFIXES = (("Ti", 2**40), ("Gi", GIB), ("Mi", MIB), ("Ki", 2**10),
             ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def _decimal(text: str) -> Decimal | None:
    try:
        return parse_quantity(text.strip())
    except (ValueError, InvalidOperation, TypeError):
        return None


def same(a: str, b: str) -> bool:
    """Whether two quantities are equal ("1" and "1000m", "1Gi" and "1024Mi"); unparsable ones as text."""
    return a == b or (_decimal(a) is not None and _decimal(a) == _decimal(b))


def cpu_millis(text: str) -> int:
    """'4', '2.5' or '500m' -> millicores (4000, 2500, 500)."""
    value = _decimal(text)
    if value is None or value <= 0 or (value * 1000) % 1:
        raise ValueError(f"must be a CPU quantity like 4, 2.5 or 500m (more than 0, whole millicores), got {text!r}")
    return int(value * 1000)


def memory_bytes(text: str) -> int:
    """'16Gi', '512Mi' or '20G' -> bytes."""
    value = _decimal(text)
    if value is None or value % 1 or value < MIN_MEMORY_BYTES:
        raise ValueError(f"must be a memory quantity like 16Gi or 512Mi (whole bytes, at least 64Mi), got {text!r}")
    return int(value)


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(size_bytes: int) -> str:
    exact = [f"{size_bytes // factor}{suffix}" for suffix, factor in _SUFFIXES if size_bytes % factor == 0]
    return min([*exact, str(size_bytes)], key=len)
