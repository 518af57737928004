"""Server-rendered SVG of a job's dependency graph, coloured by each job's last run state.

The markup is self-contained (inline styles, no scripts, no external fonts or stylesheets), so
the admin and the status pages embed it as is and a browser shows it without a build step; every
text and attribute value is escaped. ``render_svg`` is pure (plain data in, markup out);
``dag_svg`` reads the graph through ``jobs.selectors.job_graph``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from jobs.dag_layout import layered_layout

if TYPE_CHECKING:
    from jobs.models import Job

NODE_W, NODE_H = 190, 34
GAP_X, GAP_Y = 56, 14
MARGIN = 12
LEGEND_H = 26
LABEL_MAX = 26
NEVER_RAN = ""

# (fill, stroke) per last run state; NEVER_RAN is a job with no run yet.
STATE_COLOURS: dict[str, tuple[str, str]] = {
    "succeeded": ("#c8e6c9", "#2e7d32"),
    "running": ("#bbdefb", "#1565c0"),
    "queued": ("#e3f2fd", "#1976d2"),
    "pending": ("#f1f8fe", "#64b5f6"),
    "retry_wait": ("#ffe0b2", "#ef6c00"),
    "failed": ("#ffcdd2", "#c62828"),
    "dead": ("#ef9a9a", "#b71c1c"),
    "upstream_failed": ("#f8bbd0", "#ad1457"),
    "skipped": ("#eeeeee", "#757575"),
    "missed": ("#eeeeee", "#757575"),
    "cancelled": ("#e0e0e0", "#424242"),
    NEVER_RAN: ("#ffffff", "#9e9e9e"),
}
UNKNOWN_COLOURS = ("#fff9c4", "#9e9d24")
STATE_LABELS = {NEVER_RAN: "no run yet", "upstream_failed": "upstream failed"}


@dataclass(frozen=True)
class DrawNode:
    key: str
    label: str
    state: str = NEVER_RAN
    href: str = ""
    # The job whose page shows the drawing: outlined more strongly.
    focus: bool = False


def _short(label: str) -> str:
    return label if len(label) <= LABEL_MAX else label[: LABEL_MAX - 1] + "\u2026"


def _state_label(state: str) -> str:
    return STATE_LABELS.get(state, state.replace("_", " "))


def _node_markup(node: DrawNode, x: int, y: int) -> str:
    fill, stroke = STATE_COLOURS.get(node.state, UNKNOWN_COLOURS)
    width = 3 if node.focus else 1.5
    title = f"{node.label} \u2014 last run: {_state_label(node.state)}"
    body = (
        f'<g class="dag-node" data-state="{escape(node.state)}"><title>{escape(title)}</title>'
        f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{width}"/>'
        f'<text x="{x + 10}" y="{y + NODE_H // 2 + 4}" font-size="12" '
        f'font-family="sans-serif" fill="#212121">{escape(_short(node.label))}</text></g>'
    )
    if node.href:
        return f'<a href="{escape(node.href)}">{body}</a>'
    return body


def _edge_markup(points: list[tuple[int, int]], marker: str) -> str:
    """A path through (exit, entry) pairs: curves across the gaps between columns, straight
    lines across the columns an edge passes through."""
    (x, y), rest = points[0], points[1:]
    parts = [f"M{x},{y}"]
    for index, (nx, ny) in enumerate(rest):
        if index % 2 == 0:
            bend = GAP_X // 2
            end = nx - 2 if index == len(rest) - 1 else nx
            parts.append(f"C{x + bend},{y} {nx - bend},{ny} {end},{ny}")
        else:
            parts.append(f"L{nx},{ny}")
        x, y = nx, ny
    return (
        f'<path d="{" ".join(parts)}" fill="none" stroke="#607d8b" stroke-width="1.3" '
        f'marker-end="url(#{marker})"/>'
    )


def _legend_markup(states: list[str], top: int) -> str:
    parts, x = [], MARGIN
    for state in states:
        fill, stroke = STATE_COLOURS.get(state, UNKNOWN_COLOURS)
        label = escape(_state_label(state))
        parts.append(
            f'<rect x="{x}" y="{top + 6}" width="12" height="12" rx="2" fill="{fill}" '
            f'stroke="{stroke}"/><text x="{x + 16}" y="{top + 16}" font-size="11" '
            f'font-family="sans-serif" fill="#424242">{label}</text>'
        )
        x += 16 + 6 * len(_state_label(state)) + 14
    return f'<g class="dag-legend">{"".join(parts)}</g>'


def render_svg(
    nodes: Sequence[DrawNode], edges: Sequence[tuple[str, str]], *, note: str = ""
) -> str:
    """The graph as SVG markup; edges go parent -> child, left to right. "" without edges."""
    # Seeded by name, so the same graph gives the same picture whatever order it was read in.
    by_key = {node.key: node for node in sorted(nodes, key=lambda n: (n.label, n.key))}
    drawn = [(a, b) for a, b in edges if a in by_key and b in by_key and a != b]
    if not drawn:
        return ""
    layout = layered_layout(list(by_key), drawn)
    rows = layout.height

    def place(column: int, slot: int) -> tuple[int, int]:
        # Short columns are centred against the tallest one.
        offset = (rows - layout.slots[column]) * (NODE_H + GAP_Y) // 2
        return MARGIN + column * (NODE_W + GAP_X), MARGIN + offset + slot * (NODE_H + GAP_Y)

    xy = {key: place(*layout.position[key]) for keys in layout.layers for key in keys}
    graph_h = rows * (NODE_H + GAP_Y) - GAP_Y
    width = max(2 * MARGIN + layout.width * (NODE_W + GAP_X) - GAP_X, 360)
    legend_top = MARGIN + graph_h + 6
    height = legend_top + LEGEND_H + (16 if note else 0) + MARGIN // 2
    # Unique per graph, so two drawings on one page do not share (and clash on) marker ids.
    digest = hashlib.blake2b("|".join(sorted(by_key)).encode(), digest_size=4).hexdigest()
    marker = f"dag-arrow-{digest}"
    edge_parts = []
    mid = NODE_H // 2
    for a, b in sorted(set(drawn)):
        (xa, ya), (xb, yb) = xy[a], xy[b]
        points = [(xa + NODE_W, ya + mid)]
        for bx, by in (place(*bend) for bend in layout.bends.get((a, b), [])):
            points += [(bx, by + mid), (bx + NODE_W, by + mid)]
        points.append((xb, yb + mid))
        edge_parts.append(_edge_markup(points, marker))
    node_parts = [_node_markup(by_key[key], *xy[key]) for key in xy]
    order = list(STATE_COLOURS)
    present = sorted({node.state for node in by_key.values()}, key=lambda s: _legend_rank(s, order))
    note_markup = (
        f'<text class="dag-note" x="{MARGIN}" y="{legend_top + LEGEND_H + 10}" font-size="11" '
        f'font-family="sans-serif" fill="#b71c1c">{escape(note)}</text>'
        if note
        else ""
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" role="img" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
        f"<title>dependency graph: {len(by_key)} jobs, {len(set(drawn))} edges</title>"
        f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        f'fill="#607d8b"/></marker></defs>'
        f'<g class="dag-edges">{"".join(edge_parts)}</g>'
        f'<g class="dag-nodes">{"".join(node_parts)}</g>'
        f"{_legend_markup(present, legend_top)}{note_markup}</svg>"
    )


def _legend_rank(state: str, order: list[str]) -> tuple[int, str]:
    return (order.index(state) if state in order else len(order), state)


def dag_svg(
    job: Job,
    *,
    last_states: bool = True,
    link: Callable[[Job], str] | None = None,
    limit: int | None = None,
) -> str:
    """The SVG of ``job``'s dependency graph, "" when it has no edges.

    The whole DAG the job belongs to (every job connected to it) when it fits the bound of
    ``jobs.selectors_graph.GRAPH_MAX_JOBS``; else only the job's ancestors and descendants,
    cut at that bound, with a note saying so (``limit`` lowers the bound). ``last_states``
    colours each job by its latest run's state; ``link`` gives each node's URL (the admin
    passes its change page).
    """
    from jobs.models import JobDependency
    from jobs.selectors_graph import GRAPH_MAX_JOBS, job_graph

    # Most jobs have no edges: two index probes instead of the graph's five queries.
    rows = JobDependency.objects
    if not (rows.filter(child=job).exists() or rows.filter(parent=job).exists()):
        return ""
    bound = limit or GRAPH_MAX_JOBS
    graph = job_graph(job, whole_dag=True, last_states=last_states, limit=bound)
    if graph.truncated:
        graph = job_graph(job, last_states=last_states, limit=bound)
    if not graph.edges:
        return ""
    nodes = [
        DrawNode(
            key=str(node.id),
            label=node.name,
            state=graph.last_states.get(node.id, NEVER_RAN) if last_states else NEVER_RAN,
            href=link(node) if link is not None else "",
            focus=node.id == job.id,
        )
        for node in graph.jobs
    ]
    edges = [(str(parent), str(child)) for parent, child in graph.edges]
    note = ""
    if graph.truncated:
        note = f"only {len(graph.jobs)} of this job's ancestors and descendants are shown"
    elif not graph.whole_dag:
        note = "the whole DAG is too large to draw: this job's ancestors and descendants only"
    return render_svg(nodes, edges, note=note)
