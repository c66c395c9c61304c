"""The scheduler's own throughput and latency over the last hour -> ``/api/v1/trends``, and
the small plots in the header of every page (inline SVG drawn here, no script).

The points come from :attr:`SchedulerView.trends` (``sunk.runtime.trends.TrendRecorder``): one every
10 s, each what changed in the scheduler's metrics over its interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from markupsafe import Markup, escape

from web.formatting import duration
from web.protocol import LatencyView, SchedulerView, TrendPointView, TrendsSource
from web.viewmodels import LatencySample, Trends, TrendSample, utc

#: One line of a plot: (Unix time, value); None (or a value that is not finite) is a gap.
Series = Sequence[tuple[float, float | None]]

#: The plots' size in CSS pixels: word-sized, to sit in the header's row of counts.
WIDTH: Final = 120
HEIGHT: Final = 16
#: Room kept at the edges so a line's stroke (1.5 px) is not cut.
PAD: Final = 1.5


# -- JSON ----------------------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _latency(lat: LatencyView) -> LatencySample:
    return LatencySample(count=round(lat.count), mean_seconds=_finite(lat.mean),
                         p50_seconds=_finite(lat.p50), p99_seconds=_finite(lat.p99))


def _per_minute(point: TrendPointView) -> float:
    return point.bound * 60.0 / point.seconds if point.seconds > 0 else 0.0


def trends(scheduler: SchedulerView) -> Trends:
    source = scheduler.trends
    return Trends(
        interval_seconds=source.interval, window_seconds=source.window,
        samples=[TrendSample(
            at=utc(p.at), seconds=p.seconds, pods_bound=round(p.bound),
            pods_bound_per_minute=round(_per_minute(p), 3), jobs_submitted=round(p.submitted),
            pods_rejected=round(p.rejected), bound_latency=_latency(p.latency),
            gang_latency=_latency(p.gang_latency)) for p in source.points])


# -- plots ---------------------------------------------------------------------------------------


def _runs(series: Series, x: float, scale_x: float, top: float, scale_y: float
          ) -> list[list[tuple[float, float]]]:
    """The series in plot coordinates, as runs without gaps; points that land in the same
    pixel column are merged into their largest value (a spike stays visible)."""
    runs: list[list[tuple[float, float]]] = []
    run: list[tuple[float, float]] = []
    column = -1
    for t, raw in series:
        value = _finite(raw)
        if value is None or not math.isfinite(t):
            if run:
                runs.append(run)
            run, column = [], -1
            continue
        px = min(WIDTH - PAD, max(PAD, PAD + (t - x) * scale_x))
        py = HEIGHT - PAD - min(top, max(0.0, value)) * scale_y
        if run and round(px) == column:
            if py < run[-1][1]:  # higher on the plot
                run[-1] = (run[-1][0], py)
            continue
        column = round(px)
        run.append((px, py))
    if run:
        runs.append(run)
    return runs


def sparkline(series: Sequence[Series], *, start: float, end: float, label: str) -> Markup:
    """A word-sized plot of one or more lines (classes ``s0``, ``s1``, ...) over the time
    ``start`` to ``end``, from 0 at the bottom to the largest value at the top (all zero: a
    line along the bottom); an isolated point is a dot. ``label`` is its accessible text (a
    ``title`` and ``aria-label``). Coordinates are always finite."""
    values = [v for line in series for _, raw in line if (v := _finite(raw)) is not None]
    top = max((v for v in values if v > 0), default=1.0)
    span = end - start if math.isfinite(end - start) and end > start else 1.0
    scale_x = (WIDTH - 2 * PAD) / span
    scale_y = (HEIGHT - 2 * PAD) / top
    text = escape(label)
    parts = [f'<svg class="spark" role="img" aria-label="{text}" width="{WIDTH}" '
             f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"><title>{text}</title>'
             f'<line class="base" x1="0" y1="{HEIGHT - 0.5}" x2="{WIDTH}" '
             f'y2="{HEIGHT - 0.5}"/>']
    for i, line in enumerate(series):
        for run in _runs(line, start, scale_x, top, scale_y):
            if len(run) == 1:
                (px, py), = run
                parts.append(f'<circle class="s{i}" cx="{px:.1f}" cy="{py:.1f}" r="1.5"/>')
            else:
                points = " ".join(f"{px:.1f},{py:.1f}" for px, py in run)
                parts.append(f'<polyline class="s{i}" points="{points}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True, slots=True)
class Plot:
    """One plot in the header: its name, the SVG, and the current and largest values."""

    title: str
    #: The names of its lines, in the order of their classes (``s0``, ``s1``): a legend.
    keys: tuple[str, ...]
    svg: Markup
    empty: bool
    current: str
    maximum: str


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else duration(value)


def _last(values: Sequence[float | None]) -> float | None:
    return next((v for v in reversed(values) if v is not None), None)


def plots(scheduler: SchedulerView) -> list[Plot]:
    """Pods bound per minute, and the creation-to-bound latency's p50 and p99, over the
    recorder's window, ending at its newest point."""
    source: TrendsSource = scheduler.trends
    points = list(source.points)
    span = "last hour" if source.window == 3600 else f"last {duration(source.window)}"
    end = points[-1].at if points else 0.0
    start = end - source.window
    at = [p.at for p in points]
    rate = [_per_minute(p) for p in points]
    p50 = [_finite(p.latency.p50) for p in points]
    p99 = [_finite(p.latency.p99) for p in points]
    rate_title = f"Pods bound per minute, {span}"
    latency_title = f"Creation-to-bound latency, p50 and p99 (approximate), {span}"
    if not points:
        return [
            Plot("bound/min", (), sparkline([], start=start, end=end,
                                            label=f"{rate_title}: no samples yet"),
                 True, "", ""),
            Plot("latency", ("p50", "p99"), sparkline([], start=start, end=end,
                                                      label=f"{latency_title}: no samples yet"),
                 True, "", ""),
        ]
    now_rate, max_rate = _rate(rate[-1]), _rate(max(rate))
    now_p50, now_p99 = _seconds(_last(p50)), _seconds(_last(p99))
    max_p99 = _seconds(max((v for v in p99 if v is not None), default=None))
    rate_line = list(zip(at, rate, strict=True))
    latency_lines = [list(zip(at, p50, strict=True)), list(zip(at, p99, strict=True))]
    return [
        Plot("bound/min", (), sparkline(
            [rate_line], start=start, end=end,
            label=f"{rate_title}: now {now_rate}, max {max_rate}"),
             False, now_rate, max_rate),
        Plot("latency", ("p50", "p99"), sparkline(
            latency_lines, start=start, end=end,
            label=f"{latency_title}: now p50 {now_p50}, p99 {now_p99}; max p99 {max_p99}"),
             False, f"{now_p50} / {now_p99}", max_p99),
    ]


def cached_plots(scheduler: SchedulerView) -> Callable[[], list[Plot]]:
    """:func:`plots`, drawn again only when the points changed (a new one every 10 s), not on
    every refresh of every open page."""
    memo: list[tuple[tuple[object, ...], list[Plot]]] = []

    def get() -> list[Plot]:
        source = scheduler.trends
        points = source.points
        key: tuple[object, ...] = (id(source), source.window, len(points),
                                   points[0].at if points else None,
                                   points[-1].at if points else None)
        if not memo or memo[0][0] != key:
            memo[:] = [(key, plots(scheduler))]
        return memo[0][1]

    return get
