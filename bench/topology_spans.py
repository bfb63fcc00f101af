"""Placement on a network that is not flat: jobs spanning more racks or blocks than needed.

Why: Horovod's allreduce runs at the pace of its slowest link, so a job spread over two
racks when one could hold it trains slower. Three strategies see the same seeded
cluster of blocks and racks and the same arrivals (``placement_quality``'s churn: FIFO,
give up after ``MAX_WAIT_H``):

- ours with ``--topology block,rack`` (``core.topology.plan``);
- topology-blind: today's planner (``core.placement.plan``), which knows no labels;
- equal pods, as Kueue's Topology Aware Scheduling places a pod set: the job as
  ``ceil(gpus / 8)`` pods of equal size, all in the tightest domain (rack, then block,
  then the cluster) that holds them, each on the tightest node that holds it
  (``core.topology.assign`` does exactly that with equal shares).

At each placement, "needed" at a level is the fewest domains of that level whose free
GPUs could hold the job at that moment, each level counted on its own. A job spans more
than needed when its nodes cover more domains than that.

Run: ``python -m bench.topology_spans`` (about 30 s), or as part of ``bench.placement_quality``.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping

from bench import placement_quality, report, workload
from bench.strategies import Allocation, Strategy
from distributetrain.core.placement import placement, topology

NAME = "topology-spans"
BLOCKS, RACKS_PER_BLOCK = 4, 4  # 16 racks of 4 nodes: placement_quality's 64 x 8-GPU cluster
LEVELS = topology.parse("example.com/block,example.com/rack")
JOBS = 20_000
LOADS = (0.85, 0.95)  # offered loads: at the higher one free GPUs are scattered in ones and twos
SEED = 20_251_126
POD_GPUS = placement_quality.GPUS_PER_NODE  # equal pods: at most a node's worth each


def node_paths(seed: int) -> dict[str, tuple[str, str]]:
    """placement_quality's nodes, shuffled into blocks and racks (names do not follow racks,
    so ties by name do not put a job on one rack by chance)."""
    nodes = sorted(placement_quality.empty_cluster())
    random.Random(seed).shuffle(nodes)
    per_rack = len(nodes) // (BLOCKS * RACKS_PER_BLOCK)
    return {node: (f"b{i // (per_rack * RACKS_PER_BLOCK)}", f"r{i // per_rack}") for i, node in enumerate(nodes)}


def strategies(paths: Mapping[str, tuple]) -> dict[str, Strategy]:
    def ours(free: Mapping[str, int], gpus: int) -> Allocation | None:
        try:
            return topology.plan(free, gpus, paths, LEVELS)
        except placement.InsufficientGPUs:
            return None

    def blind(free: Mapping[str, int], gpus: int) -> Allocation | None:
        try:
            return placement.plan(free, gpus)
        except placement.InsufficientGPUs:
            return None

    def equal_pods(free: Mapping[str, int], gpus: int) -> Allocation | None:
        pods = math.ceil(gpus / POD_GPUS)
        shares = [gpus // pods] * pods
        nodes = topology.assign(shares, free, paths, LEVELS)
        return None if nodes is None else list(zip(nodes, shares))

    return {"ours (--topology block,rack)": ours, "topology-blind (today's planner)": blind,
            "equal pods, tightest domain (Kueue TAS)": equal_pods}


def needed(free: Mapping[str, int], gpus: int, paths: Mapping[str, tuple], level: int) -> int:
    """The fewest domains of ``level`` whose free GPUs hold ``gpus`` now."""
    totals: dict[tuple, int] = {}
    for node, f in free.items():
        domain = topology.domain(node, paths, level)
        totals[domain] = totals.get(domain, 0) + f
    held = 0
    for count, total in enumerate(sorted(totals.values(), reverse=True), start=1):
        held += total
        if held >= gpus:
            return count
    raise AssertionError("the strategy placed a job the free GPUs cannot hold")


def recording(strategy: Strategy, paths: Mapping[str, tuple], spans: list) -> Strategy:
    """``strategy``, noting for each placement (GPUs, domains used and needed per level, nodes)."""

    def place(free: Mapping[str, int], gpus: int) -> Allocation | None:
        allocation = strategy(free, gpus)
        if allocation is not None:
            nodes = sorted({node for node, _ in allocation})
            used = topology.domains_used(nodes, paths, LEVELS)
            spans.append((gpus, used, [needed(free, gpus, paths, level) for level in range(len(LEVELS))],
                          len(nodes)))
        return allocation

    return place


def summarise(spans: list, churn: placement_quality.ChurnResult) -> dict:
    measured = [s for s in spans[placement_quality.WARMUP_JOBS:] if s[0] >= 2]
    over = {level.name: [used[i] - need[i] for _, used, need, _ in measured] for i, level in enumerate(LEVELS)}
    return {
        "multi_gpu_jobs": len(measured),
        **{f"over_{name}_share": sum(extra > 0 for extra in extras) / len(measured) for name, extras in over.items()},
        **{f"extra_{name}_mean": statistics.fmean(extras) for name, extras in over.items()},
        "nodes_mean": statistics.fmean(nodes for *_, nodes in measured),
        "mean_wait_h": statistics.fmean(p.wait_h for p in churn.placed),
        "gave_up_share": len(churn.dropped) / (len(churn.placed) + len(churn.dropped)),
    }


def run(load: float) -> dict[str, dict]:
    paths = node_paths(SEED)
    jobs = workload.job_stream(random.Random(SEED), JOBS, placement_quality.CAPACITY_GPUS, load)
    summaries = {}
    for name, strategy in strategies(paths).items():
        spans: list = []
        churn = placement_quality.simulate_churn(recording(strategy, paths, spans), jobs)
        summaries[name] = summarise(spans, churn)
    return summaries


def table(by_load: dict[float, dict[str, dict]]) -> str:
    header = ["offered load", "strategy", "multi-GPU jobs", "over needed blocks", "over needed racks", "extra racks (mean)",
              "nodes (mean)", "mean wait (h)", "gave up"]
    rows = [[f"{load:.0%}", name, s["multi_gpu_jobs"], f"{s['over_block_share']:.1%}", f"{s['over_rack_share']:.1%}",
             f"{s['extra_rack_mean']:.2f}", f"{s['nodes_mean']:.2f}", f"{s['mean_wait_h']:.2f}",
             f"{s['gave_up_share']:.1%}"] for load, summaries in by_load.items() for name, s in summaries.items()]
    return report.markdown_table(header, rows)


def main() -> None:
    by_load = {load: run(load) for load in LOADS}
    report.write_results(NAME, {"blocks": BLOCKS, "racks_per_block": RACKS_PER_BLOCK, "jobs": JOBS, "seed": SEED,
                                "warmup_jobs": placement_quality.WARMUP_JOBS,
                                "by_offered_load": {str(load): s for load, s in by_load.items()}})
    print(table(by_load))


if __name__ == "__main__":
    main()
