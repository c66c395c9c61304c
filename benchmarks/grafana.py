"""``python -m benchmarks.grafana``: the chart's Grafana dashboard, drawn from a real Prometheus.

A queue that grows on the test bed: Pods that each want a whole node for a minute (Slurm's time
limit ends them, and sunk deletes their Pods), arriving faster than the nodes free up, in two
namespaces, with now and then a Pod the policies reject. Prometheus (Debian's package, unpacked
into ``~/.cache/sunk-bench``, not installed) scrapes the scheduler every 2 s; afterwards each
panel of ``charts/sunk/dashboards/sunk.json`` is asked of Prometheus with the panel's own
queries and drawn where the dashboard puts it. Grafana itself is not here: the picture shows
what its queries give, not Grafana's rendering.

    python -m benchmarks.grafana [--nodes 8] [--minutes 8] [--out docs/screenshots/grafana.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import httpx
import matplotlib
import matplotlib.style
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmarks import pods
from benchmarks.bed import drain, kube_client, on_bed
from testbed import cluster, procs
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "charts/sunk/dashboards/sunk.json"
CACHE = Path.home() / ".cache/sunk-bench"
NAMESPACES = ("research", "serving")
PREFIX = "sunk.coreweave.com/"
#: Seconds between two samples of a panel's query.
STEP = 5
UNITS = {"s": "seconds", "ops": "per second", "short": ""}


def prometheus() -> Path:
    """Debian's Prometheus binary, unpacked from its package once (``apt-get download``: no
    service is installed or started)."""
    binary = CACHE / "prometheus/usr/bin/prometheus"
    if binary.exists():
        return binary
    with tempfile.TemporaryDirectory() as tmp:
        print("prometheus: fetching Debian's package ...", file=sys.stderr)
        got = subprocess.run(["apt-get", "download", "prometheus"], cwd=tmp,
                             capture_output=True, text=True)
        debs = list(Path(tmp).glob("prometheus_*.deb"))
        if got.returncode != 0 or not debs:
            raise TestbedError(f"`apt-get download prometheus` failed (run `apt-get update` "
                               f"first?): {got.stderr.strip()}")
        (CACHE / "prometheus").mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(CACHE / "prometheus")], check=True)
    return binary


class Prometheus:
    """A Prometheus that scrapes one target every 2 s, its data in a directory of its own."""

    def __init__(self, target: str) -> None:
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="sunk-prometheus-")
        root = Path(self._dir.name)
        self._log = root / "prometheus.log"
        (root / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "scrape_configs": [{"job_name": "sunk",
                                "static_configs": [{"targets": [target]}]}]}))
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [str(prometheus()), f"--config.file={root / 'prometheus.yml'}",
                 f"--storage.tsdb.path={root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"], stdout=log, stderr=log)

    async def __aenter__(self) -> Prometheus:
        async with httpx.AsyncClient() as client:
            for _ in range(120):
                try:
                    if (await client.get(f"{self.url}/-/ready")).status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.25)
        await self.__aexit__()
        raise TestbedError(f"Prometheus did not get ready: {self._log.read_text()[-2000:]}")

    async def __aexit__(self, *_: object) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=30)
        self._dir.cleanup()

    async def series(self, query: str, start: float, end: float) -> Points:
        """``query`` evaluated every STEP seconds from ``start`` to ``end``: each series'
        labels and its (time, value) points."""
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.get(f"{self.url}/api/v1/query_range", params={
                "query": query, "start": start, "end": end, "step": STEP})
        body = answer.json()
        if body.get("status") != "success":
            raise TestbedError(f"Prometheus refused {query!r}: {body.get('error')}")
        return [(found["metric"], [(float(t), float(v)) for t, v in found["values"]
                                   if v not in ("NaN", "+Inf", "-Inf")])
                for found in body["data"]["result"]]


def pod(name: str, namespace: str, *, rejected: bool = False) -> dict[str, Any]:
    """A Pod that wants a whole node for a minute; ``rejected``: one without a memory
    request, which the policies refuse."""
    made = pods.pod(name, annotations={PREFIX + "exclusive": "true", PREFIX + "timeout": "1"})
    made["metadata"]["namespace"] = namespace
    if rejected:
        del made["spec"]["containers"][0]["resources"]["requests"]["memory"]
    return made


async def workload(kube: httpx.AsyncClient, minutes: float, every: float) -> None:
    """A Pod every ``every`` seconds for ``minutes``, the namespaces taking turns."""
    for namespace in NAMESPACES:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": namespace}})
    start, made = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < minutes * 60:
        namespace = NAMESPACES[made % len(NAMESPACES)]
        manifest = pod(f"p-{made}", namespace, rejected=made % 15 == 14)
        (await kube.post(f"/api/v1/namespaces/{namespace}/pods", json=manifest)
         ).raise_for_status()
        made += 1
        if made % 12 == 0:
            print(f"  {elapsed / 60:.1f} min: {made} Pods created", file=sys.stderr)
        await asyncio.sleep(max(0.0, start + made * every - time.monotonic()))


Points = list[tuple[dict[str, str], list[tuple[float, float]]]]


class Source(Protocol):
    async def series(self, query: str, start: float, end: float) -> Points: ...


def legend(form: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), form) or "-"


async def draw(prom: Source, start: float, end: float, out: Path) -> None:
    """Each panel of the dashboard where its ``gridPos`` puts it (24 columns wide)."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    with matplotlib.rc_context(), matplotlib.style.context("default"):
        fig = Figure(figsize=(16, rows * 16 / 24 * 0.7), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(rows, 24)
        for panel in panels:
            pos = panel["gridPos"]
            ax = fig.add_subplot(grid[pos["y"]:pos["y"] + pos["h"], pos["x"]:pos["x"] + pos["w"]])
            ax.set_title(panel["title"], fontsize=10, loc="left")
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
            ax.set_ylabel(UNITS.get(unit, unit), fontsize=8)
            ax.set_xlabel("minutes into the run", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            for target in panel["targets"]:
                for labels, points in await prom.series(target["expr"], start, end):
                    if points:
                        ax.plot([(t - start) / 60 for t, _ in points], [v for _, v in points],
                                label=legend(target.get("legendFormat", ""), labels))
            if ax.lines:
                ax.legend(fontsize=7, loc="upper left")
        fig.suptitle(f"{dashboard['title']}: the dashboard's queries on Prometheus, a queue "
                     "growing on the test bed (python -m benchmarks.grafana)", fontsize=11)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, bbox_inches="tight")


async def run(tb: cluster.Testbed, running: RunningScheduler, minutes: float, every: float,
              out: Path) -> None:
    target = running.url("metrics").removeprefix("http://")
    async with Prometheus(target) as prom, kube_client(tb) as kube, httpx.AsyncClient(
            base_url=tb.slurmrestd_url, headers=tb.slurm_headers(), timeout=60) as slurm:
        start = time.time()
        print(f"a Pod every {every:g} s for {minutes:g} min, each a whole node for a minute "
              f"({tb.node_count} nodes) ...", file=sys.stderr)
        try:
            await workload(kube, minutes, every)
            end = time.time()
            await draw(prom, start, end, out)
        finally:
            for namespace in NAMESPACES:
                await kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                                   params={"gracePeriodSeconds": "0"})
            await drain(tb, slurm, kube)
            for namespace in NAMESPACES:
                await kube.delete(f"/api/v1/namespaces/{namespace}")
    print(f"drawn: {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grafana", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=8, help="test bed nodes")
    p.add_argument("--minutes", type=float, default=8, help="how long Pods arrive")
    p.add_argument("--every", type=float, default=5, help="seconds between two Pods")
    p.add_argument("--out", type=Path, default=REPO / "docs/screenshots/grafana.png")
    args = p.parse_args(argv)
    try:
        on_bed(args.nodes, pods.NAME,
               lambda tb, running: run(tb, running, args.minutes, args.every, args.out))
    except TestbedError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
