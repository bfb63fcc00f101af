"""How long ``placement.plan`` takes as the cluster grows.

Why: the manager plans while holding the placement Lease, so every other job's manager
waits for it; planning must stay far below the API round trips around it (target: well
under 100 ms at 10,000 nodes). The planner sorts the nodes and solves a small knapsack
whose size is bounded by the GPUs per node, so it should grow like n log n.

Each repetition draws a fresh cluster (every node 0-8 free GPUs, uniformly), seeded, and
times only the ``plan`` call; requests larger than the cluster's free GPUs are skipped.
Two clocks: the thread's CPU time (what planning costs, unaffected by other processes on
this shared 2-core machine) and wall-clock time (what the Lease holder saw, including
any preemption by those processes).

Run: ``python -m bench.planning_time`` (about a minute).
"""

from __future__ import annotations

import gc
import random
import statistics
import time

import matplotlib.pyplot as plt
import numpy as np

from bench import report
from distributetrain.core.placement import placement

CLUSTER_SIZES = (100, 300, 1_000, 3_000, 10_000)  # nodes
# GPUs; not multiples of 8, so the planner must search for the least-stranded node set
# (a multiple of 8 is usually met exactly by whole free nodes, the planner's fast path).
REQUEST_SIZES = (1, 12, 100, 1_000)
MAX_FREE_PER_NODE = 8
REPETITIONS = 200  # clusters drawn per cluster size; every request size is planned on each
TARGET_MS = 100.0
SEED = 20_240_807
NAME = "planning-time"


def random_cluster(rng: random.Random, nodes: int) -> dict[str, int]:
    return {f"node-{i:05d}": rng.randint(0, MAX_FREE_PER_NODE) for i in range(nodes)}


Samples = dict[int, dict[int, list[tuple[float, float]]]]  # nodes -> GPUs -> [(cpu ms, wall ms)]


def time_plan_ms(free: dict[str, int], gpus: int) -> tuple[float, float]:
    wall_start, cpu_start = time.perf_counter(), time.thread_time()
    placement.plan(free, gpus)
    return (time.thread_time() - cpu_start) * 1000, (time.perf_counter() - wall_start) * 1000


def measure() -> Samples:
    rng = random.Random(SEED)
    samples: Samples = {n: {g: [] for g in REQUEST_SIZES} for n in CLUSTER_SIZES}
    gc.disable()  # a collection inside one call would measure the collector, not the planner
    try:
        for nodes in CLUSTER_SIZES:
            for _ in range(REPETITIONS):
                free = random_cluster(rng, nodes)
                available = sum(free.values())
                for gpus in REQUEST_SIZES:
                    if gpus <= available:
                        samples[nodes][gpus].append(time_plan_ms(free, gpus))
                gc.collect()
    finally:
        gc.enable()
    return samples


def summarise(samples: Samples) -> dict:
    def stats(times: list[float]) -> dict:
        return {"median_ms": statistics.median(times), "p99_ms": float(np.percentile(times, 99)),
                "max_ms": max(times)}

    return {
        str(nodes): {
            str(gpus): {
                "cpu": stats([cpu for cpu, _ in times]),
                "wall": stats([wall for _, wall in times]),
                "samples": len(times),
            }
            for gpus, times in by_size.items()
            if times
        }
        for nodes, by_size in samples.items()
    }


def plot(summary: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5))
    for gpus, colour in zip(REQUEST_SIZES, ("tab:blue", "tab:orange", "tab:green", "tab:red")):
        nodes = [n for n in CLUSTER_SIZES if str(gpus) in summary[str(n)]]
        medians = [summary[str(n)][str(gpus)]["cpu"]["median_ms"] for n in nodes]
        p99s = [summary[str(n)][str(gpus)]["cpu"]["p99_ms"] for n in nodes]
        wall_p99s = [summary[str(n)][str(gpus)]["wall"]["p99_ms"] for n in nodes]
        ax.plot(nodes, medians, "o-", color=colour, label=f"{gpus:,} GPU{'s' if gpus > 1 else ''} requested")
        ax.plot(nodes, p99s, "x--", color=colour, alpha=0.7)
        ax.plot(nodes, wall_p99s, ":", color=colour, alpha=0.5)
    ax.axhline(TARGET_MS, color="black", linewidth=1, label=f"target {TARGET_MS:g} ms")
    for style, label in (("o-", "CPU time, median"), ("x--", "CPU time, p99"), (":", "wall time, p99")):
        ax.plot([], [], style, color="gray", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes in the cluster (each 0-8 free GPUs)")
    ax.set_ylabel("placement.plan time (ms)")
    ax.set_ylim(top=TARGET_MS * 10)  # room for the legend above the data
    ax.set_title(f"Planning time, {REPETITIONS} random clusters per size")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    report.save_figure(fig, path)


def table(summary: dict) -> str:
    header = ["nodes"] + [f"{g:,} GPU{'s' if g > 1 else ''}: CPU median / p99, wall p99 (ms)"
                          for g in REQUEST_SIZES]
    rows = []
    for nodes in CLUSTER_SIZES:
        cells = summary[str(nodes)]
        rows.append([f"{nodes:,}"] + [
            f"{cells[str(g)]['cpu']['median_ms']:.2f} / {cells[str(g)]['cpu']['p99_ms']:.2f}, "
            f"{cells[str(g)]['wall']['p99_ms']:.2f}" if str(g) in cells else "n/a (not enough free GPUs)"
            for g in REQUEST_SIZES
        ])
    return report.markdown_table(header, rows)


def main() -> None:
    summary = summarise(measure())
    plot(summary, report.image_path(NAME))
    report.write_results(NAME, {
        "cluster_sizes": CLUSTER_SIZES, "request_sizes": REQUEST_SIZES, "repetitions": REPETITIONS,
        "seed": SEED, "target_ms": TARGET_MS, "times": summary,
    })
    print(table(summary))


if __name__ == "__main__":
    main()
