"""Split a GPU request into one share per node: the heart of pre-training.

The seeds tried only one or two nodes and silently trained on fewer GPUs than asked.
This planner always returns exactly the requested count, on the fewest nodes possible,
and among those the set that leaves the least fragmentation:

1. ``k`` = the fewest nodes whose free GPUs can hold the request (largest nodes first).
2. Among all ``k``-node sets, the one with the smallest total free count that still
   holds the request, so the GPUs left stranded on used nodes are as few as possible
   (ideally zero: the used nodes are consumed whole and every other node stays whole).
3. The stranded remainder, if any, sits on the smallest used node, which becomes the
   smallest share; shares are ordered largest first and the chief takes the last one,
   as in the seeds ([5, 3, 2] free, 6 asked -> [5, 1]).

Step 2 is exact without searching all subsets: start from the ``k`` largest nodes
(excess ``E`` over the request, always smaller than the ``k``-th largest free count)
and swap some of them for smaller unused nodes. Each useful swap lowers the total by at
least one, so at most ``E`` swaps matter, and a small knapsack over the distinct free
counts finds the best one. Ties are broken by node name, so plans are deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

Plan = list[tuple[str, int]]


class InsufficientGPUs(ValueError):
    """The cluster cannot supply the requested GPUs right now."""

    def __init__(self, requested: int, available: int):
        self.requested = requested
        self.available = available
        super().__init__(
            f"requested {requested} GPUs but only {available} are free in the cluster"
        )


def plan(free: Mapping[str, int], gpus: int) -> Plan:
    """Return ``[(node, share), ...]`` summing exactly to ``gpus``; the chief's share is last."""
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise ValueError(f"GPU count must be an integer, got {gpus!r}")
    if gpus < 1:
        raise ValueError(f"GPU count must be at least 1, got {gpus}")
    candidates = sorted(((n, f) for n, f in free.items() if f > 0), key=lambda nf: (-nf[1], nf[0]))
    available = sum(f for _, f in candidates)
    if available < gpus:
        raise InsufficientGPUs(gpus, available)

    fewest = _fewest_nodes(candidates, gpus)
    chosen = _least_stranded(candidates, fewest, gpus)
    return _shares(chosen, sum(f for _, f in chosen) - gpus)


def up_to(free: Mapping[str, int], gpus: int) -> Plan:
    """As many of ``gpus`` as are free, planned as ``plan`` plans them (an elastic job's
    replacements: some GPUs now are better than all of them later)."""
    available = sum(f for f in free.values() if f > 0)
    if available < 1:
        raise InsufficientGPUs(gpus, 0)
    return plan(free, min(gpus, available))


def with_a_worker(plan: Plan) -> Plan:
    """An elastic job's plan on one node, split into a worker and a 1-GPU chief there.

    Horovod 0.28.1's elastic driver takes a job whose first hosts are all local to the
    chief for a single-host job: it binds its rendezvous to 127.0.0.1, which hosts added
    later cannot reach. A worker pod has its own address, so the job can grow.
    """
    if len(plan) != 1 or plan[0][1] < 2:
        return plan
    node, share = plan[0]
    return [(node, share - 1), (node, 1)]


def format_plan(plan: Plan) -> str:
    """"gpu-a=5,gpu-c=1": how a plan is recorded on the manager pod and shown to users."""
    return ",".join(f"{node}={share}" for node, share in plan)


FREE_NODES_NAMED = 10  # in a plan's log line: beyond it, the nodes with the most free GPUs


def describe_free(free: Mapping[str, int]) -> str:
    """The free GPUs a plan was made on, for its log line: every candidate node of a small
    cluster; of a large one (5,000 nodes) the count and the nodes with most free."""
    if len(free) <= FREE_NODES_NAMED:
        return str(dict(free))
    most = sorted((node for node, gpus in free.items() if gpus > 0), key=lambda node: (-free[node], node))
    named = ", ".join(f"{node}={free[node]}" for node in most[:FREE_NODES_NAMED])
    more = f" and {len(most) - FREE_NODES_NAMED} more" if len(most) > FREE_NODES_NAMED else ""
    return f"{sum(free.values())} on {len(most)} of {len(free)} candidate nodes" + (f" ({named}{more})" if most else "")


def parse_plan(text: str) -> Plan:
    """The inverse of ``format_plan``; anything unreadable is no plan ([])."""
    plan = []
    for term in filter(None, text.split(",")):
        node, _, share = term.rpartition("=")
        if not node or not share.isdigit():
            return []
        plan.append((node, int(share)))
    return plan


