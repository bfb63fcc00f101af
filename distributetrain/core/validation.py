"""Parsers for flag values. Each raises ``ValueError`` whose text shows the valid form;
the CLI prefixes the flag name, so every bad input is one line naming flag and form."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

from distributetrain.core import errors

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The Docker reference grammar (distribution/reference), without the digest-only form.
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_IMAGE_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_IMAGE_DOMAIN}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_PORT = 65535
FIRST_UNPRIVILEGED_PORT = 1024
# PodSecurity: the namespace label that sets the level it enforces, and the levels that
# forbid hostNetwork and hostPort (baseline and everything stricter).
POD_SECURITY_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS_WITHOUT_HOST_NETWORK = ("baseline", "restricted")


def host_network_refused_by(namespace_labels: dict[str, str]) -> str | None:
    """The PodSecurity level a namespace enforces if it forbids host networking, else None."""
    level = namespace_labels.get(POD_SECURITY_ENFORCE_LABEL, "")
    return level if level in LEVELS_WITHOUT_HOST_NETWORK else None


def checked(flag: str, parse: Callable, text: str):
    """``parse(text)``; its ValueError becomes a UsageError naming ``flag``."""
    try:
        return parse(text)
    except ValueError as e:
        raise errors.UsageError(flag, str(e)) from None


def positive_int(text: str) -> int:
    if not re.fullmatch(r"\+?\d+", text.strip()) or int(text) < 1:
        raise ValueError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


def non_negative_int(text: str) -> int:
    if not re.fullmatch(r"\+?\d+", text.strip()):
        raise ValueError(f"must be a whole number of at least 0, got {text!r}")
    return int(text)


def port(text: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or not 1 <= int(text) <= MAX_PORT:
        raise ValueError(f"must be a TCP port from 1 to {MAX_PORT}, got {text!r}")
    return int(text)


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def duration_s(text: str) -> float:
    """'90' or '90s', '500ms', '5m', '2h' -> seconds."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"must be a duration like 90s, 5m or 2h, got {text!r}")
    return float(match.group(1)) * _DURATION_UNITS_S[match.group(2)]


def format_duration(seconds: float) -> str:
    """The shortest text ``duration_s`` reads back as exactly ``seconds``: 300.0 -> '5m'."""
    if seconds == 0:
        return "0s"
    for unit in ("h", "m", "s", "ms"):
        count = seconds / _DURATION_UNITS_S[unit]
        if count == int(count) and float(int(count)) * _DURATION_UNITS_S[unit] == seconds:
            return f"{int(count)}{unit}"
    return f"{Decimal(repr(seconds)):f}s"  # repr is exact; Decimal writes it without an exponent


def whole_seconds(text: str) -> float:
    """A duration of whole seconds (a pod's grace period, a toleration's seconds)."""
    seconds = duration_s(text)
    if seconds != int(seconds):
        raise ValueError(f"must be a whole number of seconds, like 30s, 5m or 1h, got {text!r}")
    return seconds


def positive_duration_s(text: str) -> float:
    seconds = duration_s(text)
    if seconds < 1:
        raise ValueError(f"must be a duration of at least 1s, like 90s, 5m or 2h, got {text!r}")
    return seconds


def absolute_path(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"must be an absolute path inside the image, got {text!r}")
    return text


def dns_label(text: str, max_length: int = 63) -> str:
    return _dns_name(text, DNS1123_LABEL, max_length, "label", "lowercase letters, digits and '-'")


def dns_subdomain(text: str) -> str:
    """The name of most objects (a Secret, a PersistentVolumeClaim)."""
    return _dns_name(text, DNS1123_SUBDOMAIN, 253, "subdomain", "lowercase letters, digits, '-' and '.'")


def _dns_name(text: str, pattern: re.Pattern, max_length: int, kind: str, characters: str) -> str:
    if len(text) > max_length or not pattern.fullmatch(text):
        raise ValueError(
            f"must be a DNS-1123 {kind} ({characters}, starting and ending with a letter or digit, "
            f"at most {max_length} characters), got {text!r}"
        )
    return text


def image(text: str) -> str:
    if len(text) > 4096 or not IMAGE_REFERENCE.fullmatch(text):
        raise ValueError(f"must be an image reference like registry.example.com/team/train:1.0, got {text!r}")
    return text


def resource_name(text: str) -> str:
    if "/" not in text or not QUALIFIED_NAME.fullmatch(text):
        raise ValueError(f"must be an extended resource name like nvidia.com/gpu, got {text!r}")
    return text


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not QUALIFIED_NAME.fullmatch(key) or not LABEL_VALUE.fullmatch(value) or len(value) > 63:
        raise ValueError(f"must be a label selector term like key=value, got {text!r}")
    return key, value


def env_var(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not ENV_NAME.fullmatch(name):
        raise ValueError(f"must be NAME=value with a valid variable name, got {text!r}")
    return name, value


def pvc_mount(text: str) -> tuple[str, str, bool]:
    """CLAIM:/mount/path[:ro]"""
    parts = text.split(":")
    read_only = len(parts) == 3 and parts[2] == "ro"
    if len(parts) not in (2, 3) or (len(parts) == 3 and not read_only):
        raise ValueError(f"must be CLAIM:/absolute/path or CLAIM:/absolute/path:ro, got {text!r}")
    claim, path = parts[0], parts[1]
    if not DNS1123_SUBDOMAIN.fullmatch(claim) or len(claim) > 253 or not path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"must be CLAIM:/absolute/path or CLAIM:/absolute/path:ro, got {text!r}")
    return claim, path, read_only


def toleration(text: str) -> dict:
    """KEY[=VALUE][:EFFECT] -> a pod toleration (Equal, or Exists without a value)."""
    match = re.fullmatch(r"([^=:]+)(?:=([^:]*))?(?::(NoSchedule|PreferNoSchedule|NoExecute))?", text)
    if not match or not QUALIFIED_NAME.fullmatch(match.group(1)):
        raise ValueError(f"must be KEY[=VALUE][:NoSchedule|PreferNoSchedule|NoExecute], got {text!r}")
    key, value, effect = match.groups()
    result = {"key": key, "operator": "Equal" if value is not None else "Exists"}
    if value is not None:
        result["value"] = value
    if effect:
        result["effect"] = effect
    return result


def format_toleration(toleration: dict) -> str:
    """The text ``toleration`` reads back as ``toleration``."""
    text = toleration["key"]
    if toleration["operator"] == "Equal":
        text += f"={toleration['value']}"
    if toleration.get("effect"):
        text += f":{toleration['effect']}"
    return text
