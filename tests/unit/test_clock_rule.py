"""Time is read through the injected clock alone (``core/clock.py``), made once per process.

A parameter that defaulted to the real clock let a missed argument run a test on real
time, silently; a direct read of ``time`` did the same without any argument. So: no
``clock`` parameter or field has a default, no module reads the time itself, and only the
process's entry makes a ``RealClock``.
"""

import ast
from pathlib import Path

from harness.sources import parsed

PACKAGE = Path(__file__).resolve().parents[2] / "distributetrain"
# Where reading the time directly is the point, each with why.
READS_TIME = {
    "core/clock.py": "the real clock itself",
    # Run by the chief's pod as a script of its own (python3 -c), not a part of the manager.
    "core/pods/podscripts/discover.py": "a pod's script",
}
MAKES_THE_REAL_CLOCK = {"cli/main.py"}  # every process (the user's commands, the manager) starts here
TIME_READS = {("time", "time"), ("time", "monotonic"), ("time", "sleep"), ("time", "perf_counter"),
              ("time", "monotonic_ns"), ("time", "time_ns"), ("datetime", "now"), ("datetime", "utcnow"),
              ("datetime", "today"), ("date", "today")}


def modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(PACKAGE)), parsed(path))
            for path in sorted(PACKAGE.rglob("*.py"))]


def defaulted_clocks(tree: ast.Module) -> list[int]:
    """Lines of a ``clock`` parameter or class field with a default."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            defaulted = positional[len(positional) - len(args.defaults):] if args.defaults else []
            defaulted += [arg for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is not None]
            lines += [arg.lineno for arg in defaulted if arg.arg == "clock"]
        elif isinstance(node, ast.ClassDef):
            lines += [field.lineno for field in node.body if isinstance(field, ast.AnnAssign)
                      and isinstance(field.target, ast.Name) and field.target.id == "clock" and field.value is not None]
    return lines


def time_reads(tree: ast.Module) -> list[int]:
    """Lines that read the time other than through a clock: ``time.monotonic()``,
    ``datetime.now(...)``, ``from time import sleep`` and the like."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in TIME_READS:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime") \
                and any((node.module, alias.name) in TIME_READS for alias in node.names):
            lines.append(node.lineno)
    return lines


def real_clocks_made(tree: ast.Module) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == "RealClock"]


def test_no_clock_parameter_or_field_has_a_default():
    found = [f"{name}:{line}" for name, tree in modules() for line in defaulted_clocks(tree)]
    assert found == [], "pass the clock down from the process's entry instead"


def test_time_is_read_through_the_clock_alone():
    found = [f"{name}:{line}" for name, tree in modules() if name not in READS_TIME for line in time_reads(tree)]
    assert found == [], "read the injected Clock (core/clock.py) instead"


def test_only_the_process_entry_makes_the_real_clock():
    found = [f"{name}:{line}" for name, tree in modules() if name not in MAKES_THE_REAL_CLOCK | {"core/clock.py"}
             for line in real_clocks_made(tree)]
    assert found == [], "take the clock as an argument instead"


def test_the_rule_reads_the_manager_modules_that_wait_and_record():
    """Every module of the package is read (``rglob``): these, which wait on pods, record
    Events, map exit codes and hold the process's clock, among them."""
    read = {name for name, _ in modules()}
    assert {"manager/watching/podwaits.py", "manager/reporting/jobevents.py", "manager/reporting/errorcodes.py", "manager/processstate.py",
            "manager/placement/scaleup.py", "manager/pods/networkpolicy.py", "kube/waits.py", "kube/events.py"} <= read


def test_the_rule_sees_what_it_forbids():
    source = ("import time\nfrom time import sleep\n"
              "def f(kube, clock=REAL):\n    return time.monotonic()\n"
              "class ProcessState:\n    clock: Clock = REAL\n"
              "def g(*, clock=REAL):\n    return datetime.now(timezone.utc)\n")
    tree = ast.parse(source)
    assert defaulted_clocks(tree) == [3, 6, 7]
    assert sorted(time_reads(tree)) == [2, 4, 8]
    assert real_clocks_made(ast.parse("clock = RealClock()")) == [1]
