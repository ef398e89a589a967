"""The integer program behind the packing bounds: whole pods on whole nodes.

Per node group, each node takes one *maximal pattern*: a multiset of pod shapes that
fits one node's room and leaves no room for one more pod of any of those shapes. The
pods of a kind fill slots of their shape in the patterns of groups they may use
(slots may stay empty), so a node never holds a fraction of a pod: a 3-core trainer
does not count the 0.4–2.9-core holes beside 2-core services. Every real placement
fits this model (a node's pods extend to a maximal pattern), so the optimum is an
upper bound on what any placement reaches, and it is exact for the shapes placed by
patterns. Where one group's patterns would be too many (many small shapes on big
nodes) its smallest shapes are *pooled* instead: their pods are counted only against
the group's total room beside the patterned pods (a relaxation that stays an upper
bound). `scipy.optimize.milp` (HiGHS) solves it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

__all__ = ["MAX_PATTERNS", "Kind", "Limit", "maximal_patterns", "solve"]

Shape = tuple[int, int, int]  # CPU milli, memory mega, GPUs
Kind = tuple[Shape, int, int]  # (shape, least count, most count)
Limit = tuple[list[int], int]  # per kind: what one pod costs; the most all may cost

MAX_PATTERNS = 500  # per node group; beyond it the group's smallest shapes are pooled


def maximal_patterns(
    room: Shape, shapes: Sequence[Shape], most: int = MAX_PATTERNS
) -> list[tuple[int, ...]] | None:
    """Every maximal way to fill one node's `room` with whole pods of `shapes` (counts
    per shape); None when there are more than `most`."""
    out: list[tuple[int, ...]] = []

    def walk(k: int, left: list[int], counts: list[int]) -> bool:
        if k == len(shapes):
            if any(all(s[d] <= left[d] for d in range(3)) for s in shapes):
                return True  # not maximal: one more pod of some shape fits
            out.append(tuple(counts))
            return len(out) <= most
        shape = shapes[k]
        top = min(left[d] // shape[d] for d in range(3) if shape[d] > 0)
        for n in range(top, -1, -1):
            rest = [left[d] - n * shape[d] for d in range(3)]
            if not walk(k + 1, rest, [*counts, n]):
                return False
        return True

    if not walk(0, list(room), []):
        return None
    return out


def _split(
    room: Shape, shapes: list[Shape], most: int
) -> tuple[list[Shape], list[tuple[int, ...]]]:
    """The shapes placed by patterns (the largest that keep patterns few) and those."""
    exact = sorted(shapes, key=lambda s: (s[2], s[0], s[1]), reverse=True)
    while exact:
        found = maximal_patterns(room, exact, most)
        if found is not None:
            return exact, found
        exact = exact[:-1]  # pool the smallest shape
    return [], []


def solve(
    kinds: Sequence[Kind],
    counts: Sequence[int],
    room: Sequence[Shape],
    cap: float,
    eligible: Sequence[Sequence[bool]],
    limits: Sequence[Limit] = (),
    only: int | None = None,
) -> float:
    """Most CPU the kinds can request on the node groups: `counts[g]` nodes of group g,
    each with `room[g]` left for these pods; kind k may use group g where
    `eligible[k][g]`; every kind between its least and most count (when what must run
    does not fit, as much of it as fits); total CPU within `cap` (or what must run);
    each limit (a namespace quota) bounds its costs. `only`: count one group's CPU."""
    must = sum(shape[0] * lo for shape, lo, _ in kinds)
    model = _model(kinds, counts, room, max(cap, must), eligible, limits, MAX_PATTERNS)
    if model is None:
        return 0.0
    rows, low, high, upper, cpu, groups = model
    kind_rows = range(len(rows) - len(limits) - 1 - len(kinds), len(rows) - len(limits) - 1)
    gain = cpu if only is None else np.where(groups == only, cpu, 0.0)
    for relax in (False, True):
        if relax:  # what must run does not fit: then place as much of it as fits
            low = [(-np.inf if i in kind_rows else v) for i, v in enumerate(low)]
        result = milp(
            -gain,
            constraints=LinearConstraint(np.array(rows), low, high),
            integrality=np.ones(len(upper)),
            bounds=Bounds(0, np.array(upper)),
            options={"time_limit": 20},
        )
        if result.success:
            return float(-result.fun)
        dual = getattr(result, "mip_dual_bound", None)  # stopped early: still an upper bound
        if dual is not None and np.isfinite(dual):
            return float(-dual)
    return 0.0


