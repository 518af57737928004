"""Server-rendered SVG charts: line charts, stacked bars and run timelines.

Pure functions of their data (no Django, no clock), so a page renders the same bytes for the
same numbers and a browser needs no JavaScript to draw them. Every text that comes from data
is escaped; hover text is an SVG ``<title>``. Colours come from CSS classes (status.css), so
the charts follow the page's palette. The root ``<svg>`` carries ``data-points``, the number of
data marks drawn, so tests and the browser check can tell an empty chart from a drawn one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

Format = Callable[[float], str]

# Extra attempts drawn above a run's dot; the hover text gives the exact count beyond it.
MAX_EXTRA_ATTEMPTS = 6
# Candidate tick steps for a time axis, in seconds: minutes to days.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400)  # fmt: skip


@dataclass(frozen=True)
class Frame:
    """Pixel geometry of a chart: the whole image and the plot area inside the margins."""

    width: int = 720
    height: int = 220
    left: int = 60
    right: int = 16
    top: int = 28
    bottom: int = 40

    @property
    def plot_width(self) -> float:
        return float(self.width - self.left - self.right)

    @property
    def plot_height(self) -> float:
        return float(self.height - self.top - self.bottom)


@dataclass(frozen=True)
class Scale:
    """Linear map from data values in [lo, hi] to pixels in [start, end]."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = self.hi - self.lo
        fraction = (value - self.lo) / span if span else 0.0
        return round(self.start + fraction * (self.end - self.start), 1)


@dataclass(frozen=True)
class Series:
    """One named line (or one layer of stacked bars); ``None`` leaves a gap."""

    name: str
    points: Sequence[tuple[float, float | None]]
    css: str = "s0"


@dataclass(frozen=True)
class Mark:
    """One run on a timeline: where, its state (a CSS class), attempts, hover text, link."""

    x: float
    state: str
    attempts: int
    label: str
    href: str = ""


@dataclass(frozen=True)
class Axes:
    x_format: Format
    y_format: Format = field(default=lambda v: _plain(v))
    x_label: str = ""
    y_label: str = ""


def _plain(value: float) -> str:
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.3g}"


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= value (1 for nothing to show)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= factor * power * (1 + 1e-9):
            return factor * power
    return 10.0 * power  # pragma: no cover - the loop always returns


def value_ticks(hi: float) -> list[float]:
    """Ticks from 0 to ``hi`` (a nice ceiling) on round steps: 5 for 1, 2.5, 5 x 10^k, else 4."""
    power = 10.0 ** math.floor(math.log10(hi)) if hi > 0 else 1.0
    count = 4 if math.isclose(hi / power, 2.0) else 5
    return [hi * i / count for i in range(count + 1)]


