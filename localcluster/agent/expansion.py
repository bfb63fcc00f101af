"""Kubernetes `$(VAR)` expansion, ported rule for rule from the kubelet.

Commands, args and env values in a pod spec may reference environment variables
as `$(NAME)`; `$$` escapes a dollar; a reference to an undefined name, or an
unterminated `$(`, is kept as written. Shell syntax (`$NAME`, `${NAME}`) is not
expanded. Users depend on these exact rules (the manager builds horovodrun
command lines), so this is a port of k8s.io/kubernetes
third_party/forked/golang/expansion, not an approximation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

_OPERATOR = "$"
_OPENER = "("
_CLOSER = ")"


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """Look a name up in each context in turn; unknown names stay `$(NAME)`."""

    def lookup(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"{_OPERATOR}{_OPENER}{name}{_CLOSER}"

    return lookup


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """Expand every `$(NAME)` in text through mapping."""
    out = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == _OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_variable_name(text[cursor + 1 :])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def _read_variable_name(text: str) -> tuple[str, bool, int]:
    """What follows a `$`: (text to emit or name, is a name, characters consumed)."""
    first = text[0]
    if first == _OPERATOR:
        return _OPERATOR, False, 1
    if first == _OPENER:
        closer = text.find(_CLOSER, 1)
        if closer != -1:
            return text[1:closer], True, closer + 1
        return _OPERATOR + _OPENER, False, 1
    return _OPERATOR + first, False, 1
