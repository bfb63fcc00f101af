"""The shell and Python that job pods run, kept as files so they read (and lint) as code.

``worker.sh`` and ``chief.sh`` become the containers' ``sh -c`` scripts; ``discover.py``
is what an elastic chief's discovery script runs. ``@NAME@`` placeholders are filled by
``manifests`` from the same constants the pod specs use. Each file's leading comment
block explains it here and is left out of the pods.
"""

from __future__ import annotations

import re
from importlib import resources

PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def load(name: str, **values: str) -> str:
    """The script ``name`` without its leading comments, every ``@KEY@`` replaced by its value."""
    lines = resources.files(__package__).joinpath(name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#") and not lines[0].startswith("#!"):
        lines.pop(0)

    def fill(match: re.Match) -> str:
        if match.group(1) not in values:
            raise KeyError(f"{name}: no value for @{match.group(1)}@")
        return values[match.group(1)]

    return PLACEHOLDER.sub(fill, "".join(lines))
