"""No unit test sleeps: a wait in a unit test ends when what it waits for happens (a fake
clock stepped, a FakeKube's call, a clock's waiter: ``harness/waiting.py``), bounded only
for a broken test, never by real time going by. A sleep in a harness helper counts where a
unit test calls it: ``polling.poll_until`` sleeps between looks, for the cluster tiers,
whose cluster says nothing when it changes.
"""

import ast
from pathlib import Path

from harness.sources import parsed

UNIT = Path(__file__).resolve().parent
HARNESS = UNIT.parent / "harness"
SLEEPS = {("time", "sleep"), ("asyncio", "sleep")}
# Unit test files that still poll (each with what it waits for), to be moved to
# harness/waiting.py; none may be added.
STILL_POLLING = {
    "test_polling.py": "poll_until itself (the cluster tiers' helper)",
    "kube/test_api_faults.py": "requests to the HTTP fake, which notes none",
    "kube/test_lock.py": "the HTTP fake's Lease requests and the renewer's thread ending",
    "manager/test_claimed_plans.py": "FreeGpuWatch's lists (its own threads)",
    "manager/placement/test_freegpus.py": "FreeGpuWatch's lists and the HTTP fake's watch requests",
    "manager/placement/test_dra_gpus.py": "FreeGpuWatch's lists (its own threads)",
    "manager/reporting/test_queuepositions.py": "the poller's thread ending, beside its waits on the clock",
    "manager/test_queueing.py": "the Lease's writes and the job's wait on the clock",
}


def sleeps(tree: ast.Module) -> list[int]:
    """Lines that sleep on real time: ``time.sleep(...)``, ``asyncio.sleep(d)`` for d other
    than 0 (a yield to the loop), ``from time import sleep``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in SLEEPS:
            yields = node.func.value.id == "asyncio" and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == 0
            if not yields:
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any((node.module, alias.name) in SLEEPS for alias in node.names):
            lines.append(node.lineno)
    return lines


def sleeping_helpers() -> set[str]:
    """The harness's functions that sleep."""
    return {node.name for path in sorted(HARNESS.glob("*.py")) for node in ast.walk(parsed(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and sleeps(node)}


def calls(tree: ast.Module, functions: set[str]) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id in functions)
        or (isinstance(node.func, ast.Attribute) and node.func.attr in functions))]


def unit_tests(*words: str) -> dict[str, ast.Module]:
    """The unit tests that say any of ``words`` (only those can call them), parsed."""
    return {str(path.relative_to(UNIT)): parsed(path) for path in sorted(UNIT.rglob("*.py"))
            if any(word in path.read_text() for word in words)}


def test_no_unit_test_sleeps():
    found = [f"{name}:{line}" for name, tree in unit_tests("sleep").items() for line in sleeps(tree)]
    assert found == [], "wait for what happens instead (harness/waiting.py, a FakeClock's step)"


def test_no_unit_test_calls_a_harness_helper_that_sleeps():
    helpers = sleeping_helpers()
    assert "poll_until" in helpers
    polling = {name for name, tree in unit_tests(*helpers).items() if calls(tree, helpers)}
    assert sorted(polling - set(STILL_POLLING)) == [], "wait for what happens instead (harness/waiting.py)"
    assert sorted(set(STILL_POLLING) - polling) == [], "these poll no more: take them off STILL_POLLING"


def test_the_rule_sees_what_it_forbids():
    tree = ast.parse("import time, asyncio\nfrom time import sleep\ntime.sleep(0.1)\n"
                     "async def f():\n    await asyncio.sleep(0)\n    await asyncio.sleep(0.5)\n"
                     "poll_until(check, 5, 'x')\nharness.poll_until(check, 5, 'x')\n")
    assert sleeps(tree) == [2, 3, 6]
    assert calls(tree, {"poll_until"}) == [7, 8]
