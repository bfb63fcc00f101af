"""Placement that knows the cluster's network (``--topology``): the fewest domains at
each level, then ``placement``'s rules.

Horovod's allreduce runs at the pace of its slowest link, and links between nodes of one
rack (one leaf switch) or one block are faster than those between them. So a job is
planned inside the tightest domain that can hold it, and when none can, across as few
domains as possible at each level, outermost first: the fewest blocks, then within them
the fewest racks, then within those ``placement``'s plan (fewest nodes, least stranded GPUs,
ties by name). A rack that holds the job therefore wins over two racks with fewer nodes.

Levels are node label keys, **outermost first** (zone, block, rack), the order of a Kueue
``Topology``'s levels and of a path: a node's domain at a level is its values down to
that level, so rack ``r1`` of block ``b1`` is not rack ``r1`` of block ``b2``. A level
marked required (``rack!``) is never crossed: the job stays in one rack (and so in one
block), or waits. A node without a level's label is a domain of its own there (nothing
says it shares a switch with anyone), or, where that level or an inner one is required,
not a candidate (nothing shows it is inside the domain).

The search is exact: at each level it tries every set of the fewest domains that hold
the job, keeps those whose next level needs the fewest domains, and recurses into them.
On large clusters with scattered free GPUs it is bounded, largest domains first: at most
``MAX_DOMAIN_SETS`` sets looked at per level and domain, ``MAX_PLANS_COMPARED`` plans
compared in all. The plan then still spans the fewest domains at the outermost level
and at each level the fewest the sets looked at allow.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence

from distributetrain.core.placement import placement
from distributetrain.core.pods import podgroup
from distributetrain.core import validation
from distributetrain.core.settings import REQUIRED_MARK, Level
from distributetrain.core.placement.placement import Plan

FORM = ("label keys, outermost first, comma-separated, each ending in ! if the job must stay inside one domain "
        "of it, e.g. network.topology.kubernetes.io/block,network.topology.kubernetes.io/rack!")
# Bounds on the search (a plan is made under the cluster-wide Lease): a 256-GPU job on
# 10,000 nodes in 1,000 racks with one or two GPUs free here and there takes some 50 ms.
MAX_DOMAIN_SETS = 256  # sets of domains looked at, per level and domain
MAX_PLANS_COMPARED = 256  # plans within chosen domains compared, per plan
NO_LABEL = "none"  # how a node without a level's label shows in descriptions

Path = tuple  # a node's label values, outermost level first; None where the label is missing
Domain = tuple  # a domain at one level: the path down to it, a missing value replaced by the node's own mark
Table = Mapping[str, tuple]  # by node: its Domain at each level, outermost first (computed once per plan)




def parse(text: str) -> tuple[Level, ...]:
    """``--topology``'s value: levels outermost first; ValueError showing the valid form."""
    levels = []
    for term in text.split(","):
        key = term.strip().removesuffix(REQUIRED_MARK)
        if not key or not validation.QUALIFIED_NAME.fullmatch(key):
            raise ValueError(f"must be {FORM}, got {text!r}")
        levels.append(Level(key, term.strip().endswith(REQUIRED_MARK)))
    if len({level.key for level in levels}) != len(levels):
        raise ValueError(f"must name each level once ({FORM}), got {text!r}")
    return tuple(levels)


def format_levels(levels: Sequence[Level]) -> str:
    """The inverse of ``parse``."""
    return ",".join(map(str, levels))


def node_path(labels: Mapping[str, str], levels: Sequence[Level]) -> Path:
    """Where a node sits: its value at each level, outermost first (None: no label)."""
    return tuple(labels.get(level.key) for level in levels)


class NoDomainHolds(placement.InsufficientGPUs):
    """GPUs are free, but not inside one domain of a required level."""

    def __init__(self, requested: int, available: int, level: Level, most: int):
        super().__init__(requested, available)
        self.level = level
        self.args = (f"requested {requested} GPUs but no one {level.name} has them free (--topology {level}): "
                     f"at most {most} of the {available} free GPUs are in one {level.name}",)


def plan(free: Mapping[str, int], gpus: int, paths: Mapping[str, Path], levels: Sequence[Level]) -> Plan:
    """``placement.plan`` on the fewest domains at each level, the hosts in ring order
    (``ring_order``); without levels, exactly ``placement.plan``."""
    if not levels:
        return placement.plan(free, gpus)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"GPU count must be an integer of at least 1, got {gpus!r}")
    available = sum(f for f in free.values() if f > 0)
    if available < gpus:
        raise placement.InsufficientGPUs(gpus, available)
    candidates = _candidates(free, paths, levels)
    table = _table(candidates, paths, levels)
    best = _Search(gpus, table, levels).best(candidates, 0)
    if best is None:
        raise _shortage(candidates, gpus, available, table, levels)
    return ring_order(best[1], paths, levels)


