"""Random GLS problems for the tree GLS tests (``postprocess.gls``, ``postprocess.gls_areas``): schemas with
recodes (unequal groups, nested and crossing recodes of one attribute, several recoded attributes), queries, σ²
and invariants on random trees, and the pl94-2020 shape in miniature."""

from __future__ import annotations

from math import prod

import numpy as np

from censusdp.postprocess.gls import GlsInvariant, GlsLevel, GlsQuery
from censusdp.postprocess.gls_algebra import QuerySpec, answer
from censusdp.postprocess.gls_stream import Reader, StreamLevel
from tests.helpers.gls_reference import aggregation, random_tree

Recodes = dict[int, list[tuple[int, ...]]]


def random_partition(rng: np.random.Generator, n: int, k: int) -> tuple[int, ...]:
    """n values into k non-empty groups, cells numbered 0..k-1, of random (mostly unequal) sizes."""
    labels = np.concatenate([np.arange(k), rng.integers(0, k, size=n - k)])
    return tuple(int(v) for v in rng.permutation(labels))


def random_schema(rng: np.random.Generator) -> tuple[tuple[int, ...], Recodes]:
    """2-3 attributes of 2-5 values (at most 60 cells); 1-2 of them recoded, by one partition, a nested pair
    (a coarsening of the first) or a crossing pair."""
    while True:
        shape = tuple(int(n) for n in rng.integers(2, 6, size=int(rng.integers(2, 4))))
        if prod(shape) <= 60 and max(shape) >= 3:
            break
    candidates = [a for a, n in enumerate(shape) if n >= 3]
    recoded = rng.choice(candidates, size=min(len(candidates), int(rng.integers(1, 3))), replace=False)
    recodes: Recodes = {}
    for a in recoded:
        n = shape[a]
        fine = random_partition(rng, n, int(rng.integers(2, n)))
        recodes[int(a)] = [fine]
        kind = rng.integers(0, 3)
        if kind == 1 and max(fine) >= 2:  # nested: a coarsening of the first
            merge = random_partition(rng, max(fine) + 1, int(rng.integers(2, max(fine) + 1)))
            recodes[int(a)].append(tuple(merge[g] for g in fine))
        elif kind == 2:  # another partition, crossing the first
            recodes[int(a)].append(random_partition(rng, n, int(rng.integers(2, n))))
    return shape, recodes


def random_spec(rng: np.random.Generator, shape: tuple[int, ...], recodes: Recodes) -> QuerySpec:
    axes, groups = [], []
    for a in rng.permutation(len(shape)):
        choice = rng.integers(0, 3)
        if choice == 0:
            continue
        axes.append(int(a))
        options = recodes.get(int(a), [])
        groups.append(options[int(rng.integers(0, len(options)))] if choice == 2 and options else None)
    return QuerySpec(tuple(axes), tuple(groups))


def make_problem(rng: np.random.Generator, depth: int, with_invariants: bool, recoded: bool = True, most: int = 3):
    """A random tree (1..``most`` children per node) with random queries (recodes unless ``recoded`` is False),
    σ² and invariants on it: (shape, recodes, aggregation matrices, levels)."""
    shape, recodes = random_schema(rng)
    recodes = recodes if recoded else {}
    parents = random_tree(rng, depth, most)
    g = aggregation(parents)
    truth = rng.integers(0, 20, size=(g[-1].shape[1], prod(shape))).astype(float)
    detailed = QuerySpec(tuple(range(len(shape))))
    invariant_specs = []  # (spec, deepest level it holds at): a contiguous run of levels from the root
    if with_invariants:
        for spec in (QuerySpec(()), random_spec(rng, shape, recodes))[: int(rng.integers(1, 3))]:
            invariant_specs.append((spec, int(rng.integers(0, depth))))
    levels = []
    for i, parent in enumerate(parents):
        node_truth = g[i] @ truth
        specs = [random_spec(rng, shape, recodes) for _ in range(int(rng.integers(0 if 0 < i < depth - 1 else 1, 4)))]
        if i == depth - 1:
            specs.append(detailed)
        queries = [GlsQuery(s.axes, float(rng.uniform(0.3, 20)), answer(node_truth, shape, s)
                            + rng.normal(0, 3, (len(node_truth), prod(s.cells(shape)))), s.groups) for s in specs]
        invariants = [GlsInvariant(s.axes, answer(node_truth, shape, s), s.groups)
                      for s, deepest in invariant_specs if i <= deepest]
        levels.append(GlsLevel(parent=parent, queries=queries, invariants=invariants))
    return shape, recodes, g, levels


def random_plan(rng: np.random.Generator, parent: np.ndarray, n: int) -> list[tuple[int, int]]:
    """Consecutive node ranges covering [0, n), cut at a random subset of the family boundaries."""
    boundaries = [i for i in range(1, n) if len(parent) and parent[i] != parent[i - 1]]
    cuts = [0, *(b for b in boundaries if rng.random() < 0.5), n]
    return list(zip(cuts, cuts[1:], strict=False))


def as_stream(rng: np.random.Generator, levels: list[GlsLevel]) -> tuple[list[StreamLevel], Reader]:
    """The levels of ``solve_gls`` as ``solve_gls_streamed`` takes them, with random chunk plans, and a reader
    that serves their data by node range."""
    out = []
    for i, level in enumerate(levels):
        n = len(level.parent) if i else 1
        out.append(StreamLevel(level.parent, [(q.spec, q.sigma2) for q in level.queries],
                               [v.spec for v in level.invariants], random_plan(rng, level.parent, n)))

    def read(level: int, start: int, stop: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return ([q.noisy[start:stop] for q in levels[level].queries],
                [v.values[start:stop] for v in levels[level].invariants])

    return out, read


# --- the pl94-2020 shape in miniature: hhgq (8 values) grouped by hhinstlevels, votingage -----------------------

INST = (0, 1, 1, 1, 1, 2, 2, 2)  # household, institutional (4), non-institutional (3)
SHAPE = (8, 2)


def mini_levels(with_total: bool = True, invariant_levels: tuple[int, ...] = (0, 1)) -> tuple[list, list]:
    rng = np.random.default_rng(7)  # test-only
    parents = random_tree(rng, 3)
    g = aggregation(parents)
    truth = rng.integers(0, 20, size=(g[-1].shape[1], 16)).astype(float)
    inst = QuerySpec((0,), (INST,))
    levels = []
    for i, parent in enumerate(parents):
        node = g[i] @ truth
        specs = [QuerySpec((1, 0), (None, INST)), QuerySpec((0, 1)), QuerySpec(())]
        queries = [GlsQuery(s.axes, 2.0 + k, answer(node, SHAPE, s) + 1.5, s.groups) for k, s in enumerate(specs)]
        total = with_total and i in invariant_levels
        invariants = [GlsInvariant((), answer(node, SHAPE, QuerySpec(())))] if total else []
        if i == 0:
            invariants.append(GlsInvariant(inst.axes, answer(node, SHAPE, inst), inst.groups))
        levels.append(GlsLevel(parent, queries, invariants))
    return g, levels
