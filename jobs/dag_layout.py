"""Layered left-to-right layout of a dependency graph (pure: no Django, no database).

Layering is by longest path from a root: a node sits one layer right of its deepest parent, so
every edge points rightwards. Within a layer, nodes are ordered by a few barycentre sweeps (each
node moves to the mean position of its neighbours in the layers already placed), which removes
most edge crossings of the graphs people draw (chains, fan-out, fan-in, diamonds) at O(sweeps x
edges) cost; an exact crossing minimisation is NP-hard and not worth it for a picture.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# Down-and-up sweep pairs; more rarely changes the order of graphs of a few hundred nodes.
SWEEPS = 4
# Bend slots are one per layer an edge passes; a dense graph with long edges could need
# millions, so past this many long edges are drawn straight across instead.
MAX_BENDS = 5000


@dataclass(frozen=True)
class Layout(Generic[K]):
    """``layers[i]`` holds the nodes of the i-th column, top to bottom; ``position[k]`` is
    (layer, slot). An edge spanning several layers passes through one slot of each layer in
    between (``bends[(a, b)]``), so it is routed around the nodes there instead of through
    them; ``slots[i]`` is how many slots column i has, nodes and bends together."""

    layers: list[list[K]]
    position: dict[K, tuple[int, int]]
    bends: dict[tuple[K, K], list[tuple[int, int]]]
    slots: list[int]

    @property
    def width(self) -> int:
        return len(self.layers)

    @property
    def height(self) -> int:
        return max(self.slots, default=0)


def longest_path_layers(nodes: Sequence[K], edges: Iterable[tuple[K, K]]) -> dict[K, int]:
    """Layer of each node: 0 for roots, else 1 + the deepest parent's layer.

    Edges naming a node outside ``nodes`` and self-loops are ignored. Should the edges hold a
    cycle (the services refuse them; a drawing must not loop forever on bad data), the nodes on
    it are put one layer right of everything else.
    """
    known = set(nodes)
    children: dict[K, list[K]] = defaultdict(list)
    indegree = dict.fromkeys(nodes, 0)
    for parent, child in set(edges):
        if parent in known and child in known and parent != child:
            children[parent].append(child)
            indegree[child] += 1
    layer = dict.fromkeys(nodes, 0)
    ready = deque(node for node in nodes if indegree[node] == 0)
    done = 0
    while ready:
        node = ready.popleft()
        done += 1
        for child in children[node]:
            layer[child] = max(layer[child], layer[node] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if done < len(nodes):
        last = max((layer[n] for n in nodes if indegree[n] == 0), default=-1) + 1
        for node in nodes:
            if indegree[node] > 0:
                layer[node] = last
    return layer


def _sweep(
    columns: list[list[Hashable]],
    row: dict[Hashable, int],
    neighbours: dict[Hashable, list[Hashable]],
    order: range,
) -> None:
    for index in order:
        column = columns[index]

        def barycentre(slot: Hashable) -> tuple[float, int]:
            placed = neighbours.get(slot)
            # A slot without neighbours on that side keeps its place; the current row breaks
            # ties, so the order is deterministic and stable across sweeps.
            if not placed:
                return float(row[slot]), row[slot]
            return sum(row[n] for n in placed) / len(placed), row[slot]

        column.sort(key=barycentre)
        for position, slot in enumerate(column):
            row[slot] = position


def layered_layout(nodes: Sequence[K], edges: Iterable[tuple[K, K]]) -> Layout[K]:
    """Columns by longest-path layer, rows by barycentre; the input order seeds the rows."""
    edge_list = list(dict.fromkeys(edges))
    unique = list(dict.fromkeys(nodes))
    layer = longest_path_layers(unique, edge_list)
    count = max(layer.values(), default=-1) + 1
    # Slots are ("n", node) for nodes and ("b", parent, child, layer) for an edge's bends.
    columns: list[list[Hashable]] = [[] for _ in range(count)]
    for node in unique:
        columns[layer[node]].append(("n", node))
    left: dict[Hashable, list[Hashable]] = defaultdict(list)
    right: dict[Hashable, list[Hashable]] = defaultdict(list)
    chains: dict[tuple[K, K], list[Hashable]] = {}
    forward = [(a, b) for a, b in edge_list if a in layer and b in layer and layer[a] < layer[b]]
    bend = sum(layer[b] - layer[a] - 1 for a, b in forward) <= MAX_BENDS
    for a, b in forward:
        span = range(layer[a] + 1, layer[b]) if bend else range(0)
        chain: list[Hashable] = [("b", a, b, i) for i in span]
        for slot, i in zip(chain, span, strict=True):
            columns[i].append(slot)
        chains[(a, b)] = chain
        path = [("n", a), *chain, ("n", b)]
        for upper, lower in itertools.pairwise(path):
            left[lower].append(upper)
            right[upper].append(lower)
    row = {slot: position for column in columns for position, slot in enumerate(column)}
    for _ in range(SWEEPS):
        _sweep(columns, row, left, range(1, count))
        _sweep(columns, row, right, range(count - 2, -1, -1))
    return Layout(
        layers=[[slot[1] for slot in column if slot[0] == "n"] for column in columns],  # type: ignore[index]
        position={node: (layer[node], row[("n", node)]) for node in unique},
        bends={
            edge: [(int(slot[3]), row[slot]) for slot in chain]  # type: ignore[index]
            for edge, chain in chains.items()
        },
        slots=[len(column) for column in columns],
    )


def crossings(layout: Layout[K], edges: Iterable[tuple[K, K]]) -> int:
    """Edge crossings between adjacent layers (for tests and for judging the sweeps)."""
    by_gap: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for a, b in set(edges):
        (la, ra), (lb, rb) = layout.position[a], layout.position[b]
        if lb == la + 1:
            by_gap[la].append((ra, rb))
    total = 0
    for pairs in by_gap.values():
        for i, (a1, b1) in enumerate(pairs):
            for a2, b2 in pairs[i + 1 :]:
                if (a1 - a2) * (b1 - b2) < 0:
                    total += 1
    return total
