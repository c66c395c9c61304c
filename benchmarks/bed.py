"""What the benchmarks share: the test bed and a scheduler on it, clients, and a quiet cluster
between phases."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
from aiohttp import web

from benchmarks import results
from sunk.plans.placement import LOCK_TAINT
from testbed import cluster, procs
from testbed.errors import TestbedError
from testbed.scheduler import RunningScheduler, start_scheduler

CONCURRENCY = 8
T = TypeVar("T")


@contextlib.contextmanager
def stopped_cleanly() -> Iterator[None]:
    """SIGTERM (a benchmark stopped by hand) raises SystemExit meanwhile, so the ``finally``
    blocks run: by default Python dies at once, and the scheduler the benchmark started was
    left running, to compete with the next runs for the two cores."""
    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def on_bed(nodes: int, name: str,
           run: Callable[[cluster.Testbed, RunningScheduler], Coroutine[Any, Any, T]],
           extra: list[str] | None = None,
           before: Callable[[cluster.Testbed], object] | None = None) -> T:
    """``run`` against a test bed of ``nodes`` nodes (the running one, or one started and
    stopped here) with a scheduler ``name`` on the bed's hook port (``extra``: more of its
    flags; ``before``: called before it starts). Raises TestbedError."""
    started_here = False
    running: RunningScheduler | None = None
    with stopped_cleanly():
        try:
            tb = cluster.Testbed.load()
            if tb is None:
                tb = cluster.up(node_count=nodes)
                started_here = True
            elif tb.node_count != nodes:
                raise TestbedError(f"the running test bed has {tb.node_count} nodes, not "
                                   f"{nodes}: `python -m testbed down` first")
            if not procs.port_free(tb.ports["hooks"]):
                raise TestbedError("another scheduler serves the test bed's hook port "
                                   "(a demo or a test run): stop it first")
            if before is not None:
                before(tb)
            running = start_scheduler(tb, name=name, hooks_port=tb.ports["hooks"], extra=extra)
            with cluster.patient_prolog(tb):  # a real cluster's wait for the lock, not the bed's
                return asyncio.run(run(tb, running))
        finally:
            if running is not None:
                running.stop()
            if started_here:
                cluster.down()


def kube_client(tb: cluster.Testbed) -> httpx.AsyncClient:
    ctx = ssl.create_default_context(cafile=str(tb.pki / "ca.crt"))
    ctx.load_cert_chain(str(tb.pki / "admin.crt"), str(tb.pki / "admin.key"))
    return httpx.AsyncClient(base_url=tb.apiserver_url, verify=ctx, timeout=60)


async def bounded(calls: list[Any]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Any) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


class StartedReports:
    """Where the baseline's placeholder scripts report ``started``: the script calls its hook
    right after appending ``: started`` to the job's extra (the moment sunk binds a Pod), so
    no polling of Slurm loads the baseline. Any other hook call (``terminating``, when the
    jobs are cancelled) is told that no Pod belongs to the job, so the job ends at once.

    The baseline's jobs find it through a hooks env file of their own (``SUNK_HOOKS_ENV``);
    the prolog still locks nodes through the scheduler, as in the sunk phase."""

    def __init__(self, tb: cluster.Testbed) -> None:
        self.tb = tb
        self.started: dict[int, float] = {}
        self.hooks_env = "/tmp/sunk-benchmark-hooks.env"  # inside the chroot
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> StartedReports:
        async def on_started(request: web.Request) -> web.Response:
            self.started.setdefault(int(request.match_info["job"]), time.monotonic())
            self._changed.set()
            return web.json_response({"pod": "", "gone": False})

        async def unknown(request: web.Request) -> web.Response:
            return web.json_response({"detail": "no Pod: a benchmark job"}, status=404)

        app = web.Application()
        app.router.add_post("/hooks/v1/jobs/{job}/started", on_started)
        app.router.add_route("*", "/{tail:.*}", unknown)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._write_env(f"SUNK_HOOK_URL=http://127.0.0.1:{self._runner.addresses[0][1]}\n"
                        "SUNK_HOOK_TOKEN=benchmark\n")
        return self

    async def __aexit__(self, *_: object) -> None:
        self._write_env(None)
        if self._runner is not None:
            await self._runner.cleanup()

    def _write_env(self, text: str | None) -> None:
        path = Path(self.tb.chroot, self.hooks_env.lstrip("/"))
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)

    async def submit(self, slurm: httpx.AsyncClient, name: str, extra: str,
                     nodes: int = 1) -> tuple[int, float]:
        """Submit a raw placeholder job (1 CPU and 100 MB on each of ``nodes`` nodes) that
        reports ``started`` here; its id, and when the submit was sent (monotonic)."""
        job: dict[str, Any] = {
            "name": name, "extra": extra, "current_working_directory": "/tmp",
            "script": "#!/bin/sh\nexec /opt/sunk/scripts/placeholder.sh\n",
            "tasks": nodes, "cpus_per_task": 1, "memory_per_node": {"set": True, "number": 100},
            "standard_output": "/dev/null",
            "environment": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", f"SUNK_JOB_EXTRA={extra}",
                            "SUNK_KILL_WAIT=30", f"SUNK_HOOKS_ENV={self.hooks_env}"]}
        if nodes > 1:
            job.update({"nodes": str(nodes), "minimum_nodes": nodes, "maximum_nodes": nodes})
        at = time.monotonic()  # as for a Pod: from when the request is sent
        r = await slurm.post("/slurm/v0.0.42/job/submit", json={"job": job})
        r.raise_for_status()
        return int(r.json()["job_id"]), at

    async def wait_for(self, count: int) -> None:
        while len(self.started) < count:
            self._changed.clear()
            await self._changed.wait()


async def drain(tb: cluster.Testbed, slurm: httpx.AsyncClient,
                 kube: httpx.AsyncClient) -> None:
    """Cancel every job, and wait until every Slurm node is idle and every node lock is
    released again: each phase starts from the same quiet cluster, and does not pay for
    the previous one's unlocking."""
    # 11,000 jobs, each recorded by slurmdbd as it ends: minutes, not Slurm's usual seconds
    tb.slurm("scancel", "--user=root", timeout=600)
    tb.slurm("scancel", "--user=k8s-pods", timeout=600)
    for _ in range(300):
        r = await slurm.get("/slurm/v0.0.42/nodes/")
        idle = all(n["state"] == ["IDLE"] for n in r.json()["nodes"])
        nodes = (await kube.get("/api/v1/nodes")).json()["items"]
        locked = [n for n in nodes if any(t["key"] == LOCK_TAINT
                                          for t in n["spec"].get("taints") or [])]
        if idle and not locked:
            return
        await asyncio.sleep(0.5)
    raise TestbedError("Slurm nodes did not go idle, or their locks were not released, after "
                       "cancelling the benchmark's jobs")


def machine() -> str:
    """This machine in one line, for a report's text (:func:`benchmarks.results.machine_info`
    gives the same as data, for a results record)."""
    return results.describe_machine(results.machine_info())
