"""Open-loop latency: Pods created at a fixed rate below capacity, against raw placeholder jobs
submitted at the same rate in the same run.

For each rate, two phases of ``seconds`` each, from a quiet cluster:

1. raw Slurm: a placeholder job submitted straight to slurmrestd every 1/rate seconds (on a
   clock, whatever the answers: open loop), timed from the submit to its script's ``started``
   call; each job is cancelled ``lifetime`` seconds after it started, so the cluster never
   fills up;
2. sunk: a Pod created every 1/rate seconds, timed from the create to its binding (a watch);
   each Pod is deleted ``lifetime`` seconds after it was bound.

sunk's overhead for a Pod is its creation-to-bound time minus its own job's submit-to-started
time (both from the scheduler's log line at the binding): what the scheduler, the API server
and kwok add to what Slurm takes. ``started`` -> bound is the scheduler's part once the job runs.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import httpx

from benchmarks import cpu
from benchmarks.bed import StartedReports, drain, kube_client
from benchmarks.pods import (
    NAMESPACE,
    BoundWatch,
    bind_timings,
    cpu_seconds,
    cpu_wait_seconds,
    create,
    log_offset,
    mixed,
    pauses,
    pauses_between,
    summary,
)
from testbed import cluster
from testbed.scheduler import RunningScheduler

WITHIN = 120.0


async def _on_clock(rate: float, seconds: float, start: Any) -> list[asyncio.Task[None]]:
    """Call ``start(i)`` every 1/rate seconds for ``seconds`` (each in its own task)."""
    tasks = []
    t0 = time.monotonic()
    for i in range(int(rate * seconds)):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(start(i)))
    return tasks


async def raw_phase(tb: cluster.Testbed, slurm: httpx.AsyncClient, rate: float,
                    seconds: float, lifetime: float) -> dict[str, Any]:
    submitted: dict[int, float] = {}
    run_id = int(time.time())
    async with StartedReports(tb) as reports:
        async def one(i: int) -> None:
            job_id, at = await reports.submit(slurm, f"open-{i}", f"bench-open-{run_id}-{i}")
            submitted[job_id] = at
            while job_id not in reports.started:
                if time.monotonic() - at > WITHIN:
                    return
                await asyncio.sleep(0.05)
            await asyncio.sleep(lifetime)
            await slurm.delete(f"/slurm/v0.0.42/job/{job_id}")

        cpu0 = cpu.sample()
        tasks = await _on_clock(rate, seconds, one)
        await asyncio.gather(*tasks)
        used = cpu.used(cpu0, cpu.sample())
        took = [reports.started[j] - at for j, at in submitted.items() if j in reports.started]
    return {"count": len(submitted), "started": len(took),
            "submit_to_started": summary(took), "cpu_cores": {
                k: round(v / seconds, 3) for k, v in used.items()}}


async def sunk_phase(kube: httpx.AsyncClient, running: RunningScheduler, rate: float,
                     seconds: float, lifetime: float, unique_share: float = 0.5
                     ) -> dict[str, Any]:
    created: dict[str, float] = {}
    offset = log_offset(running.log)
    async with BoundWatch(kube) as watch:
        async def one(i: int) -> None:
            name = f"open-{rate:g}-{i:04d}"
            created[name] = time.monotonic()
            await create(kube, mixed(name, i, unique_share))
            try:
                await watch.wait([name], WITHIN)
            except TimeoutError:
                return
            await asyncio.sleep(lifetime)
            await kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                              params={"gracePeriodSeconds": "0"})

        paused0 = await pauses(running.url("metrics"))
        cpu0, own0 = cpu.sample(), cpu_seconds(running.process.pid)
        waited0 = cpu_wait_seconds(running.process.pid)
        t0 = time.monotonic()
        tasks = await _on_clock(rate, seconds, one)
        await asyncio.gather(*tasks)
        wall = time.monotonic() - t0
        own = cpu_seconds(running.process.pid) - own0
        waited = cpu_wait_seconds(running.process.pid) - waited0
        used = cpu.used(cpu0, cpu.sample())
        bound = {n: watch.bound[n] - at for n, at in created.items() if n in watch.bound}
        paused = pauses_between(paused0, await pauses(running.url("metrics")))
    await asyncio.sleep(0.5)  # the log line follows the binding
    logged = await asyncio.to_thread(bind_timings, running.log, offset)
    overhead = [bound[n] - logged[n][1] for n in bound if n in logged]
    return {"count": len(created), "bound": len(bound),
            "created_to_bound": summary(list(bound.values())),
            "overhead": summary(overhead),
            "started_to_bound": summary([logged[n][0] for n in bound if n in logged]),
            "job_submit_to_started": summary([logged[n][1] for n in bound if n in logged]),
            "scheduler_cpu_ms_per_pod": round(1000 * own / max(1, len(bound)), 2),
            "scheduler_cpu_share": round(own / wall, 3),
            # how long the scheduler's event loop was ready but waited for a CPU (bed's load)
            "scheduler_cpu_wait_share": round(waited / wall, 3),
            "cpu_cores": {k: round(v / seconds, 3) for k, v in used.items()},
            # what a slow binding waited for: the loop held by one piece of work, or a Pod's
            # key queued behind busy workers
            "pauses": paused}


async def run(tb: cluster.Testbed, running: RunningScheduler, rates: list[float],
              seconds: float, lifetime: float, unique_share: float = 0.5) -> dict[str, Any]:
    figures: dict[str, Any] = {"seconds": seconds, "lifetime": lifetime, "rates": {},
                               "unique_share": unique_share}
    async with httpx.AsyncClient(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                                 timeout=60) as slurm, kube_client(tb) as kube:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        for rate in rates:
            await drain(tb, slurm, kube)
            print(f"open loop: {rate:g} raw jobs/s for {seconds:.0f}s ...", file=sys.stderr)
            raw = await raw_phase(tb, slurm, rate, seconds, lifetime)
            await drain(tb, slurm, kube)
            print(f"open loop: {rate:g} Pods/s for {seconds:.0f}s ...", file=sys.stderr)
            ours = await sunk_phase(kube, running, rate, seconds, lifetime, unique_share)
            await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                               params={"gracePeriodSeconds": "0"})
            figures["rates"][f"{rate:g}"] = {"raw": raw, "sunk": ours}
        await drain(tb, slurm, kube)
    return figures


def render(figures: dict[str, Any]) -> str:
    lines = [f"Each rate for {figures['seconds']:.0f} s; every job or Pod lives "
             f"{figures['lifetime']:.0f} s after it started or was bound. The last two columns "
             "are what a slow binding could wait for (the scheduler's metrics).", "",
             "| rate /s | raw submit-to-started p50 / p99 s | sunk creation-to-bound p50 / p99 s "
             "| overhead p50 / p99 s | started-to-bound p50 / p99 s | scheduler CPU per Pod ms "
             "| scheduler share of a core | scheduler's loop waiting for a CPU | machine busy "
             "| event loop checks late by more than 100 ms | Pod keys waiting more than 100 ms "
             "for a worker (mean wait) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for rate, both in sorted(figures["rates"].items(), key=lambda kv: float(kv[0])):
        raw, ours = both["raw"], both["sunk"]

        def two(s: dict[str, float]) -> str:
            return f"{s['p50']:.3f} / {s['p99']:.3f}"

        lines.append(f"| {rate} | {two(raw['submit_to_started'])} | "
                     f"{two(ours['created_to_bound'])} | {two(ours['overhead'])} | "
                     f"{two(ours['started_to_bound'])} | {ours['scheduler_cpu_ms_per_pod']:.1f} | "
                     f"{ours['scheduler_cpu_share']:.1%} | "
                     f"{_share(ours.get('scheduler_cpu_wait_share'))} | "
                     f"{ours['cpu_cores']['machine total']:.2f} of 2 cores | "
                     f"{_waits(ours.get('pauses'))} |")
    return "\n".join(lines)


def _waits(pauses: dict[str, Any] | None) -> str:
    """The event loop's lateness and the Pod keys' queueing, as two cells (empty for a record
    made before they were measured)."""
    if pauses is None:
        return " | "
    lag, queued = pauses.get("loop_lag") or {}, pauses.get("queue_wait") or {}
    mean = 1000 * queued.get("seconds", 0) / max(1.0, queued.get("count", 0))
    return (f"{lag.get('over_0.1s', 0):.0f} of {lag.get('count', 0):.0f} | "
            f"{queued.get('over_0.1s', 0):.0f} of {queued.get('count', 0):.0f} "
            f"({mean:.1f} ms)")


def _share(value: float | None) -> str:
    """A share, or nothing for a record made before it was measured."""
    return "" if value is None else f"{value:.1%}"
