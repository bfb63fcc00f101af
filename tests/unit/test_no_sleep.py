"""No unit test sleeps: a wait in a unit test ends when what it waits for happens (a fake
clock stepped, a FakeKube's call, a request to the HTTP fake, a clock's waiter, a thread
ending: ``harness/waiting.py``), bounded only for a broken test, never by real time going
by. A sleep in a harness helper counts where a unit test calls it: ``polling.poll_until``
sleeps between looks, on real time for the cluster tiers (whose cluster says nothing when
it changes) unless it is given a clock, as its own unit test gives it a fake one.
"""

import ast
from pathlib import Path

from harness.sources import parsed

UNIT = Path(__file__).resolve().parent
HARNESS = UNIT.parent / "harness"
SLEEPS = {("time", "sleep"), ("asyncio", "sleep")}


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


def real_clock_default(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a parameter of ``function`` defaults to the real clock (``RealClock()``): it
    sleeps on real time unless its caller gives it a clock (``clock=``)."""
    return any(isinstance(default, ast.Call) and isinstance(default.func, ast.Name) and default.func.id == "RealClock"
               for default in (*function.args.defaults, *function.args.kw_defaults))


def sleeping_helpers() -> dict[str, bool]:
    """The harness's functions that sleep on real time, each with whether a clock given
    (``clock=``) keeps it off real time."""
    return {node.name: not sleeps(node) for path in sorted(HARNESS.glob("*.py")) for node in ast.walk(parsed(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (sleeps(node) or real_clock_default(node))}


def calls(tree: ast.Module, helpers: dict[str, bool]) -> list[int]:
    """Lines that call one of ``helpers`` on real time (without the clock that would keep it off)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in helpers and not (helpers[name] and any(keyword.arg == "clock" for keyword in node.keywords)):
                lines.append(node.lineno)
    return lines


def unit_tests(*words: str) -> dict[str, ast.Module]:
    """The unit tests that say any of ``words`` (only those can call them), parsed."""
    return {str(path.relative_to(UNIT)): parsed(path) for path in sorted(UNIT.rglob("*.py"))
            if any(word in path.read_text() for word in words)}


def test_no_unit_test_sleeps():
    found = [f"{name}:{line}" for name, tree in unit_tests("sleep").items() for line in sleeps(tree)]
    assert found == [], "wait for what happens instead (harness/waiting.py, a FakeClock's step)"


def test_no_unit_test_calls_a_harness_helper_that_sleeps():
    helpers = sleeping_helpers()
    assert helpers.get("poll_until") is True  # on real time unless given a clock
    polling = [f"{name}:{line}" for name, tree in unit_tests(*helpers).items() for line in calls(tree, helpers)]
    assert polling == [], "wait for what happens instead (harness/waiting.py), or give the helper a fake clock"


def test_the_rule_sees_what_it_forbids():
    tree = ast.parse("import time, asyncio\nfrom time import sleep\ntime.sleep(0.1)\n"
                     "async def f():\n    await asyncio.sleep(0)\n    await asyncio.sleep(0.5)\n"
                     "poll_until(check, 5, 'x')\nharness.poll_until(check, 5, 'x')\n"
                     "poll_until(check, 5, 'x', clock=fake)\nsnooze(clock=fake)\n")
    assert sleeps(tree) == [2, 3, 6]
    assert calls(tree, {"poll_until": True, "snooze": False}) == [7, 8, 10]
    defaulted = ast.parse("def f(check, clock=RealClock()): ...\ndef g(check, *, clock=RealClock()): ...\n"
                          "def h(check, clock=None): ...\n")
    assert [real_clock_default(function) for function in defaulted.body] == [True, True, False]
