"""The trend plots (inline SVG drawn in Python) and ``/api/v1/trends``."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from sunk.runtime.trends import Latency, Reading, TrendPoint, TrendRecorder
from web import trends
from web.trends import HEIGHT, PAD, WIDTH, sparkline

from .sample import StaticScheduler, sample_trends

Client = AsyncTestClient[Litestar]
SVG = "{http://www.w3.org/2000/svg}"
BOTTOM, TOP, LEFT, RIGHT = HEIGHT - PAD, PAD, PAD, WIDTH - PAD


def parse(markup: str) -> ET.Element:
    """The plot as XML (it must be well-formed), after checking every number in it is finite."""
    svg = str(markup)
    for number in re.findall(r'(?:x|y|x1|y1|x2|y2|cx|cy|r|points)="([^"]*)"', svg):
        for value in re.split(r"[ ,]+", number.strip()):
            assert math.isfinite(float(value)), svg
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    return ET.fromstring(svg.replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1))


def lines(root: ET.Element) -> list[list[tuple[float, float]]]:
    return [[(float(x), float(y)) for x, y in (p.split(",") for p in el.attrib["points"].split())]
            for el in root.iter(f"{SVG}polyline")]


def dots(root: ET.Element) -> list[tuple[float, float]]:
    return [(float(el.attrib["cx"]), float(el.attrib["cy"])) for el in root.iter(f"{SVG}circle")]


# -- the SVG -------------------------------------------------------------------------------------


def test_empty_input_is_an_empty_plot_with_its_label() -> None:
    root = parse(sparkline([], start=0, end=3600, label="Pods bound: no samples yet"))
    assert root.attrib["role"] == "img"
    assert root.attrib["aria-label"] == "Pods bound: no samples yet"
    assert root.findtext(f"{SVG}title") == "Pods bound: no samples yet"
    assert lines(root) == [] and dots(root) == []
    assert lines(parse(sparkline([[]], start=0, end=0, label="x"))) == []


def test_values_are_scaled_from_zero_to_the_largest_over_the_time_span() -> None:
    root = parse(sparkline([[(0, 0), (50, 5), (100, 10)]], start=0, end=100, label="x"))
    [line] = lines(root)
    assert line[0] == (LEFT, BOTTOM)
    assert line[1] == pytest.approx((WIDTH / 2, (TOP + BOTTOM) / 2), abs=0.06)
    assert line[2] == (RIGHT, TOP)


def test_two_lines_share_one_scale() -> None:
    root = parse(sparkline([[(0, 1), (100, 1)], [(0, 4), (100, 4)]], start=0, end=100,
                           label="x"))
    low, high = lines(root)
    assert high[0][1] == TOP
    assert low[0][1] == pytest.approx(BOTTOM - (BOTTOM - TOP) / 4, abs=0.06)
    classes = [el.attrib["class"] for el in root.iter(f"{SVG}polyline")]
    assert classes == ["s0", "s1"]


def test_an_hour_not_yet_full_fills_only_the_right_of_the_plot() -> None:
    [line] = lines(parse(sparkline([[(3000, 1), (3600, 2)]], start=0, end=3600, label="x")))
    assert line[0][0] == pytest.approx(LEFT + (RIGHT - LEFT) * 3000 / 3600, abs=0.06)
    assert line[-1][0] == RIGHT


def test_a_single_point_is_a_dot() -> None:
    root = parse(sparkline([[(3600, 7)]], start=0, end=3600, label="x"))
    assert lines(root) == []
    assert dots(root) == [(RIGHT, TOP)]
    # also when the time span is empty
    assert dots(parse(sparkline([[(5, 7)]], start=5, end=5, label="x"))) == [(LEFT, TOP)]


def test_all_zero_values_lie_along_the_bottom() -> None:
    [line] = lines(parse(sparkline([[(t, 0.0) for t in range(0, 100, 10)]], start=0, end=90,
                                   label="x")))
    assert {y for _, y in line} == {BOTTOM}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, None])
def test_values_that_are_not_numbers_are_gaps(bad: float | None) -> None:
    root = parse(sparkline([[(0, 1), (10, 2), (20, bad), (30, 2), (40, 4)]], start=0, end=40,
                           label="x"))
    assert len(lines(root)) == 2
    assert min(y for line in lines(root) for _, y in line) == TOP  # the scale ignores them


def test_odd_times_and_values_stay_finite() -> None:
    parse(sparkline([[(0, 1e308), (1, 1e308), (2, -5)]], start=0, end=2, label="x"))
    parse(sparkline([[(0, 1), (1, 2)]], start=math.nan, end=math.inf, label="x"))
    parse(sparkline([[(math.nan, 1), (1, 2), (2, 3)]], start=0, end=2, label="x"))
    [line] = lines(parse(sparkline([[(0, -3), (1, 2)]], start=0, end=1, label="x")))
    assert line[0][1] == BOTTOM  # nothing below zero


def test_an_hour_of_points_is_drawn_one_per_pixel_and_keeps_its_spike() -> None:
    values = [1.0] * 360
    values[200] = 50.0
    [line] = lines(parse(sparkline([[(i * 10.0, v) for i, v in enumerate(values)]],
                                   start=-10, end=3590, label="x")))
    assert len(line) <= WIDTH
    assert [x for x, _ in line] == sorted(x for x, _ in line)
    assert sum(y == TOP for _, y in line) == 1


def test_the_label_is_escaped() -> None:
    svg = sparkline([], start=0, end=1, label='<script>"x"</script>')
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert parse(svg).attrib["aria-label"] == '<script>"x"</script>'


# -- the header's plots --------------------------------------------------------------------------


def recorder(*points: tuple[float, float, float | None, float | None]) -> TrendRecorder:
    """(at, Pods bound, p50, p99) every 10 s."""
    r = TrendRecorder(reader=Reading)
    for at, bound, p50, p99 in points:
        lat = Latency(bound, p50, p50, p99) if p50 is not None else Latency()
        r.points.append(TrendPoint(at=at, seconds=10, bound=bound, submitted=bound, rejected=0,
                                   latency=lat, gang_latency=Latency()))
    return r


def test_no_samples_yet() -> None:
    rate, lat = trends.plots(StaticScheduler())
    assert rate.empty and lat.empty
    assert "no samples yet" in rate.svg and "Pods bound per minute, last hour" in rate.svg
    assert "no samples yet" in lat.svg


def test_plots_show_the_current_and_largest_values() -> None:
    s = StaticScheduler(trends=recorder((100, 2, 1.0, 3.0), (110, 8, 12.0, 45.0),
                                        (120, 1, None, None)))
    rate, lat = trends.plots(s)
    assert not rate.empty and (rate.current, rate.maximum) == ("6.0", "48")
    assert "now 6.0, max 48" in rate.svg
    # the latest interval bound nothing: its latency is unknown, the one before is current
    assert (lat.current, lat.maximum) == ("12s / 45s", "45s")
    assert lat.keys == ("p50", "p99")
    # 10 s apart is less than a pixel of an hour: each line is one dot at its largest value
    root = parse(lat.svg)
    assert [el.attrib["class"] for el in root.iter(f"{SVG}circle")] == ["s0", "s1"]
    assert dots(root)[1][1] == TOP


def test_plots_are_drawn_again_only_when_the_points_change() -> None:
    s = StaticScheduler(trends=recorder((100, 2, 1.0, 3.0)))
    get = trends.cached_plots(s)
    first = get()
    assert get() is first and first[0].current == "12"
    s.trends.points.append(TrendPoint(at=110, seconds=10, bound=3, submitted=3, rejected=0,
                                      latency=Latency(), gang_latency=Latency()))
    second = get()
    assert second is not first and second[0].current == "18"
    s.trends = TrendRecorder(reader=Reading)
    assert get()[0].empty


# -- over HTTP -----------------------------------------------------------------------------------


async def test_api_trends_is_empty_before_the_first_interval(client: Client) -> None:
    body = (await client.get("/api/v1/trends")).json()
    assert body == {"interval_seconds": 10.0, "window_seconds": 3600.0, "samples": []}


async def test_api_trends_lists_the_samples(client: Client, scheduler: StaticScheduler) -> None:
    scheduler.trends = recorder((1_700_000_000, 3, 1.5, 4.0), (1_700_000_010, 0, None, None))
    body = (await client.get("/api/v1/trends")).json()
    assert body["samples"] == [
        {"at": "2023-11-14T22:13:20Z", "seconds": 10.0, "pods_bound": 3,
         "pods_bound_per_minute": 18.0, "jobs_submitted": 3, "pods_rejected": 0,
         "bound_latency": {"count": 3, "mean_seconds": 1.5, "p50_seconds": 1.5,
                           "p99_seconds": 4.0},
         "gang_latency": {"count": 0, "mean_seconds": None, "p50_seconds": None,
                          "p99_seconds": None}},
        {"at": "2023-11-14T22:13:30Z", "seconds": 10.0, "pods_bound": 0,
         "pods_bound_per_minute": 0.0, "jobs_submitted": 0, "pods_rejected": 0,
         "bound_latency": {"count": 0, "mean_seconds": None, "p50_seconds": None,
                           "p99_seconds": None},
         "gang_latency": {"count": 0, "mean_seconds": None, "p50_seconds": None,
                          "p99_seconds": None}}]


async def test_the_header_says_no_samples_yet(client: Client,
                                              scheduler: StaticScheduler) -> None:
    r = await client.get("/pods")
    header = r.text[r.text.index('<header id="header"'):r.text.index("</header>")]
    assert header.count("no samples yet</span>") == 2
    assert 'aria-label="Pods bound per minute, last hour: no samples yet"' in header
    scheduler.trends = recorder((1_700_000_000, 3, 1.5, 4.0))
    r = await client.get("/pods", headers={"HX-Request": "true"})
    assert "no samples yet" not in r.text and "now 18, max 18" in r.text


async def test_the_header_plots_the_last_hour_and_refreshes_with_it(
        client: Client, scheduler: StaticScheduler, now: float) -> None:
    scheduler.trends = sample_trends(now)
    for headers in ({}, {"HX-Request": "true"}):
        r = await client.get("/nodes", headers=headers)
        header = r.text[r.text.index('<header id="header"'):r.text.index("</header>")]
        assert "no samples yet" not in header
        assert header.count('<svg class="spark" role="img"') == 2
        assert header.count("<polyline") >= 3
        assert 'aria-label="Creation-to-bound latency, p50 and p99 (approximate), last hour: ' \
               'now p50 ' in header
        assert re.search(r'data-trend="bound/min">.*?<b>[\d.]+</b> <span class="muted">max '
                         r"[\d.]+</span>", header, re.S)
