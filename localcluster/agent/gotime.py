"""Durations as Go prints a time.Duration, for messages that read like the kubelet's.

Tools and people match these messages ("Successfully pulled image ... in 5.002s",
"pleg was last seen active 3m5s ago"), so they follow Go's format exactly.
"""

from __future__ import annotations

NS_PER_S = 10**9
_SMALL_UNITS = (("ms", 10**6), ("µs", 10**3), ("ns", 1))


def go_duration(seconds: float) -> str:
    """1h2m3.5s, 3m5s, 5.002s, 120ms, 0s: Go's Duration.String()."""
    total_ns = round(seconds * NS_PER_S)
    sign = "-" if total_ns < 0 else ""
    total_ns = abs(total_ns)
    if total_ns == 0:
        return "0s"
    if total_ns < NS_PER_S:
        unit, size = next((unit, size) for unit, size in _SMALL_UNITS if total_ns >= size)
        return f"{sign}{_decimal(total_ns, size)}{unit}"
    hours, rest = divmod(total_ns, 3600 * NS_PER_S)
    minutes, rest = divmod(rest, 60 * NS_PER_S)
    text = f"{_decimal(rest, NS_PER_S)}s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _decimal(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")