def _fewest_nodes(candidates: list[tuple[str, int]], gpus: int) -> int:
    total = 0
    for count, (_, f) in enumerate(candidates, start=1):
        total += f
        if total >= gpus:
            return count
    raise AssertionError("unreachable: availability was checked")


def _least_stranded(candidates: list[tuple[str, int]], k: int, gpus: int) -> list[tuple[str, int]]:
    """The ``k``-node set with the smallest total that still holds ``gpus``."""
    largest, rest = candidates[:k], candidates[k:]
    excess = sum(f for _, f in largest) - gpus
    if excess == 0 or not rest:
        return largest
    max_swaps = min(excess, k, len(rest))
    removed_values, added_values = _best_swap(
        Counter(f for _, f in largest), Counter(f for _, f in rest), max_swaps, excess
    )
    if not removed_values:
        return largest
    # Concrete nodes: drop the last-named of the swapped-out size, take the first-named in.
    kept = list(largest)
    for value in sorted(removed_values.elements(), reverse=True):
        index = max(i for i, (_, f) in enumerate(kept) if f == value)
        kept.pop(index)
    added: list[tuple[str, int]] = []
    for value, count in added_values.items():
        added.extend([nf for nf in rest if nf[1] == value][:count])
    return kept + added


def _best_swap(
    largest: Counter, rest: Counter, max_swaps: int, excess: int
) -> tuple[Counter, Counter]:
    """Multisets (out, in) of equal size maximising sum(out) - sum(in) <= excess."""
    out_layers = _reachable_sums(largest, max_swaps)
    in_layers = _reachable_sums(rest, max_swaps)
    best = (0, 0, 0, 0)  # (reduction, swaps, out_sum, in_sum)
    for swaps in range(1, max_swaps + 1):
        out_mask, in_mask = out_layers[-1][swaps], in_layers[-1][swaps]
        out_sum = 0
        while out_mask >> out_sum:
            if (out_mask >> out_sum) & 1:
                floor = max(out_sum - excess, 0)
                above = in_mask >> floor
                if above:
                    in_sum = floor + (above & -above).bit_length() - 1
                    reduction = out_sum - in_sum
                    # Strictly better only: among equal reductions the fewest swaps win.
                    if reduction > best[0]:
                        best = (reduction, swaps, out_sum, in_sum)
            out_sum += 1
        if best[0] == excess:
            break
    if best[0] == 0:
        return Counter(), Counter()
    _, swaps, out_sum, in_sum = best
    # Swap out the largest sizes possible and in the smallest, keeping big nodes free.
    return (
        _pick(largest, out_layers, swaps, out_sum, prefer_large=True),
        _pick(rest, in_layers, swaps, in_sum, prefer_large=False),
    )


def _reachable_sums(values: Counter, max_items: int) -> list[list[int]]:
    """layers[i][t]: bitmask of sums reachable with exactly t items from the first i sizes."""
    sizes = sorted(values)
    layers = [[1] + [0] * max_items]
    for size in sizes:
        previous = layers[-1]
        current = list(previous)
        for use in range(1, min(values[size], max_items) + 1):
            for t in range(use, max_items + 1):
                current[t] |= previous[t - use] << (size * use)
        layers.append(current)
    return layers


def _pick(values: Counter, layers: list[list[int]], items: int, total: int, *, prefer_large: bool) -> Counter:
    sizes = sorted(values)
    picked: Counter = Counter()
    for i in range(len(sizes), 0, -1):
        size = sizes[i - 1]
        uses = range(min(values[size], items), -1, -1) if prefer_large else range(0, min(values[size], items) + 1)
        for use in uses:
            rest_total = total - size * use
            if rest_total >= 0 and (layers[i - 1][items - use] >> rest_total) & 1:
                if use:
                    picked[size] = use
                items, total = items - use, rest_total
                break
    return picked


def _shares(chosen: list[tuple[str, int]], stranded: int) -> Plan:
    # The smallest used node keeps the stranded GPUs; it becomes the chief's (last) share.
    ordered = sorted(chosen, key=lambda nf: (-nf[1], nf[0]))
    shares = [(node, f) for node, f in ordered]
    if stranded:
        node, f = shares[-1]
        shares[-1] = (node, f - stranded)
    return sorted(shares, key=lambda ns: (-ns[1], ns[0]))
