"""Pods bound per second through sunk, against raw Slurm in the same run.

    python -m benchmarks.scheduling --pods 400 --nodes 100 [--markdown docs/benchmarks.md]

1. Baseline: the same number of placeholder jobs submitted straight to slurmrestd (8 at a
   time), timed until every job's script has started: it appends ": started" to ``extra``,
   then reports it through its ``started`` hook, here answered by the benchmark itself.
2. sunk: that many Pods created through the API server (8 at a time), timed until every Pod is
   bound. A Pod is bound only after its own placeholder job has started, so the baseline is
   the ceiling: sunk adds the API server's work, kwok's, and its own.

Both phases run the project's prolog (node locks through the scheduler's hook API) exactly as
the test bed's Slurm is configured. Needs root and the test bed (started if none is up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks import cpu
from benchmarks.bed import StartedReports, bounded, drain, kube_client, machine, on_bed
from testbed import cluster
from testbed.errors import TestbedError

NAME = "sunk-bench"
NAMESPACE = "bench"


@dataclass
class Phase:
    name: str
    count: int
    wall: float
    latencies: list[float]
    #: CPU seconds per part of the test bed during the phase (:mod:`benchmarks.cpu`).
    cpu: dict[str, float] = field(default_factory=dict)
    #: API server requests during the phase, by verb and resource.
    api_requests: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / self.wall

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        return (f"| {self.name} | {self.count} | {self.wall:.1f} | {self.rate:.1f} | "
                f"{self.pct(0.5):.2f} | {self.pct(0.99):.2f} |")


TIMEOUT = 300.0


async def _within(task: asyncio.Task[None], done: dict[Any, float], count: int,
                  what: str) -> None:
    try:
        await asyncio.wait_for(task, TIMEOUT)
    except TimeoutError as exc:
        raise TestbedError(f"only {len(done)} of {count} {what} after {TIMEOUT:.0f}s") from exc


async def baseline(slurm: httpx.AsyncClient, count: int, reports: StartedReports) -> Phase:
    submitted: dict[int, float] = {}
    started = reports.started
    t0, cpu0 = time.monotonic(), cpu.sample()
    run_id = int(time.time())

    def submit(i: int) -> Any:
        async def call() -> None:
            extra = f"bench-baseline-{run_id}-{i}"
            job = {"name": f"bench-{i}", "extra": extra, "current_working_directory": "/tmp",
                   "script": "#!/bin/sh\nexec /opt/sunk/scripts/placeholder.sh\n",
                   "cpus_per_task": 1, "tasks": 1, "memory_per_node": {"set": True,
                                                                        "number": 100},
                   "standard_output": "/dev/null",
                   "environment": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                   f"SUNK_JOB_EXTRA={extra}", "SUNK_KILL_WAIT=30",
                                   f"SUNK_HOOKS_ENV={reports.hooks_env}"]}
            at = time.monotonic()  # as for a Pod: from when the request is sent
            r = await slurm.post("/slurm/v0.0.42/job/submit", json={"job": job})
            r.raise_for_status()
            submitted[int(r.json()["job_id"])] = at

        return call

    await bounded([submit(i) for i in range(count)])
    await _within(asyncio.create_task(reports.wait_for(count)), started, count,
                  "placeholder jobs started")
    latencies = [started[j] - submitted[j] for j in submitted]
    return Phase("raw Slurm (submit to started)", count, max(started.values()) - t0, latencies,
                 cpu.used(cpu0, cpu.sample()))


async def _api_requests(kube: httpx.AsyncClient) -> dict[str, float]:
    """The API server's request counters (``apiserver_request_total``) by verb and resource."""
    counts: dict[str, float] = {}
    for line in (await kube.get("/metrics")).text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(part.split("=", 1) for part in
                      line[line.index("{") + 1:line.rindex("}")].replace('"', "").split(","))
        what = f"{labels.get('verb')} {labels.get('resource')}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[what] = counts.get(what, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


async def through_sunk(kube: httpx.AsyncClient, count: int) -> Phase:
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    t0, cpu0 = time.monotonic(), cpu.sample()

    def create(i: int) -> Any:
        async def call() -> None:
            name = f"p-{i:04d}"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": NAMESPACE},
                   "spec": {"schedulerName": NAME, "terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "c", "image": "busybox", "resources": {
                                "requests": {"cpu": "1", "memory": "100Mi"}}}]}}
            created[name] = time.monotonic()
            r = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=pod)
            r.raise_for_status()

        return call

    requests0 = await _api_requests(kube)
    watcher = asyncio.create_task(_watch_bound(kube, bound, count))
    await bounded([create(i) for i in range(count)])
    await _within(watcher, bound, count, "Pods bound")
    latencies = [bound[n] - created[n] for n in created]
    phase = Phase("sunk (Pod created to bound)", count, max(bound.values()) - t0, latencies,
                  cpu.used(cpu0, cpu.sample()))
    requests1 = await _api_requests(kube)
    phase.api_requests = {k: v - requests0.get(k, 0.0) for k, v in requests1.items()
                          if v - requests0.get(k, 0.0) >= 1}
    return phase


