"""Layered left-to-right layout of a dependency graph (pure: no Django, no database).

Layering is by longest path from a root: a node sits one layer right of its deepest parent, so
every edge points rightwards. Within a layer, nodes are ordered by a few barycentre sweeps (each
node moves to the mean position of its neighbours in the layers already placed), which removes
most edge crossings of the graphs people draw (chains, fan-out, fan-in, diamonds) at O(sweeps x
edges) cost; an exact crossing minimisation is NP-hard and not worth it for a picture.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# Down-and-up sweep pairs; more rarely changes the order of graphs of a few hundred nodes.
SWEEPS = 4


@dataclass(frozen=True)
class Layout(Generic[K]):
    """``layers[i]`` is the i-th column, top to bottom; ``position[k]`` = (layer, row)."""

    layers: list[list[K]]
    position: dict[K, tuple[int, int]]

    @property
    def width(self) -> int:
        return len(self.layers)

    @property
    def height(self) -> int:
        return max((len(layer) for layer in self.layers), default=0)


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


def _neighbours(
    edges: Iterable[tuple[K, K]], layer: dict[K, int]
) -> tuple[dict[K, list[K]], dict[K, list[K]]]:
    left: dict[K, list[K]] = defaultdict(list)
    right: dict[K, list[K]] = defaultdict(list)
    for a, b in set(edges):
        if a in layer and b in layer and layer[a] < layer[b]:
            left[b].append(a)
            right[a].append(b)
    return left, right


def _sweep(
    columns: list[list[K]], row: dict[K, int], neighbours: dict[K, list[K]], order: range
) -> None:
    for index in order:
        column = columns[index]

        def barycentre(node: K) -> tuple[float, int]:
            placed = neighbours.get(node)
            # A node without neighbours on that side keeps its place; the current row breaks
            # ties, so the order is deterministic and stable across sweeps.
            if not placed:
                return float(row[node]), row[node]
            return sum(row[n] for n in placed) / len(placed), row[node]

        column.sort(key=barycentre)
        for position, node in enumerate(column):
            row[node] = position


def layered_layout(nodes: Sequence[K], edges: Iterable[tuple[K, K]]) -> Layout[K]:
    """Columns by longest-path layer, rows by barycentre; the input order seeds the rows."""
    edge_list = list(edges)
    layer = longest_path_layers(nodes, edge_list)
    count = max(layer.values(), default=-1) + 1
    columns: list[list[K]] = [[] for _ in range(count)]
    for node in dict.fromkeys(nodes):
        columns[layer[node]].append(node)
    row = {node: position for column in columns for position, node in enumerate(column)}
    left, right = _neighbours(edge_list, layer)
    for _ in range(SWEEPS):
        _sweep(columns, row, left, range(1, count))
        _sweep(columns, row, right, range(count - 2, -1, -1))
    position = {node: (layer[node], row[node]) for node in row}
    return Layout(layers=columns, position=position)


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
