"""Placement quality under churn: our planner against the seeds' and two common baselines.

Why: the planner's promises (exactly the GPUs asked, on the fewest nodes, leaving the
least fragmentation) only mean something against what users would otherwise get, on a
realistic stream of jobs. Every strategy sees the same cluster, the same arrivals and
the same queue policy (FIFO, a job gives up after ``MAX_WAIT_H``), in one run.

Two experiments:
- churn: ``JOBS`` jobs arrive and finish on a 64 x 8-GPU cluster at ``OFFERED_LOAD``
  (and, for the trend, at each load of ``LOAD_SWEEP``); the first ``WARMUP_JOBS`` only
  fill the cluster and are not measured;
- topology: the same churn on racks and blocks, jobs spanning more of them than needed
  (``bench.topology_spans``);
- fill: from an empty cluster, jobs arrive and never finish until the first request a
  strategy cannot place exactly (and, stricter, exactly on its minimum node count);
  the GPUs allocated at that point, over ``FILL_REPETITIONS`` seeded sequences.

Run: ``python -m bench.placement_quality`` (about two minutes).
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import matplotlib.pyplot as plt

from bench import report, workload
from bench.strategies import STRATEGIES, Allocation, Strategy

NODES = 64
GPUS_PER_NODE = 8
CAPACITY_GPUS = NODES * GPUS_PER_NODE
OFFERED_LOAD = 0.85  # GPU-hours asked per hour, as a share of capacity
LOAD_SWEEP = (0.5, 0.7, 0.85, 0.95)  # the same comparison at other loads, to see the trend
JOBS = 30_000
WARMUP_JOBS = 3_000
MAX_WAIT_H = 2.0  # FIFO head-of-line wait after which a job gives up (2 mean durations)
FILL_REPETITIONS = 30
SEED = 20_240_806
NAME = "placement-quality"


def empty_cluster() -> dict[str, int]:
    return {f"node-{i:02d}": GPUS_PER_NODE for i in range(NODES)}


def min_nodes(gpus: int) -> int:
    """Fewest nodes any placement could use: whole nodes first."""
    return math.ceil(gpus / GPUS_PER_NODE)


def fewest_nodes_now(free: Mapping[str, int], gpus: int) -> int:
    total = 0
    for count, f in enumerate(sorted(free.values(), reverse=True), start=1):
        total += f
        if total >= gpus:
            return count
    return NODES + 1


def fits_share(gpus: int) -> int:
    """Free GPUs a node needs to take this job whole, or a whole-node share of it."""
    return min(gpus, GPUS_PER_NODE)


def stranded_gpus(free: Mapping[str, int], pending_sizes: list[int]) -> int:
    """Free GPUs on partly used nodes that no pending job fits (see docs/benchmarks.md)."""
    threshold = min(fits_share(s) for s in pending_sizes)
    return sum(f for f in free.values() if 0 < f < threshold)


@dataclass
class Placed:
    job: workload.Job
    granted: int
    nodes: int
    fewest_nodes: int  # fewest nodes that could have held ``granted`` at that moment
    feasible: bool  # the cluster had the requested GPUs free, in total
    wait_h: float


@dataclass
class ChurnResult:
    placed: list[Placed] = field(default_factory=list)
    dropped: list[workload.Job] = field(default_factory=list)
    stranded: list[int] = field(default_factory=list)  # sampled at each arrival
    allocated_gpu_h: float = 0.0
    window_h: float = 0.0


def simulate_churn(strategy: Strategy, jobs: list[workload.Job]) -> ChurnResult:
    """Event-driven churn: arrivals, departures and queue give-ups, in time order."""
    free = empty_cluster()
    running: list[tuple[float, int, Allocation]] = []  # heap of (end, job index, allocation)
    queue: deque[workload.Job] = deque()
    result = ChurnResult()
    measure_from_h = jobs[WARMUP_JOBS].arrival_h
    measure_to_h = jobs[-1].arrival_h
    allocated = 0
    now_h = 0.0
    next_arrival = 0

    def measured(job: workload.Job) -> bool:
        return job.index >= WARMUP_JOBS

    def drain() -> None:
        nonlocal allocated
        while queue:
            head = queue[0]
            if head.arrival_h + MAX_WAIT_H <= now_h:
                queue.popleft()
                if measured(head):
                    result.dropped.append(head)
                continue
            allocation = strategy(free, head.gpus)
            if allocation is None:
                return
            queue.popleft()
            granted = sum(g for _, g in allocation)
            if measured(head):
                result.placed.append(Placed(
                    head, granted, len(allocation), fewest_nodes_now(free, granted),
                    sum(free.values()) >= head.gpus, now_h - head.arrival_h,
                ))
            for node, gpus in allocation:
                free[node] -= gpus
                assert free[node] >= 0, f"{node} over-allocated"
            allocated += granted
            heapq.heappush(running, (now_h + head.duration_h, head.index, allocation))

    while next_arrival < len(jobs) or running or queue:
        arrival_h = jobs[next_arrival].arrival_h if next_arrival < len(jobs) else math.inf
        departure_h = running[0][0] if running else math.inf
        give_up_h = queue[0].arrival_h + MAX_WAIT_H if queue else math.inf
        event_h = min(arrival_h, departure_h, give_up_h)
        window = max(0.0, min(event_h, measure_to_h) - max(now_h, measure_from_h))
        result.allocated_gpu_h += allocated * window
        now_h = event_h
        if departure_h == event_h:
            _, _, allocation = heapq.heappop(running)
            for node, gpus in allocation:
                free[node] += gpus
                allocated -= gpus
        elif arrival_h == event_h:
            job = jobs[next_arrival]
            next_arrival += 1
            if measured(job):
                pending = [job.gpus] + [q.gpus for q in queue if q.arrival_h + MAX_WAIT_H > now_h]
                result.stranded.append(stranded_gpus(free, pending))
            queue.append(job)
        drain()
    result.window_h = measure_to_h - measure_from_h
    return result


@dataclass(frozen=True)
class FillResult:
    at_first_inexact: int  # GPUs allocated when a request is first not placed exactly
    at_first_spread: int  # ... first not placed exactly on its minimum node count


def simulate_fill(strategy: Strategy, sizes: list[int]) -> FillResult:
    free = empty_cluster()
    allocated = 0
    first_spread = None
    for gpus in sizes:
        allocation = strategy(free, gpus)
        granted = sum(g for _, g in allocation) if allocation else 0
        if granted != gpus:
            return FillResult(allocated, allocated if first_spread is None else first_spread)
        if first_spread is None and len(allocation) > min_nodes(gpus):
            first_spread = allocated
        for node, g in allocation:
            free[node] -= g
        allocated += granted
    raise AssertionError("the fill sequence is longer than the cluster can hold")


def realised_load(jobs: list[workload.Job]) -> float:
    """GPU-hours asked per hour of the measured jobs (the sizes' heavy tail makes it drift)."""
    measured = jobs[WARMUP_JOBS:]
    span_h = measured[-1].arrival_h - measured[0].arrival_h
    return sum(j.gpus * j.duration_h for j in measured) / (CAPACITY_GPUS * span_h)


def summarise(churn: ChurnResult, fills: list[FillResult]) -> dict:
    placed = churn.placed
    total = len(placed) + len(churn.dropped)
    feasible = [p for p in placed if p.feasible]
    multi = [p for p in placed if p.job.gpus >= 2]
    nodes_by_size = {
        size: statistics.fmean(p.nodes for p in placed if p.job.gpus == size)
        for size in workload.JOB_SIZE_SHARES
        if any(p.job.gpus == size for p in placed)
    }
    return {
        "jobs": total,
        "exact_share_of_feasible": sum(p.granted == p.job.gpus for p in feasible) / len(feasible),
        "exact_share": sum(p.granted == p.job.gpus for p in placed) / total,
        "short_share": sum(p.granted < p.job.gpus for p in placed) / total,
        "dropped_share": len(churn.dropped) / total,
        "gpus_short_per_short_job": statistics.fmean(
            [p.job.gpus - p.granted for p in placed if p.granted < p.job.gpus] or [0]
        ),
        "gpu_hours_delivered_share": sum(p.granted * p.job.duration_h for p in placed)
        / sum(p.job.gpus * p.job.duration_h for p in placed),
        "mean_wait_h": statistics.fmean(p.wait_h for p in placed),
        "utilisation": churn.allocated_gpu_h / (CAPACITY_GPUS * churn.window_h),
        "extra_nodes_vs_min": statistics.fmean(p.nodes - min_nodes(p.granted) for p in multi),
        "extra_nodes_vs_fewest_then": statistics.fmean(p.nodes - p.fewest_nodes for p in multi),
        "share_multi_over_min_nodes": sum(p.nodes > min_nodes(p.granted) for p in multi) / len(multi),
        "mean_nodes_by_size": nodes_by_size,
        "stranded_gpus_mean": statistics.fmean(churn.stranded),
        "stranded_gpus_p95": sorted(churn.stranded)[int(0.95 * len(churn.stranded))],
        **fill_summary(fills),
    }


def fill_summary(fills: list[FillResult]) -> dict:
    return {
        "fill_inexact_gpus_mean": statistics.fmean(f.at_first_inexact for f in fills),
        "fill_inexact_gpus_min": min(f.at_first_inexact for f in fills),
        "fill_spread_gpus_mean": statistics.fmean(f.at_first_spread for f in fills),
        "fill_spread_gpus_min": min(f.at_first_spread for f in fills),
    }


COLOURS = ["tab:blue", "tab:red", "tab:orange", "tab:green"]


def plot(summaries: dict[str, dict], path) -> None:
    names = list(summaries)
    colours = COLOURS
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))

    ax = axes[0][0]
    bottoms = [0.0] * len(names)
    for key, label, colour in (
        ("exact_share", "placed exactly", "tab:green"),
        ("short_share", "placed with fewer GPUs", "tab:red"),
        ("dropped_share", f"gave up after {MAX_WAIT_H:g} h in queue", "tab:gray"),
    ):
        values = [100 * summaries[n][key] for n in names]
        ax.bar(names, values, bottom=bottoms, label=label, color=colour)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_ylim(90, 100)
    ax.set_ylabel("% of jobs (axis from 90 %)")
    ax.set_title("Job outcomes under churn")
    ax.legend(loc="lower right", fontsize=8)

    ax = axes[0][1]
    sizes = [s for s in workload.JOB_SIZE_SHARES if s >= 2]
    width = 0.8 / len(names)
    for i, (name, colour) in enumerate(zip(names, colours)):
        means = [summaries[name]["mean_nodes_by_size"].get(s, 0) for s in sizes]
        ax.bar([x + i * width for x in range(len(sizes))], means, width, label=name, color=colour)
    ax.plot([x + 0.4 - width / 2 for x in range(len(sizes))], [min_nodes(s) for s in sizes],
            "k_", markersize=28, mew=2, label="minimum possible")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(sizes))], [f"{s} GPUs" for s in sizes])
    ax.set_ylabel("mean nodes per job")
    ax.set_yscale("log", base=2)
    ax.set_title("Nodes a job spans, by requested size")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    ax.bar(names, [summaries[n]["stranded_gpus_mean"] for n in names], color=colours)
    ax.set_ylabel("free GPUs no pending job fits (mean)")
    ax.set_title("Fragmentation, sampled at each arrival")

    ax = axes[1][1]
    x = range(len(names))
    for offset, key, label, colour in (
        (-0.2, "fill_inexact", "first request not placed exactly", "tab:purple"),
        (0.2, "fill_spread", "... or not on its minimum node count", "tab:cyan"),
    ):
        means = [100 * summaries[n][f"{key}_gpus_mean"] / CAPACITY_GPUS for n in names]
        lows = [m - 100 * summaries[n][f"{key}_gpus_min"] / CAPACITY_GPUS for m, n in zip(means, names)]
        ax.bar([i + offset for i in x], means, 0.4, yerr=[lows, [0] * len(names)], capsize=3,
               label=label, color=colour)
    ax.set_xticks(list(x), names)
    ax.set_ylabel("% of GPUs allocated (mean; bar to the worst run)")
    ax.set_title(f"Filling an empty cluster ({FILL_REPETITIONS} sequences)")
    ax.legend(fontsize=8, loc="lower right")

    for ax in axes.flat:
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"Placement on {NODES} nodes x {GPUS_PER_NODE} GPUs, offered load {OFFERED_LOAD:.0%}, "
                 f"{JOBS - WARMUP_JOBS:,} measured jobs", fontsize=11)
    report.save_figure(fig, path)


