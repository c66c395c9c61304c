"""The dashboard drawn from Prometheus: every panel's every query asked, legends as Grafana
writes them."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import grafana

START = 1_800_000_000.0


class Answers:
    """Prometheus's answers: one series per query, labelled as a grouping would label it."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def series(self, query: str, start: float, end: float) -> grafana.Points:
        self.asked.append(query)
        return [({"reason": "Resources", "namespace": "research", "partition": "debug"},
                 [(start + 60 * i, float(i)) for i in range(5)])]


def test_legends_fill_labels_as_grafana_does() -> None:
    labels = {"namespace": "research", "partition": "debug"}
    assert grafana.legend("{{namespace}} / {{ partition }}", labels) == "research / debug"
    assert grafana.legend("{{reason}}", labels) == "-"
    assert grafana.legend("median", labels) == "median"


async def test_every_query_of_the_dashboard_is_asked_and_drawn(tmp_path: Path) -> None:
    answers = Answers()
    out = tmp_path / "grafana.png"
    await grafana.draw(answers, START, START + 300, out)
    dashboard = json.loads(grafana.DASHBOARD.read_text())
    assert answers.asked == [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert out.read_bytes().startswith(b"\x89PNG")
