"""The checkout's Python sources, parsed once per test process: the rule tests (imports,
sizes, the clock) each read every module of the package and of localcluster, several
times over; parsing was most of their time. Read only: the trees are shared."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    return _parsed(path, path.stat().st_mtime_ns)


def walked(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file, as ``ast.walk`` gives them."""
    return _walked(path, path.stat().st_mtime_ns)


@functools.cache
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@functools.cache
def _walked(path: Path, mtime_ns: int) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_parsed(path, mtime_ns)))
