"""Kubernetes resource quantities ("500m", "2Gi", "1e3") as exact fractions.

The downward API exposes a container's requests and limits divided by a
divisor and rounded up, as the kubelet does; exact arithmetic keeps "1" CPU
with divisor "1m" at exactly 1000.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIXES = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY_RE = re.compile(r"^([+-]?[0-9]*\.?[0-9]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity; raises ValueError with the accepted format."""
    match = _QUANTITY_RE.match(str(text).strip())
    if not match:
        raise ValueError(f"bad quantity {text!r}: expected a number with an optional suffix like 500m, 2Gi or 1e3")
    number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent:
        value *= Fraction(10) ** int(exponent[1:])
    return value * _SUFFIXES[suffix or ""]


def divide_round_up(quantity: Fraction, divisor: Fraction) -> int:
    """What the downward API shows for a resource: ceil(quantity / divisor)."""
    return math.ceil(quantity / divisor)
