"""The placement strategies the benchmarks compare, behind one signature.

``place(free, gpus)`` gets the free GPUs per node and returns ``[(node, gpus), ...]``,
or None when the strategy would wait. Only ours comes from the package; the others are
written here from their descriptions so the comparison does not depend on their code:

- ``seeds``: the published manager (seed 002, DistributeTrain_PreTraining.py), as its
  text describes it: the free GPUs of every node as a list of counts sorted descending
  ([5, 3, 2]), then one node if the largest holds the request, else the two largest
  (6 -> [5, 1]); when two nodes are not enough it trains on what the two hold, silently
  fewer GPUs. The pods carry only a GPU count, not a node ("Kubernetes puts pods on
  arbitrary nodes, so only the counts are kept"), so the default scheduler decides
  where each lands: the workers first, the chief (the last, smallest share) last.
- ``spread``: what MPIJob-style launchers get: the request as that many 1-GPU workers,
  each placed by the default scheduler.
- ``best_fit``: a common heuristic: the tightest node that holds the whole request,
  else nodes largest first until the request is covered.

The default scheduler is modelled by its least-allocated scoring on the GPU resource:
a pod goes to the feasible node with the most free GPUs, ties by name. (The upstream
default scores CPU and memory, not extended resources, and breaks ties at random; with
CPU and memory requested per GPU, as GPU pods usually are, the ranking is the same.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from distributetrain.core.placement import placement

Allocation = list[tuple[str, int]]
Strategy = Callable[[Mapping[str, int], int], "Allocation | None"]


def ours(free: Mapping[str, int], gpus: int) -> Allocation | None:
    try:
        return placement.plan(free, gpus)
    except placement.InsufficientGPUs:
        return None


def seeds_shares(free_counts: list[int], gpus: int) -> list[int]:
    """The seeds' split of a request over the descending list of free counts."""
    counts = sorted((c for c in free_counts if c > 0), reverse=True)
    if not counts:
        return []
    if counts[0] >= gpus:
        return [gpus]
    if len(counts) == 1:
        return [counts[0]]
    return [counts[0], min(gpus - counts[0], counts[1])]


def scheduler_pick(free: Mapping[str, int], gpus: int) -> str | None:
    """The node the default scheduler binds a pod requesting ``gpus`` to (least allocated)."""
    fitting = [(-f, node) for node, f in free.items() if f >= gpus]
    return min(fitting)[1] if fitting else None


def _schedule_pods(free: Mapping[str, int], pod_gpus: list[int]) -> Allocation | None:
    left = dict(free)
    per_node: dict[str, int] = {}
    for gpus in pod_gpus:
        node = scheduler_pick(left, gpus)
        if node is None:
            return None
        left[node] -= gpus
        per_node[node] = per_node.get(node, 0) + gpus
    return sorted(per_node.items(), key=lambda ng: (-ng[1], ng[0]))


def seeds(free: Mapping[str, int], gpus: int) -> Allocation | None:
    shares = seeds_shares(list(free.values()), gpus)
    return _schedule_pods(free, shares) if shares else None


def spread(free: Mapping[str, int], gpus: int) -> Allocation | None:
    if sum(free.values()) < gpus:
        return None
    return _schedule_pods(free, [1] * gpus)


def best_fit(free: Mapping[str, int], gpus: int) -> Allocation | None:
    holding = [(f, node) for node, f in free.items() if f >= gpus]
    if holding:
        return [(min(holding)[1], gpus)]
    if sum(free.values()) < gpus:
        return None
    allocation, missing = [], gpus
    for node, f in sorted(free.items(), key=lambda nf: (-nf[1], nf[0])):
        take = min(f, missing)
        allocation.append((node, take))
        missing -= take
        if missing == 0:
            return allocation
    raise AssertionError("unreachable: availability was checked")


STRATEGIES: dict[str, Strategy] = {
    "ours": ours,
    "seeds": seeds,
    "spread (1-GPU pods)": spread,
    "best-fit": best_fit,
}
