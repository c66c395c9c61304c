"""Gangs bound per second through sunk, against raw Slurm multi-node jobs in the same run.

    python -m benchmarks.scheduling --scenario gang [--gangs 16 --sizes 2,4,8,16 --json FILE]

For each gang size N:

1. Baseline: that many placeholder jobs of N nodes (one task per node) submitted straight to
   slurmrestd (8 at a time), timed until each one's script has started (it reports through
   its ``started`` hook, here answered by the benchmark itself).
2. sunk: that many gangs of N Pods (sunk's gang label) created through the API server, timed
   until every member of every gang is bound. Per gang, the time from its job's start (as the
   scheduler learns it: the placeholder's ``started`` hook) to its last member bound, as the
   scheduler logs it; and the requests the scheduler made per member (its own counters).

Both phases run the project's prolog on every node of each job (node locks through the
scheduler's hook API). Needs root and a test bed of ``--nodes`` nodes (started if none is up).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import cpu
from benchmarks.bed import StartedReports, bounded, drain, kube_client
from benchmarks.pods import difference, scheduler_requests
from testbed import cluster
from testbed.errors import TestbedError

NAME = "sunk-bench"
NAMESPACE = "bench-gangs"
TIMEOUT = 600.0
_BOUND = re.compile(r"gang (\S+): all (\d+) members bound ([0-9.]+)s after job")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def raw_phase(slurm: httpx.AsyncClient, size: int, count: int,
                    reports: StartedReports) -> dict[str, Any]:
    reports.started.clear()
    submitted: dict[int, float] = {}
    t0, cpu0 = time.monotonic(), cpu.sample()
    run_id = int(time.time())

    def submit(i: int) -> Any:
        async def call() -> None:
            job_id, at = await reports.submit(slurm, f"bench-gang-{size}-{i}",
                                              f"bench-gang-{run_id}-{size}-{i}", nodes=size)
            submitted[job_id] = at

        return call

    await bounded([submit(i) for i in range(count)])
    try:
        await asyncio.wait_for(reports.wait_for(count), TIMEOUT)
    except TimeoutError as exc:
        raise TestbedError(f"only {len(reports.started)} of {count} raw jobs of {size} nodes "
                           "started") from exc
    wall = max(reports.started.values()) - t0
    return {"wall": wall, "per_s": count / wall, "cpu": cpu.used(cpu0, cpu.sample()),
            "submit_to_started_p50": _pct([reports.started[j] - submitted[j]
                                           for j in submitted], 0.5)}


async def sunk_phase(kube: httpx.AsyncClient, size: int, count: int,
                     log: Path) -> dict[str, Any]:
    offset = await asyncio.to_thread(lambda: log.stat().st_size)
    bound: set[str] = set()
    t0, cpu0 = time.monotonic(), cpu.sample()

    def create(gang: int, rank: int) -> Any:
        async def call() -> None:
            name = f"g{size}-{gang:03d}-{rank:02d}"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": NAMESPACE,
                                "labels": {"sunk.coreweave.com/gang": f"g{size}-{gang:03d}"},
                                "annotations": {"sunk.coreweave.com/gang-size": str(size),
                                                "sunk.coreweave.com/gang-index": str(rank)}},
                   "spec": {"schedulerName": NAME, "terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "c", "image": "busybox", "resources": {
                                "requests": {"cpu": "1", "memory": "100Mi"}}}]}}
            r = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=pod)
            r.raise_for_status()

        return call

    async def watch() -> None:
        while len(bound) < size * count:
            params = {"watch": "true", "timeoutSeconds": "600"}
            async with kube.stream("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                                   params=params, timeout=None) as r:
                async for line in r.aiter_lines():
                    pod = json.loads(line)["object"]
                    if pod["spec"].get("nodeName"):
                        bound.add(pod["metadata"]["name"])
                    if len(bound) >= size * count:
                        return

    watcher = asyncio.create_task(watch())
    await bounded([create(g, r) for g in range(count) for r in range(size)])
    try:
        await asyncio.wait_for(watcher, TIMEOUT)
    except TimeoutError as exc:
        raise TestbedError(f"only {len(bound)} of {size * count} gang members bound") from exc
    wall = time.monotonic() - t0
    used = cpu.used(cpu0, cpu.sample())
    await asyncio.sleep(0.5)  # the scheduler's log line follows its last bind

    def logged() -> list[float]:
        with log.open() as f:
            f.seek(offset)
            return [float(m[3]) for line in f if (m := _BOUND.search(line))
                    and m[1].startswith(f"{NAMESPACE}/label:g{size}-")]

    took = await asyncio.to_thread(logged)
    return {"wall": wall, "per_s": count / wall, "cpu": used, "start_to_bound": took}


async def run(tb: cluster.Testbed, sizes: list[int], count: int, log: Path,
              metrics_url: str) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    results = []
    async with httpx.AsyncClient(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                                 timeout=60) as slurm, kube_client(tb) as kube:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        for size in sizes:
            await drain(tb, slurm, kube)
            print(f"baseline: {count} raw jobs of {size} nodes ...", file=sys.stderr)
            async with StartedReports(tb) as reports:
                raw = await raw_phase(slurm, size, count, reports)
                await drain(tb, slurm, kube)
            print(f"sunk: {count} gangs of {size} Pods ...", file=sys.stderr)
            before = await scheduler_requests(metrics_url)
            ours = await sunk_phase(kube, size, count, log)
            ours["requests"] = difference(before, await scheduler_requests(metrics_url),
                                          size * count)
            await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                               params={"gracePeriodSeconds": "0"})
            await drain(tb, slurm, kube)
            results.append((size, raw, ours))
    return results


def figures(results: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}}
    for size, raw, ours in results:
        took = ours["start_to_bound"]
        out["sizes"][str(size)] = {
            "raw_jobs_per_s": round(raw["per_s"], 3), "gangs_per_s": round(ours["per_s"], 3),
            "ratio": round(ours["per_s"] / raw["per_s"], 3),
            "start_to_last_bound": {"count": len(took), "p50": round(_pct(took, 0.5), 4),
                                    "p99": round(_pct(took, 0.99), 4),
                                    "max": round(max(took, default=0.0), 4)},
            "requests_per_member": ours.get("requests", {})}
    return out


def render(f: dict[str, Any]) -> str:
    lines = ["| gang size | raw Slurm jobs/s | sunk gangs/s | ratio | start-to-last-bound p50 s "
             "| p99 s | max s |",
             "|---|---|---|---|---|---|---|"]
    for size, row in f["sizes"].items():
        took = row["start_to_last_bound"]
        lines.append(f"| {size} | {row['raw_jobs_per_s']:.2f} | {row['gangs_per_s']:.2f} | "
                     f"{row['ratio']:.2f} | {took['p50']:.3f} | {took['p99']:.3f} | "
                     f"{took['max']:.3f} |")
    lines += ["", "Start-to-last-bound: from the moment the scheduler learns that the gang's "
              "job started (the placeholder's `started` hook) to its last member's Binding "
              "(the scheduler's log; target p99 under 1 s at 16). Gangs per second: creation "
              "of the first Pod to the last member bound; raw Slurm: submission to every "
              "job's script started."]
    sizes = [size for size, row in f["sizes"].items() if row.get("requests_per_member")]
    if sizes:
        kinds = sorted({k for size in sizes for k in f["sizes"][size]["requests_per_member"]})
        lines += ["", "| the scheduler's requests per member (its own counters; a hook's: the "
                  "calls Slurm's scripts made to it) | "
                  + " | ".join(f"gangs of {size}" for size in sizes) + " |",
                  "|---|" + "---|" * len(sizes)]
        for kind in kinds:
            lines.append(f"| {kind} | " + " | ".join(
                f"{f['sizes'][size]['requests_per_member'].get(kind, 0):.2f}"
                for size in sizes) + " |")
    return "\n".join(lines)