def time_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Ticks on round instants (whole minutes, quarter hours, hours...) within [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return [lo]
    step = next((s for s in _TIME_STEPS if span / s <= most), _TIME_STEPS[-1])
    first = math.ceil(lo / step) * step
    ticks: list[float] = []
    tick = float(first)
    while tick <= hi + 1e-9:
        ticks.append(tick)
        tick += step
    return ticks


def _open(frame: Frame, title: str, points: int, kind: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-{kind}" '
        f'viewBox="0 0 {frame.width} {frame.height}" width="{frame.width}" '
        f'height="{frame.height}" role="img" aria-label="{escape(title)}" '
        f'data-points="{points}">',
        f"<title>{escape(title)}</title>",
        f'<text class="chart-title" x="{frame.left}" y="16">{escape(title)}</text>',
    ]


def _empty(frame: Frame, title: str, kind: str, message: str) -> str:
    parts = _open(frame, title, 0, kind)
    parts.append(
        f'<rect class="plot" x="{frame.left}" y="{frame.top}" width="{frame.plot_width:g}" '
        f'height="{frame.plot_height:g}"/>'
    )
    parts.append(
        f'<text class="empty" x="{frame.left + frame.plot_width / 2:g}" '
        f'y="{frame.top + frame.plot_height / 2:g}" text-anchor="middle">{escape(message)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _axes(frame: Frame, xs: Scale, ys: Scale | None, x_ticks: Sequence[float],
          y_ticks: Sequence[float], axes: Axes) -> list[str]:  # fmt: skip
    bottom = frame.top + frame.plot_height
    parts = [
        f'<rect class="plot" x="{frame.left}" y="{frame.top}" width="{frame.plot_width:g}" '
        f'height="{frame.plot_height:g}"/>'
    ]
    for tick in x_ticks:
        px = xs(tick)
        parts.append(f'<line class="grid" x1="{px}" y1="{frame.top}" x2="{px}" y2="{bottom:g}"/>')
        parts.append(
            f'<text class="tick" x="{px}" y="{bottom + 14:g}" text-anchor="middle">'
            f"{escape(axes.x_format(tick))}</text>"
        )
    if ys is not None:
        for tick in y_ticks:
            py = ys(tick)
            parts.append(
                f'<line class="grid" x1="{frame.left}" y1="{py}" '
                f'x2="{frame.left + frame.plot_width:g}" y2="{py}"/>'
            )
            parts.append(
                f'<text class="tick" x="{frame.left - 6}" y="{py + 4}" text-anchor="end">'
                f"{escape(axes.y_format(tick))}</text>"
            )
    if axes.x_label:
        parts.append(
            f'<text class="axis-label" x="{frame.left + frame.plot_width:g}" '
            f'y="{frame.height - 4}" text-anchor="end">{escape(axes.x_label)}</text>'
        )
    if axes.y_label:
        parts.append(
            f'<text class="axis-label" x="4" y="{frame.top - 6}">{escape(axes.y_label)}</text>'
        )
    return parts


def _legend(frame: Frame, series: Sequence[Series]) -> list[str]:
    """One swatch and name per series, left to right under the x axis, clear of the title."""
    parts: list[str] = []
    x = frame.left
    y = frame.height - 6
    for item in series:
        parts.append(
            f'<g class="legend {escape(item.css)}"><rect x="{x}" y="{y - 9}" width="10" '
            f'height="10"/><text x="{x + 13}" y="{y}">{escape(item.name)}</text></g>'
        )
        x += 24 + 7 * len(item.name)
    return parts


def line_chart(series: Sequence[Series], *, title: str, axes: Axes,
               x_range: tuple[float, float] | None = None, frame: Frame = Frame(),
               empty: str = "No data in this window") -> str:  # fmt: skip
    """Several series over one x axis; y starts at 0. Each point is a circle with a title."""
    drawn = [(x, y) for s in series for x, y in s.points if y is not None]
    if not drawn:
        return _empty(frame, title, "line", empty)
    x_lo, x_hi = x_range or (min(x for x, _ in drawn), max(x for x, _ in drawn))
    y_hi = nice_ceiling(max(y for _, y in drawn))
    xs = Scale(x_lo, x_hi, frame.left, frame.left + frame.plot_width)
    ys = Scale(0.0, y_hi, frame.top + frame.plot_height, frame.top)
    parts = _open(frame, title, len(drawn), "line")
    parts += _axes(frame, xs, ys, time_ticks(x_lo, x_hi), value_ticks(y_hi), axes)
    for item in series:
        css = escape(item.css)
        path: list[str] = []
        pen_down = False
        for x, y in item.points:
            if y is None:
                pen_down = False
                continue
            path.append(f"{'L' if pen_down else 'M'}{xs(x)},{ys(y)}")
            pen_down = True
        if path:
            parts.append(f'<path class="line {css}" d="{" ".join(path)}"/>')
        for x, y in item.points:
            if y is None:
                continue
            hover = f"{item.name} at {axes.x_format(x)}: {axes.y_format(y)}"
            parts.append(
                f'<circle class="point {css}" cx="{xs(x)}" cy="{ys(y)}" r="2.5">'
                f"<title>{escape(hover)}</title></circle>"
            )
    parts += _legend(frame, series)
    parts.append("</svg>")
    return "".join(parts)


def stacked_bar_chart(stacks: Sequence[Series], *, title: str, axes: Axes, bucket: float,
                      x_range: tuple[float, float] | None = None, frame: Frame = Frame(),
                      empty: str = "Nothing in this window") -> str:  # fmt: skip
    """Bars of width ``bucket`` (x units) starting at each x, layers stacked in series order.

    Only non-zero layers are drawn (and counted in data-points); an all-zero window is the
    empty state."""
    totals: dict[float, float] = {}
    for layer in stacks:
        for x, y in layer.points:
            totals[x] = totals.get(x, 0.0) + (y or 0.0)
    drawn = sum(1 for layer in stacks for _, y in layer.points if y)
    if not drawn:
        return _empty(frame, title, "bars", empty)
    x_lo, x_hi = x_range or (min(totals), max(totals) + bucket)
    y_hi = nice_ceiling(max(totals.values()))
    xs = Scale(x_lo, x_hi, frame.left, frame.left + frame.plot_width)
    ys = Scale(0.0, y_hi, frame.top + frame.plot_height, frame.top)
    parts = _open(frame, title, drawn, "bars")
    parts += _axes(frame, xs, ys, time_ticks(x_lo, x_hi), value_ticks(y_hi), axes)
    base: dict[float, float] = {}
    for layer in stacks:
        css = escape(layer.css)
        for x, y in layer.points:
            if not y:
                continue
            below = base.get(x, 0.0)
            top, bottom = ys(below + y), ys(below)
            left, right = xs(x), xs(x + bucket)
            base[x] = below + y
            hover = f"{layer.name} at {axes.x_format(x)}: {axes.y_format(y)}"
            parts.append(
                f'<rect class="bar {css}" x="{left}" y="{top}" '
                f'width="{max(round(right - left - 1, 1), 1)}" height="{round(bottom - top, 1)}">'
                f"<title>{escape(hover)}</title></rect>"
            )
    parts += _legend(frame, stacks)
    parts.append("</svg>")
    return "".join(parts)


def timeline_chart(marks: Sequence[Mark], *, title: str, axes: Axes,
                   x_range: tuple[float, float] | None = None, frame: Frame = Frame(height=140),
                   empty: str = "No runs yet") -> str:  # fmt: skip
    """Runs along a time axis: a dot per run coloured by state, with a small dot above it per
    attempt beyond the first (up to MAX_EXTRA_ATTEMPTS), so retried runs stand out; each mark
    links to its run, and its hover text says everything, the attempt count included."""
    if not marks:
        return _empty(frame, title, "timeline", empty)
    x_lo, x_hi = x_range or (min(m.x for m in marks), max(m.x for m in marks))
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 30, x_hi + 30
    xs = Scale(x_lo, x_hi, frame.left, frame.left + frame.plot_width)
    lane = frame.top + frame.plot_height * 0.75
    # Dots shrink as runs crowd, so neighbours stay apart.
    radius = round(max(2.0, min(5.0, frame.plot_width / len(marks) / 2.0)), 1)
    small = round(max(1.5, radius * 0.5), 1)
    parts = _open(frame, title, len(marks), "timeline")
    parts += _axes(frame, xs, None, time_ticks(x_lo, x_hi), [], axes)
    for mark in marks:
        px = xs(mark.x)
        state = escape(mark.state)
        shape = [f'<circle class="run state-{state}" cx="{px}" cy="{lane:g}" r="{radius:g}"/>']
        for extra in range(1, min(mark.attempts, MAX_EXTRA_ATTEMPTS + 1)):
            cy = round(lane - radius - 2 - small - (extra - 1) * (2 * small + 2), 1)
            shape.append(
                f'<circle class="attempt state-{state}" cx="{px}" cy="{cy:g}" r="{small:g}"/>'
            )
        body = f'<g class="mark"><title>{escape(mark.label)}</title>{"".join(shape)}</g>'
        if mark.href:
            body = f'<a href="{escape(mark.href)}">{body}</a>'
        parts.append(body)
    parts.append("</svg>")
    return "".join(parts)