def fits(
    kinds: Sequence[Kind],
    counts: Sequence[int],
    room: Sequence[Shape],
    cap: float,
    eligible: Sequence[Sequence[bool]],
    limits: Sequence[Limit] = (),
    max_patterns: int = MAX_PATTERNS,
) -> bool:
    """Whether every kind's least count fits at once within `cap` CPU (the model of
    `solve`; with pooled shapes it may say yes where no placement exists, never the
    reverse)."""
    model = _model(kinds, counts, room, cap, eligible, limits, max_patterns)
    if model is None:
        return all(lo <= 0 for _, lo, _ in kinds)
    rows, low, high, upper, _, _ = model
    result = milp(
        np.zeros(len(upper)),
        constraints=LinearConstraint(np.array(rows), low, high),
        integrality=np.ones(len(upper)),
        bounds=Bounds(0, np.array(upper)),
        options={"time_limit": 20},
    )
    return bool(result.status == 0)


Model = tuple[list[np.ndarray], list[float], list[float], list[float], np.ndarray, np.ndarray]


def _model(
    kinds: Sequence[Kind],
    counts: Sequence[int],
    room: Sequence[Shape],
    cap: float,
    eligible: Sequence[Sequence[bool]],
    limits: Sequence[Limit],
    max_patterns: int,
) -> Model | None:
    """Rows (with their low and high), the columns' upper bounds, each column's CPU and
    node group; the kinds' rows come last but for the limits' and the CPU row."""
    n_kinds = len(kinds)
    columns: list[tuple[str, int, int | tuple[int, ...]]] = []  # (what, group, kind/pattern)
    upper: list[float] = []
    slot_rows: list[tuple[int, Shape, list[Shape]]] = []
    for g, nodes in enumerate(counts):
        allowed = [k for k in range(n_kinds) if eligible[k][g] and nodes > 0]
        if not allowed:
            continue
        shapes = sorted({kinds[k][0] for k in allowed if any(kinds[k][0])})
        exact, patterns = _split(room[g], shapes, max_patterns)
        for pattern in patterns:
            columns.append(("node", g, pattern))
            upper.append(nodes)
        slot_rows.append((g, room[g], exact))
        for k in allowed:
            shape, _, most = kinds[k]
            fit = min((room[g][d] // shape[d] for d in range(3) if shape[d] > 0), default=most)
            columns.append(("pods", g, k))
            upper.append(max(0, min(most, nodes * fit)))
    size = len(columns)
    if size == 0:
        return None
    rows: list[np.ndarray] = []
    low: list[float] = []
    high: list[float] = []

    def row_of(values: dict[int, float], lo: float, hi: float) -> None:
        row = np.zeros(size)
        for i, v in values.items():
            row[i] = v
        rows.append(row)
        low.append(lo)
        high.append(hi)

    for g, node_room, exact in slot_rows:
        mine = [i for i, col in enumerate(columns) if col[1] == g]
        patterned = [i for i in mine if columns[i][0] == "node"]
        if patterned:  # one pattern per node
            row_of({i: 1.0 for i in patterned}, -np.inf, counts[g])
        for s, shape in enumerate(exact):  # pods of a patterned shape fill its slots
            values = {i: 1.0 for i in mine if columns[i][0] == "pods"
                      and kinds[int(columns[i][2])][0] == shape}  # type: ignore[arg-type]
            values.update({i: -float(columns[i][2][s]) for i in patterned})  # type: ignore[index]
            row_of(values, -np.inf, 0)
        for d in range(3):  # all pods within the group's room (pooled ones: only this)
            values = {i: float(kinds[int(columns[i][2])][0][d])  # type: ignore[arg-type]
                      for i in mine if columns[i][0] == "pods"}
            row_of(values, -np.inf, counts[g] * node_room[d])
    pods_of = [(i, int(col[2])) for i, col in enumerate(columns)  # type: ignore[arg-type]
               if col[0] == "pods"]
    for k, (_, lo, hi) in enumerate(kinds):
        row_of({i: 1.0 for i, kk in pods_of if kk == k}, lo, hi)
    for costs, most in limits:  # namespace quotas
        row_of({i: float(costs[k]) for i, k in pods_of}, -np.inf, most)
    cpu = np.zeros(size)
    for i, k in pods_of:
        cpu[i] = kinds[k][0][0]
    rows.append(cpu)
    low.append(-np.inf)
    high.append(cap)
    groups = np.array([col[1] for col in columns])
    return rows, low, high, upper, cpu, groups
