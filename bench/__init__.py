"""Benchmarks of distributetrain: scripts that measure and plot, not timed tests.

Each module is one benchmark, run with ``python -m bench.<name>`` from the repository
root (``bench/run_all.sh`` runs them all). Results go to ``bench/results/<name>.json``
and plots to ``docs/img/bench-<name>.png``; ``docs/benchmarks.md`` discusses them.
"""
