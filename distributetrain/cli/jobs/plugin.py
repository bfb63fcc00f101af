"""`kubectl distributetrain …`: the CLI installed a second time, as a kubectl plugin.

kubectl runs any executable named ``kubectl-NAME`` on PATH for ``kubectl NAME``, so the
package installs its one ``main`` twice (pyproject.toml: ``distributetrain`` and
``kubectl-distributetrain``). Help and error hints then name the command the user typed.
"""

from __future__ import annotations

import os
import sys

PROGRAM = "distributetrain"
KUBECTL_PLUGIN_EXECUTABLE = f"kubectl-{PROGRAM}"
KUBECTL_PROGRAM = f"kubectl {PROGRAM}"


def program_name(argv0: str | None = None) -> str:
    """"kubectl distributetrain" when run as the plugin (kubectl passes the executable's path
    as argv[0]), else "distributetrain"."""
    invoked = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return KUBECTL_PROGRAM if invoked == KUBECTL_PLUGIN_EXECUTABLE else PROGRAM