def plot_sweep(sweep: dict[float, dict[str, dict]], path) -> None:
    loads = sorted(sweep)
    names = list(sweep[loads[0]])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for name, colour in zip(names, COLOURS):
        axes[0].plot([100 * l for l in loads], [sweep[l][name]["extra_nodes_vs_min"] for l in loads],
                     "o-", color=colour, label=name)
        axes[1].plot([100 * l for l in loads], [sweep[l][name]["stranded_gpus_mean"] for l in loads],
                     "o-", color=colour, label=name)
    axes[0].set_ylabel("extra nodes per multi-GPU job (mean)")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("free GPUs no pending job fits (mean)")
    for ax in axes:
        ax.set_xlabel("offered load (% of GPU capacity)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("The same comparison across offered loads", fontsize=11)
    report.save_figure(fig, path)


def table(summaries: dict[str, dict]) -> str:
    header = ["strategy", "exact, of feasible", "exact / short / gave up", "GPU-hours delivered / asked",
              "mean wait (h)", "GPU utilisation",
              "extra nodes per multi-GPU job", "multi-GPU jobs over min. nodes", "stranded GPUs (mean / p95)",
              "fill: allocated at first inexact", "fill: ... or spread"]
    rows = []
    for name, s in summaries.items():
        rows.append([
            name,
            f"{s['exact_share_of_feasible']:.1%}",
            f"{s['exact_share']:.1%} / {s['short_share']:.1%} / {s['dropped_share']:.1%}",
            f"{s['gpu_hours_delivered_share']:.1%}",
            f"{s['mean_wait_h']:.2f}",
            f"{s['utilisation']:.1%}",
            f"{s['extra_nodes_vs_min']:.2f}",
            f"{s['share_multi_over_min_nodes']:.1%}",
            f"{s['stranded_gpus_mean']:.1f} / {s['stranded_gpus_p95']}",
            f"{s['fill_inexact_gpus_mean'] / CAPACITY_GPUS:.1%}",
            f"{s['fill_spread_gpus_mean'] / CAPACITY_GPUS:.1%}",
        ])
    return report.markdown_table(header, rows)


def main() -> None:
    fill_sequences = []
    for r in range(FILL_REPETITIONS):
        rng = random.Random(SEED + 1 + r)
        fill_sequences.append([workload.draw_size(rng) for _ in range(CAPACITY_GPUS)])
    fills = {name: [simulate_fill(strategy, sizes) for sizes in fill_sequences]
             for name, strategy in STRATEGIES.items()}
    sweep: dict[float, dict[str, dict]] = {}
    realised: dict[float, float] = {}
    for load in LOAD_SWEEP:
        # The same seed at every load: one job sequence, arrivals compressed or stretched.
        jobs = workload.job_stream(random.Random(SEED), JOBS, CAPACITY_GPUS, load)
        realised[load] = realised_load(jobs)
        sweep[load] = {name: summarise(simulate_churn(strategy, jobs), fills[name])
                       for name, strategy in STRATEGIES.items()}
    summaries = sweep[OFFERED_LOAD]
    plot(summaries, report.image_path(NAME))
    plot_sweep(sweep, report.image_path(f"{NAME}-load"))
    report.write_results(NAME, {
        "nodes": NODES, "gpus_per_node": GPUS_PER_NODE, "offered_load": OFFERED_LOAD,
        "realised_load": realised, "jobs": JOBS, "warmup_jobs": WARMUP_JOBS, "max_wait_h": MAX_WAIT_H,
        "seed": SEED, "job_size_shares": workload.JOB_SIZE_SHARES, "strategies": summaries,
        "load_sweep": {str(load): sweep[load] for load in LOAD_SWEEP},
    })
    print(f"offered load {OFFERED_LOAD:.0%} (realised {realised[OFFERED_LOAD]:.1%})")
    print(table(summaries))
    for load in LOAD_SWEEP:
        print(f"load {load:.0%} (realised {realised[load]:.1%}): " + ", ".join(
            f"{name} extra nodes {s['extra_nodes_vs_min']:.2f} stranded {s['stranded_gpus_mean']:.1f} "
            f"gave up {s['dropped_share']:.1%}" for name, s in sweep[load].items()))
    # On racks and blocks (bench/topology_spans.py, its own module: it reuses this one's churn).
    from bench import topology_spans

    topology_spans.main()


if __name__ == "__main__":
    main()