def assign(shares: Sequence[int], free: Mapping[str, int], paths: Mapping[str, Path],
           levels: Sequence[Level]) -> list[str] | None:
    """``podgroup.assign`` (a node for each fixed share, at Kueue admission) inside the
    tightest domain that holds the shares: a rack, else a block, and so on out, never
    past a required level; the tightest-fitting domain first, ties by name. Workers of
    equal shares are given their nodes in ring order (``ring_order``)."""
    if not levels:
        return podgroup.assign(shares, free)
    candidates = _candidates(free, paths, levels)
    table = _table(candidates, paths, levels)
    outermost = _innermost_required(levels)  # -1: the whole cluster, when nothing is required
    for level in range(len(levels) - 1, outermost - 1, -1):
        groups = _groups(candidates, table, level) if level >= 0 else [((), candidates)]
        for _, group in sorted(groups, key=lambda kg: (sum(kg[1].values()), kg[0])):
            nodes = podgroup.assign(shares, group)
            if nodes is not None:
                return _equal_shares_in_ring_order(shares, nodes, paths, levels)
    return None


def _equal_shares_in_ring_order(shares: Sequence[int], nodes: list[str], paths: Mapping[str, Path],
                                levels: Sequence[Level]) -> list[str]:
    """A queued job's pods have fixed shares, in a fixed order: only workers of equal
    shares can trade nodes, and they do so the hostfile groups domains as far as it can."""
    ordered = list(nodes)
    workers = range(len(shares) - 1)
    for share in set(shares[:-1]):
        alike = [index for index in workers if shares[index] == share]
        in_ring = sorted((nodes[index] for index in alike), key=lambda node: (*_ring_place(node, nodes[-1], paths,
                                                                                              levels), node))
        for index, node in zip(alike, in_ring):
            ordered[index] = node
    return ordered


def most_in_one_domain(gpus: Mapping[str, int], paths: Mapping[str, Path],
                       levels: Sequence[Level]) -> tuple[int, Level] | None:
    """The most of ``gpus`` (by node) one domain of the innermost required level holds,
    and that level; None when no level is required."""
    index = _innermost_required(levels)
    if index < 0:
        return None
    candidates = _candidates(gpus, paths, levels)
    groups = _groups(candidates, _table(candidates, paths, levels), index)
    return max((sum(group.values()) for _, group in groups), default=0), levels[index]


def ring_order(chosen: Plan, paths: Mapping[str, Path], levels: Sequence[Level]) -> Plan:
    """The workers grouped by domain, the chief's own domains first, the chief last.

    Horovod gives ranks in hostfile order (the chief first) and its ring allreduce passes
    data from each rank to the next: hosts grouped so, neighbours share a domain and the
    ring crosses each boundary between domains only once each way.
    """
    chief = chosen[-1][0]
    workers = sorted(chosen[:-1], key=lambda share: (*_ring_place(share[0], chief, paths, levels), -share[1],
                                                     share[0]))
    return workers + [chosen[-1]]


def _ring_place(node: str, chief: str, paths: Mapping[str, Path], levels: Sequence[Level]) -> tuple:
    """Where a worker goes in the ring: at each level out-in, the chief's domain first, then by name."""
    return tuple(x for level in range(len(levels)) for x in (
        domain(node, paths, level) != domain(chief, paths, level), domain(node, paths, level)))


def describe(chosen: Plan, paths: Mapping[str, Path], levels: Sequence[Level]) -> str:
    """The domains a plan uses, outermost first: "block b1; rack r1, r2"."""
    def value(node: str, index: int) -> str:
        return _values(node, paths, levels)[index] or NO_LABEL

    return "; ".join(f"{level.name} " + ", ".join(sorted({value(node, index) for node, _ in chosen}))
                     for index, level in enumerate(levels))


def domains_used(nodes: Sequence[str], paths: Mapping[str, Path], levels: Sequence[Level]) -> list[int]:
    """How many domains ``nodes`` span at each level, outermost first (a node without a
    level's label counts as a domain of its own)."""
    return [len({domain(node, paths, level) for node in nodes}) for level in range(len(levels))]


def domain(node: str, paths: Mapping[str, Path], level: int) -> Domain:
    """A node's domain at ``level`` (0: the outermost): its path down to it."""
    path = tuple(paths.get(node, ())) + (None,) * (level + 1)
    # A missing label cannot equal any value (label values never hold "<").
    return tuple(f"<{node}>" if value is None else value for value in path[: level + 1])


