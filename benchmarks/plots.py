"""PNG plots of how a figure grows with the number of jobs (100, 1,000, 10,000), made by the
benchmark that measured it and shown in docs/benchmarks.md.

    from benchmarks import plots

    path = plots.growth_plot([100, 1000, 10000], plots.PLOTS_DIR / "growth-cpu-per-pod.png",
                             title="Scheduler CPU per Pod", x_label="jobs in Slurm",
                             y_label="ms per Pod", series={"sunk-scheduler": [9.8, 11.2, 14.5]})

The same input gives the same bytes: matplotlib's own default style (no matplotlibrc),
a fixed size and resolution, no software or date stamp in the file, and no pyplot (no global
figure state, no interactive backend: the figure is drawn by Agg).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from benchmarks import results

PLOTS_DIR = results.REPO / "docs" / "benchmarks"

#: Inches and dots per inch: 800 x 480 pixels.
SIZE = (8.0, 4.8)
DPI = 100


def _count(x: float, _pos: int | None = None) -> str:
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


def growth_plot(points: Sequence[float], path: Path | str, *, title: str, x_label: str,
                y_label: str, series: Mapping[str, Sequence[float | None]]) -> Path:
    """A line plot of each series against ``points`` (the numbers of jobs: log scale, a tick
    at each), written to ``path`` as PNG; returns ``path``.

    ``series`` maps a legend label to one value per point (``None`` where it was not measured);
    each point is marked and labelled with its value, to 3 significant digits."""
    xs = [float(x) for x in points]
    if not xs:
        raise ValueError("no points to plot")
    if any(not math.isfinite(x) or x <= 0 for x in xs):
        raise ValueError(f"points must be positive numbers (log scale): {list(points)}")
    if len(set(xs)) != len(xs):
        raise ValueError(f"points repeat: {list(points)}")
    if not series:
        raise ValueError("no series to plot")
    for label, ys in series.items():
        if len(ys) != len(xs):
            raise ValueError(f"series {label!r} has {len(ys)} values for {len(xs)} points")
        if any(y is not None and not math.isfinite(y) for y in ys):
            raise ValueError(f"series {label!r}: not a finite number: {list(ys)}")
    order = sorted(range(len(xs)), key=xs.__getitem__)
    target = Path(path)
    with matplotlib.rc_context(), matplotlib.style.context("default"):
        fig = Figure(figsize=SIZE, dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.set_xscale("log")
        for label, ys in series.items():
            pairs = [(xs[i], float(y)) for i in order if (y := ys[i]) is not None]
            if not pairs:
                continue
            line, = ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o",
                            label=label)
            for x, y in pairs:
                ax.annotate(f"{y:.3g}", (x, y), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=8, color=line.get_color())
        ax.xaxis.set_major_locator(FixedLocator(sorted(xs)))
        ax.xaxis.set_major_formatter(FuncFormatter(_count))
        ax.xaxis.set_minor_locator(NullLocator())
        margin = 1.5 if len(xs) > 1 else 2.0
        ax.set_xlim(min(xs) / margin, max(xs) * margin)
        values = [y for ys in series.values() for y in ys if y is not None]
        if values and min(values) >= 0:
            ax.set_ylim(bottom=0, top=max(values) * 1.15 or 1)
        ax.set_title(title)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format="png", dpi=DPI, metadata={"Software": None})
    return target
