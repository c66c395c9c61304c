"""Pods bound per second through sunk, against raw Slurm in the same run.

    python -m benchmarks.scheduling --pods 400 --nodes 100 [--markdown docs/benchmarks.md]

1. Baseline: the same number of placeholder jobs submitted straight to slurmrestd (8 at a
   time), timed until every job's script has started (it appends ": started" to ``extra``).
2. sunk: that many Pods created through the API server (8 at a time), timed until every Pod is
   bound. A Pod is bound only after its own placeholder job has started, so the baseline is
   the ceiling: sunk adds the API server round trips and its own polling.

Both phases run the project's prolog (node locks through the scheduler's hook API) exactly as
the test bed's Slurm is configured. Needs root and the test bed (started if none is up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from testbed import cluster, procs
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler, start_scheduler

NAME = "sunk-bench"
NAMESPACE = "bench"
CONCURRENCY = 8


@dataclass
class Phase:
    name: str
    count: int
    wall: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.count / self.wall

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        return (f"| {self.name} | {self.count} | {self.wall:.1f} | {self.rate:.1f} | "
                f"{self.pct(0.5):.2f} | {self.pct(0.99):.2f} |")


def _kube_client(tb: cluster.Testbed) -> httpx.AsyncClient:
    ctx = ssl.create_default_context(cafile=str(tb.pki / "ca.crt"))
    ctx.load_cert_chain(str(tb.pki / "admin.crt"), str(tb.pki / "admin.key"))
    return httpx.AsyncClient(base_url=tb.apiserver_url, verify=ctx, timeout=60)


async def _bounded(calls: list[Any]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Any) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


TIMEOUT = 300.0


async def _within(task: asyncio.Task[None], done: dict[Any, float], count: int,
                  what: str) -> None:
    try:
        await asyncio.wait_for(task, TIMEOUT)
    except TimeoutError as exc:
        raise TestbedError(f"only {len(done)} of {count} {what} after {TIMEOUT:.0f}s") from exc


async def baseline(tb: cluster.Testbed, slurm: httpx.AsyncClient, count: int) -> Phase:
    submitted: dict[int, float] = {}
    started: dict[int, float] = {}
    t0 = time.monotonic()
    run_id = int(time.time())  # jobs of an earlier run may still be listed

    def submit(i: int) -> Any:
        async def call() -> None:
            extra = f"bench-baseline-{run_id}-{i}"
            job = {"name": f"bench-{i}", "extra": extra, "current_working_directory": "/tmp",
                   "script": "#!/bin/sh\nexec /opt/sunk/scripts/placeholder.sh\n",
                   "cpus_per_task": 1, "tasks": 1, "memory_per_node": {"set": True,
                                                                        "number": 100},
                   "standard_output": "/dev/null",
                   "environment": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                   f"SUNK_JOB_EXTRA={extra}", "SUNK_KILL_WAIT=30"]}
            r = await slurm.post("/slurm/v0.0.42/job/submit", json={"job": job})
            r.raise_for_status()
            submitted[int(r.json()["job_id"])] = time.monotonic()

        return call

    poller = asyncio.create_task(_watch_started(slurm, started, count,
                                                f"bench-baseline-{run_id}-"))
    await _bounded([submit(i) for i in range(count)])
    await _within(poller, started, count, "placeholder jobs started")
    latencies = [started[j] - submitted[j] for j in submitted]
    return Phase("raw Slurm (submit to started)", count, max(started.values()) - t0, latencies)


async def _watch_started(slurm: httpx.AsyncClient, started: dict[int, float],
                         count: int, prefix: str) -> None:
    since = 0
    while len(started) < count:
        params = {"update_time": str(max(0, since - 1))} if since else {}
        r = await slurm.get("/slurm/v0.0.42/jobs/", params=params)
        body = r.json()
        now = time.monotonic()
        for job in body["jobs"]:
            if job["extra"].startswith(prefix) and job["extra"].endswith(": started"):
                started.setdefault(int(job["job_id"]), now)
        since = int(body["last_update"]["number"] or since)
        await asyncio.sleep(0.2)


async def through_sunk(kube: httpx.AsyncClient, count: int) -> Phase:
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    t0 = time.monotonic()

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

    watcher = asyncio.create_task(_watch_bound(kube, bound, count))
    await _bounded([create(i) for i in range(count)])
    await _within(watcher, bound, count, "Pods bound")
    latencies = [bound[n] - created[n] for n in created]
    return Phase("sunk (Pod created to bound)", count, max(bound.values()) - t0, latencies)


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


async def _drain(tb: cluster.Testbed, slurm: httpx.AsyncClient) -> None:
    """Cancel every job and wait until every Slurm node is idle again."""
    tb.slurm("scancel", "--user=root")
    tb.slurm("scancel", "--user=k8s-pods")
    for _ in range(300):
        r = await slurm.get("/slurm/v0.0.42/nodes/")
        if all(n["state"] == ["IDLE"] for n in r.json()["nodes"]):
            return
        await asyncio.sleep(0.5)
    raise TestbedError("Slurm nodes did not go idle after cancelling the benchmark's jobs")


async def run(tb: cluster.Testbed, pods: int) -> tuple[Phase, Phase]:
    async with httpx.AsyncClient(base_url=tb.slurmrestd_url, headers=tb.slurm_headers(),
                                 timeout=60) as slurm, _kube_client(tb) as kube:
        await kube.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": NAMESPACE}})
        print(f"baseline: {pods} placeholder jobs straight to slurmrestd ...", file=sys.stderr)
        raw = await baseline(tb, slurm, pods)
        await _drain(tb, slurm)
        print(f"sunk: {pods} Pods through the API server ...", file=sys.stderr)
        ours = await through_sunk(kube, pods)
        await kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods",
                           params={"gracePeriodSeconds": "0"})
        await _drain(tb, slurm)
        return raw, ours


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def report(raw: Phase, ours: Phase, nodes: int) -> str:
    ratio = ours.rate / raw.rate
    gap = ours.pct(0.99) - raw.pct(0.99)
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
    started_here = False
    running: RunningScheduler | None = None
    try:
        tb = cluster.Testbed.load()
        if tb is None:
            tb = cluster.up(node_count=args.nodes)
            started_here = True
        elif tb.node_count != args.nodes:
            raise TestbedError(f"the running test bed has {tb.node_count} nodes, not "
                               f"{args.nodes}: `python -m testbed down` first")
        if not procs.port_free(tb.ports["hooks"]):
            raise TestbedError("another scheduler serves the test bed's hook port "
                               "(a demo or a test run): stop it first")
        running = start_scheduler(tb, name=NAME, hooks_port=tb.ports["hooks"])
        raw, ours = asyncio.run(run(tb, args.pods))
    except TestbedError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if running is not None:
            running.stop()
        if started_here:
            cluster.down()
    text = report(raw, ours, args.nodes)
    print(text)
    print(json.dumps({"raw_per_s": raw.rate, "sunk_per_s": ours.rate,
                      "raw_p99": raw.pct(0.99), "sunk_p99": ours.pct(0.99)}))
    if args.markdown:
        with args.markdown.open("a") as f:
            f.write(f"\n### Scheduling throughput ({time.strftime('%Y-%m-%d')})\n\n"
                    f"Command: `python -m benchmarks.scheduling --pods {args.pods} "
                    f"--nodes {args.nodes}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