def _values(node: str, paths: Mapping[str, Path], levels: Sequence[Level]) -> Path:
    """The node's path, one value (or None) per level whatever ``paths`` holds for it."""
    return (tuple(paths.get(node, ())) + (None,) * len(levels))[: len(levels)]


def _innermost_required(levels: Sequence[Level]) -> int:
    return max((index for index, level in enumerate(levels) if level.required), default=-1)


def _candidates(free: Mapping[str, int], paths: Mapping[str, Path], levels: Sequence[Level]) -> dict[str, int]:
    """Nodes with GPUs free, without those whose place at a required level is unknown."""
    required_down_to = _innermost_required(levels)
    return {node: f for node, f in free.items()
            if f > 0 and None not in _values(node, paths, levels)[: required_down_to + 1]}


def _table(nodes: Iterable[str], paths: Mapping[str, Path], levels: Sequence[Level]) -> dict[str, tuple]:
    return {node: tuple(domain(node, paths, level) for level in range(len(levels))) for node in nodes}


def _groups(free: Mapping[str, int], table: Table, level: int) -> list[tuple[Domain, dict[str, int]]]:
    """The domains of ``level`` among ``free``'s nodes, most free GPUs first, ties by name."""
    groups: dict[Domain, dict[str, int]] = {}
    for node, f in free.items():
        groups.setdefault(table[node][level], {})[node] = f
    return sorted(groups.items(), key=lambda kg: (-sum(kg[1].values()), kg[0]))


def _fewest(totals: Sequence[int], gpus: int) -> int | None:
    """How many of ``totals`` (largest first) hold ``gpus`` at the fewest; None if all cannot."""
    held = 0
    for count, total in enumerate(totals, start=1):
        held += total
        if held >= gpus:
            return count
    return None


class _Search:
    """One plan's search: the domains of every candidate node, computed once, and a budget."""

    def __init__(self, gpus: int, table: Table, levels: Sequence[Level]):
        self.gpus = gpus
        self.table = table
        self.levels = levels
        self.required_down_to = _innermost_required(levels)
        self.plans_left = MAX_PLANS_COMPARED

    def best(self, free: dict[str, int], level: int) -> tuple[tuple[int, ...], Plan] | None:
        """The plan within ``free`` with the fewest domains at ``level`` and each level inside
        it, then ``placement``'s rules: (domains per level from ``level`` in, nodes, stranded GPUs), plan."""
        if level == len(self.levels):
            self.plans_left -= 1
            chosen = placement.plan(free, self.gpus)
            return (len(chosen), sum(free[node] for node, _ in chosen) - self.gpus), chosen
        groups = _groups(free, self.table, level)
        totals = [sum(group.values()) for _, group in groups]
        count = 1 if level <= self.required_down_to else _fewest(totals, self.gpus)
        if count is None:
            return None
        pools = list(self.holding_sets(groups, count))
        # The next level's fewest domains is exact and cheap: recurse only where it is least.
        inner_counts = [self.fewest_inside(pool, level + 1) for pool in pools]
        least = min(inner_counts, default=None)
        best = None
        for pool, inner_count in zip(pools, inner_counts):
            if inner_count != least or (best is not None and self.plans_left <= 0):
                continue
            inner = self.best(pool, level + 1)
            if inner is not None and (best is None or inner[0] < best[0]):
                best = inner
        return None if best is None else ((count, *best[0]), best[1])

    def holding_sets(self, groups: list[tuple[Domain, dict[str, int]]], count: int) -> Iterator[dict[str, int]]:
        """The sets of ``count`` domains holding the job, merged; the largest domains first,
        whose first set always holds it (bounded)."""
        for combo in itertools.islice(itertools.combinations(groups, count), MAX_DOMAIN_SETS):
            if sum(sum(group.values()) for _, group in combo) >= self.gpus:
                yield {node: f for _, group in combo for node, f in group.items()}

    def fewest_inside(self, pool: dict[str, int], level: int) -> int:
        """The fewest domains of ``level`` (nodes, past the innermost) inside ``pool`` that hold the job."""
        if level == len(self.levels):
            totals = sorted(pool.values(), reverse=True)
        else:
            totals = [sum(group.values()) for _, group in _groups(pool, self.table, level)]
        return _fewest(totals, self.gpus) or len(totals) + 1


def _shortage(candidates: dict[str, int], gpus: int, available: int, table: Table,
              levels: Sequence[Level]) -> placement.InsufficientGPUs:
    """Why no plan fits: enough GPUs are free, but not inside one domain of a required level."""
    index = _innermost_required(levels)
    most = max((sum(group.values()) for _, group in _groups(candidates, table, index)), default=0)
    return NoDomainHolds(gpus, available, levels[index], most)