async def _watch_bound(kube: httpx.AsyncClient, bound: dict[str, float], count: int) -> None:
    """A watch, not a polled list: the measurement must not load the API server."""
    while len(bound) < count:
        params = {"watch": "true", "timeoutSeconds": "600"}
        async with kube.stream("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                               params=params, timeout=None) as r:
            async for line in r.aiter_lines():
                pod = json.loads(line)["object"]
                if pod["spec"].get("nodeName"):
                    bound.setdefault(pod["metadata"]["name"], time.monotonic())
                if len(bound) >= count:
                    return


async def run(tb: cluster.Testbed, pods: int) -> tuple[Phase, Phase]:
    async with httpx.AsyncClient(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                                 timeout=60) as slurm, kube_client(tb) as kube:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        await drain(tb, slurm, kube)
        print(f"baseline: {pods} placeholder jobs straight to slurmrestd ...", file=sys.stderr)
        async with StartedReports(tb) as reports:
            raw = await baseline(slurm, pods, reports)
            await drain(tb, slurm, kube)
        print(f"sunk: {pods} Pods through the API server ...", file=sys.stderr)
        ours = await through_sunk(kube, pods)
        await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                           params={"gracePeriodSeconds": "0"})
        await drain(tb, slurm, kube)
        return raw, ours


KUBE_PARTS = ("kube-apiserver", "etcd", "kwok")


def _per_item(phase: Phase, part: str) -> float:
    return 1000 * phase.cpu.get(part, 0.0) / phase.count


def report(raw: Phase, ours: Phase, nodes: int) -> str:
    ratio = ours.rate / raw.rate
    gap = ours.pct(0.99) - raw.pct(0.99)
    # CPU per Pod if sunk-scheduler used what it uses in the baseline (serving lock hooks)
    scheduler_extra = _per_item(ours, "sunk-scheduler") - _per_item(raw, "sunk-scheduler")
    ceiling = _per_item(raw, "machine total") / max(
        1e-9, _per_item(ours, "machine total") - scheduler_extra)
    return "\n".join([
        f"{ours.count} Pods on {nodes} Slurm nodes; {machine()}.",
        "",
        "| phase | count | wall s | per s | p50 s | p99 s |",
        "|---|---|---|---|---|---|",
        raw.line(),
        ours.line(),
        "",
        f"Pods bound per second / raw Slurm jobs started per second: **{ratio:.2f}** "
        "(target at least 0.90).",
        f"Creation-to-bound p99 minus the baseline's submit-to-started p99: **{gap:+.2f} s** "
        "(target within 1 s).",
        "",
        f"The machine is saturated in both phases, so the ratio is about CPU per item: "
        f"{_per_item(raw, 'machine total'):.0f} ms per raw job, "
        f"{_per_item(ours, 'machine total'):.0f} ms per Pod. Of the difference, sunk-scheduler "
        f"is {_per_item(ours, 'sunk-scheduler') - _per_item(raw, 'sunk-scheduler'):.0f} ms; "
        f"the Kubernetes side (API server, etcd, kwok) "
        f"{sum(_per_item(ours, p) - _per_item(raw, p) for p in KUBE_PARTS):.0f} ms. "
        f"With a scheduler that cost nothing, the ratio could reach at most **{ceiling:.2f}**.",
        "",
        "CPU used during each phase, per item (ms of CPU per job or Pod):",
        "",
        "| part | raw Slurm | sunk |",
        "|---|---|---|",
        *(f"| {part} | {1000 * raw.cpu.get(part, 0) / raw.count:.1f} | "
          f"{1000 * ours.cpu.get(part, 0) / ours.count:.1f} |"
          for part in sorted(set(raw.cpu) | set(ours.cpu),
                             key=lambda p: -ours.cpu.get(p, 0))),
        "",
        "API server requests during the sunk phase, per Pod (the benchmark's own: one create "
        "per Pod and one watch):",
        "",
        "| request | per Pod |",
        "|---|---|",
        *(f"| {what} | {n / ours.count:.2f} |" for what, n in
          sorted(ours.api_requests.items(), key=lambda kv: -kv[1]) if n / ours.count >= 0.01),
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scheduling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=400)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--markdown", type=Path, help="append the results to this file")
    args = p.parse_args(argv)
    with cluster.exclusive():
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    try:
        raw, ours = on_bed(args.nodes, NAME, lambda tb, _: run(tb, args.pods))
    except TestbedError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 1
    text = report(raw, ours, args.nodes)
    print(text)
    print(json.dumps({"raw_per_s": raw.rate, "sunk_per_s": ours.rate,
                      "raw_cpu_ms": _per_item(raw, "machine total"),
                      "sunk_cpu_ms": _per_item(ours, "machine total"),
                      "raw_p99": raw.pct(0.99), "sunk_p99": ours.pct(0.99)}))
    if args.markdown:
        with args.markdown.open("a") as f:
            f.write(f"\n### Scheduling throughput ({time.strftime('%Y-%m-%d')})\n\n"
                    f"Command: `python -m benchmarks.scheduling --pods {args.pods} "
                    f"--nodes {args.nodes}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
