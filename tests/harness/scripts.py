"""The project's scripts (scripts/*.py: not a package, some named with dashes) imported
as modules, for unit tests of their pure parts."""

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(file_name: str) -> ModuleType:
    """scripts/``file_name``, imported under its stem."""
    spec = importlib.util.spec_from_file_location(Path(file_name).stem.replace("-", "_"), SCRIPTS / file_name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
