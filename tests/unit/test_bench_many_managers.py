"""bench/many_managers.py: a run of some points updates the published series, never drops the rest; its plot shows them all."""

from pathlib import Path
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from bench import many_managers
from bench.many_managers import APPROACHES, MANAGER_COUNTS, POD_SERIES, complete, merged, round_key

KEYS = st.tuples(st.sampled_from(POD_SERIES), st.sampled_from(MANAGER_COUNTS), st.sampled_from(APPROACHES))


def a_round(key: tuple[int, int, str], run: str) -> dict:
    pods, count, approach = key
    return {"pods": pods, "count": count, "approach": approach, "run": run}


@given(st.sets(KEYS), st.sets(KEYS))
def test_a_run_replaces_its_points_and_keeps_the_others(published, measured):
    rounds = merged([a_round(key, "published") for key in published], [a_round(key, "new") for key in measured])
    by_key = {round_key(r): r["run"] for r in rounds}
    assert len(by_key) == len(rounds)  # one round a point
    assert by_key == {**{key: "published" for key in published}, **{key: "new" for key in measured}}
    order = [(pods, count, APPROACHES.index(approach)) for pods, count, approach in map(round_key, rounds)]
    assert order == sorted(order)


def test_the_series_is_complete_once_every_point_is_measured():
    every = [a_round((pods, count, approach), "x") for pods in POD_SERIES for count in MANAGER_COUNTS
             for approach in APPROACHES]
    assert complete(every)
    assert not complete(every[1:])
    assert complete(merged(every[:5], every[5:]))


@given(st.lists(st.floats(min_value=1, max_value=1e5), min_size=1, max_size=8))
def test_the_plot_shows_every_measured_point(seconds):
    rows = [{"pods": POD_SERIES[i % len(POD_SERIES)], "managers": MANAGER_COUNTS[i % len(MANAGER_COUNTS)],
             "approach": APPROACHES[i % len(APPROACHES)], "wall_s": s} for i, s in enumerate(seconds)]
    figures = []
    with patch.object(many_managers.report, "save_figure", lambda fig, path: figures.append(fig)):
        many_managers.plot(rows, Path("unused.png"))
    for ax in figures[0].axes:
        assert ax.get_ylim()[0] <= min(seconds) and max(seconds) <= ax.get_ylim()[1]
    many_managers.plt.close(figures[0])
