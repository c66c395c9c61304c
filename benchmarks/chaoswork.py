"""The soak's work: what a seed asks for (pure) and doing it on the bed.

Each kind comes as a Poisson stream of its own rate (per second):

- ``pod``: a single Pod of 1 to 8 CPUs, deleted 5 to 90 s later;
- ``gang``: a gang of 2 to 8 Pods by sunk's label, deleted 20 to 90 s later; one in four is
  heterogeneous (a 1-CPU leader and 2-CPU workers: one heterogeneous Slurm job);
- ``mid-bind``: a Pod deleted 0.1 to 3 s after it was made, while sunk is placing it;
- ``sbatch``: a plain Slurm job of someone else's on one node for 10 to 60 s (its prolog locks
  the node);
- ``scancel``: a placeholder job of the soak's, picked at random among the active ones,
  cancelled;
- ``cordon``: a Node cordoned, and uncordoned 10 to 45 s later.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from testbed import cluster
from testbed.errors import TestbedError

#: Each kind of work and how often it comes (per second).
RATES = {"pod": 0.8, "gang": 1 / 40, "mid-bind": 1 / 20, "sbatch": 1 / 30,
         "scancel": 1 / 45, "cordon": 1 / 60}
PREFIX = "sunk.coreweave.com/"
SBATCH_NAME = "chaos-sbatch"


@dataclass(frozen=True)
class Work:
    """One piece of work: when (seconds after the start), what, and its figures."""

    at: float
    kind: str
    name: str = ""
    #: A gang's size; the node (index) of an sbatch job or a cordon.
    size: int = 1
    cpus: int = 1
    #: How long until it is undone (a Pod deleted, a Node uncordoned, a job's sleep).
    lifetime: float = 0.0
    #: A gang whose leader differs from its workers.
    het: bool = False
    #: Which of the active jobs a scancel picks (a fraction of their count).
    pick: float = 0.0


def _one(rng: random.Random, at: float, kind: str, n: int, nodes: int) -> Work:
    if kind == "pod":
        return Work(at, kind, f"p{n:05d}", cpus=rng.choice((1, 2, 4, 8)),
                    lifetime=round(rng.uniform(5, 90), 1))
    if kind == "gang":
        return Work(at, kind, f"g{n:05d}", size=rng.randint(2, 8), cpus=rng.choice((1, 2)),
                    lifetime=round(rng.uniform(20, 90), 1), het=rng.random() < 0.25)
    if kind == "mid-bind":
        return Work(at, kind, f"m{n:05d}", cpus=rng.choice((1, 2, 4)),
                    lifetime=round(rng.uniform(0.1, 3), 2))
    if kind == "sbatch":
        return Work(at, kind, size=rng.randrange(nodes), lifetime=round(rng.uniform(10, 60)))
    if kind == "scancel":
        return Work(at, kind, pick=round(rng.random(), 3))
    return Work(at, kind, size=rng.randrange(nodes), lifetime=round(rng.uniform(10, 45), 1))


def plan_work(seed: int, minutes: float, *, nodes: int = 8,
              rates: dict[str, float] = RATES) -> list[Work]:
    """The work a seed gives, in time order (pure: the same seed, the same work)."""
    rng = random.Random(f"work-{seed}")
    length, out, n = minutes * 60, [], 0
    for kind, rate in rates.items():
        at = rng.expovariate(rate)
        while at < length:
            out.append(_one(rng, round(at, 2), kind, n, nodes))
            at += rng.expovariate(rate)
            n += 1
    return sorted(out, key=lambda w: (w.at, w.kind, w.name))


def pod(name: str, namespace: str, scheduler: str, cpus: int,
        labels: dict[str, str] | None = None, notes: dict[str, str] | None = None
        ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                         "annotations": notes or {}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox", "resources": {
                         "requests": {"cpu": str(cpus), "memory": "1Gi"}}}]}}


def gang(work: Work, namespace: str, scheduler: str) -> list[dict[str, Any]]:
    """A gang's members by sunk's label (a heterogeneous one: a leader of 1 CPU, workers of
    2)."""
    return [pod(f"{work.name}-{i}", namespace, scheduler,
                (1 if i == 0 else 2) if work.het else work.cpus,
                labels={f"{PREFIX}gang": work.name},
                notes={f"{PREFIX}gang-size": str(work.size), f"{PREFIX}gang-index": str(i)})
            for i in range(work.size)]


@dataclass
class Worker:
    """Does the work on the bed; counts what was done."""

    tb: cluster.Testbed
    kube: httpx.AsyncClient
    slurm: httpx.AsyncClient
    namespace: str
    scheduler: str
    started: float = field(default_factory=time.monotonic)
    done: dict[str, int] = field(default_factory=dict)
    created: int = 0
    deleted: int = 0
    cordoned: set[str] = field(default_factory=set)

    async def run(self, work: list[Work]) -> None:
        async with asyncio.TaskGroup() as group:
            for item in work:
                await asyncio.sleep(max(0.0, item.at - (time.monotonic() - self.started)))
                group.create_task(self.do(item))

    async def do(self, work: Work) -> None:
        if work.kind in ("pod", "mid-bind"):
            made = await self.create(pod(work.name, self.namespace, self.scheduler, work.cpus))
            names = [work.name] if made else []
        elif work.kind == "gang":
            made_all = [await self.create(m) for m in gang(work, self.namespace,
                                                           self.scheduler)]
            names = [f"{work.name}-{i}" for i, ok in enumerate(made_all) if ok]
            made = bool(names)
        elif work.kind == "sbatch":
            made = await asyncio.to_thread(self._sbatch, work)
        elif work.kind == "scancel":
            made = await self._scancel(work.pick)
        else:
            made = await self._cordon(work)
        if made:
            self.done[work.kind] = self.done.get(work.kind, 0) + 1
        if work.kind in ("pod", "mid-bind", "gang") and names:
            await asyncio.sleep(work.lifetime)
            await asyncio.gather(*(self.delete(n) for n in names))

    async def create(self, manifest: dict[str, Any]) -> bool:
        try:
            r = await self.kube.post(f"/api/v1/namespaces/{self.namespace}/pods",
                                     json=manifest)
        except httpx.HTTPError:
            return False  # the API server is down: this Pod is not made (the work goes on)
        self.created += r.status_code == 201
        return r.status_code == 201

    async def delete(self, name: str) -> None:
        while True:
            try:
                r = await self.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
                self.deleted += r.status_code == 200
                if r.status_code in (200, 404):
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(2)  # the API server is down: delete it once it is back

    def _sbatch(self, work: Work) -> bool:
        node = self.tb.nodes[work.size % len(self.tb.nodes)]
        try:
            self.tb.slurm("sbatch", "--parsable", f"--nodelist={node.slurm_name}",
                          "--chdir=/tmp", "--output=/dev/null", "--cpus-per-task=1",
                          f"--job-name={SBATCH_NAME}", f"--wrap=sleep {work.lifetime:.0f}",
                          timeout=20)
        except TestbedError:
            return False  # slurmctld is down: not submitted
        return True

    async def _scancel(self, pick: float) -> bool:
        try:
            r = await self.slurm.get("/slurm/v0.0.42/jobs/")
            jobs = sorted(int(j["job_id"]) for j in r.json().get("jobs") or []
                          if str(j.get("name", "")).startswith(
                              (f"pod:{self.namespace}/", f"gang:{self.namespace}/"))
                          and j["job_state"][0] in ("RUNNING", "PENDING"))
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        if not jobs:
            return False
        job = jobs[min(int(pick * len(jobs)), len(jobs) - 1)]
        try:
            await asyncio.to_thread(self.tb.slurm, "scancel", str(job), timeout=20)
        except TestbedError:
            return False
        return True

    async def _cordon(self, work: Work) -> bool:
        node = self.tb.nodes[work.size % len(self.tb.nodes)].k8s_name
        if node in self.cordoned or not await self.set_cordon(node, True):
            return False
        self.cordoned.add(node)
        await asyncio.sleep(work.lifetime)
        while not await self.set_cordon(node, False):  # noqa: ASYNC110 (a PATCH, retried)
            await asyncio.sleep(2)
        self.cordoned.discard(node)
        return True

    async def set_cordon(self, node: str, on: bool) -> bool:
        try:
            r = await self.kube.patch(f"/api/v1/nodes/{node}",
                                      json={"spec": {"unschedulable": on or None}},
                                      headers={"Content-Type":
                                               "application/merge-patch+json"})
        except httpx.HTTPError:
            return False
        return r.is_success

    async def undo(self) -> None:
        """Every cordon lifted, and every sbatch job of the soak's cancelled (the work is over)."""
        for node in [n.k8s_name for n in self.tb.nodes]:
            await self.set_cordon(node, False)
        with contextlib.suppress(TestbedError):
            await asyncio.to_thread(self.tb.slurm, "scancel", f"--name={SBATCH_NAME}")
