"""Growth plots: PNG, the same bytes for the same figures."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from benchmarks import plots

JOBS = [100, 1000, 10000]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def draw(path: Path, **series: list[float | None]) -> bytes:
    plots.growth_plot(JOBS, path, title="Scheduler CPU per Pod", x_label="jobs in Slurm",
                      y_label="ms per Pod",
                      series=series or {"sunk-scheduler": [9.8, 11.2, 14.5],
                                        "slurmrestd": [2.0, None, 6.1]})
    return path.read_bytes()


def test_a_plot_is_a_png_of_the_fixed_size(tmp_path: Path) -> None:
    target = tmp_path / "docs" / "benchmarks" / "growth-cpu-per-pod.png"
    data = draw(target)
    assert target.is_file() and len(data) > 1000
    assert data.startswith(PNG_MAGIC)
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (800, 480)
    assert data.endswith(b"IEND\xaeB`\x82")


def test_the_same_figures_give_the_same_bytes(tmp_path: Path) -> None:
    first = draw(tmp_path / "a.png")
    second = draw(tmp_path / "b.png")
    assert first == second
    # no software or date stamp that would differ between machines or runs
    assert b"Software" not in first and b"matplotlib" not in first.lower()
    assert b"tIME" not in first
    # and the bytes do depend on the figures
    assert draw(tmp_path / "c.png", sunk=[9.8, 11.2, 14.6]) != draw(tmp_path / "d.png",
                                                                     sunk=[9.8, 11.2, 14.5])


def test_points_may_come_unordered(tmp_path: Path) -> None:
    ordered = draw(tmp_path / "a.png", sunk=[1.0, 2.0, 3.0])
    plots.growth_plot([10000, 100, 1000], tmp_path / "b.png", title="Scheduler CPU per Pod",
                      x_label="jobs in Slurm", y_label="ms per Pod",
                      series={"sunk": [3.0, 1.0, 2.0]})
    assert (tmp_path / "b.png").read_bytes() == ordered


@pytest.mark.parametrize("points, series, message", [
    ([], {"a": []}, "no points"),
    ([0, 10], {"a": [1.0, 2.0]}, "positive"),
    ([10, 10], {"a": [1.0, 2.0]}, "repeat"),
    ([10, 100], {}, "no series"),
    ([10, 100], {"a": [1.0]}, "1 values for 2 points"),
    ([10, 100], {"a": [1.0, float("nan")]}, "finite"),
])
def test_figures_that_cannot_be_plotted_are_refused(
        tmp_path: Path, points: list[float], series: dict[str, list[float | None]],
        message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plots.growth_plot(points, tmp_path / "x.png", title="t", x_label="x", y_label="y",
                          series=series)
    assert not (tmp_path / "x.png").exists()


def test_plots_go_under_docs_benchmarks() -> None:
    assert Path(__file__).resolve().parents[3] / "docs" / "benchmarks" == plots.PLOTS_DIR
