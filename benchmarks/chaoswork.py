"""The soak's work: what a seed asks for (pure) and doing it on the bed.

Each kind comes as a Poisson stream of its own rate (per second):

- ``pod``: a single Pod of 1 to 8 CPUs, deleted 5 to 90 s later (one in ten carries the label
  the extra policy of a ConfigMap edit refuses);
- ``gpu-pod``: a Pod asking for 1 or 2 GPUs by a ResourceClaim, deleted 5 to 90 s later;
- a gang of 2 to 8 Pods from each source sunk reads (:mod:`benchmarks.chaosobjects`): ``gang``
  (sunk's label; one in four heterogeneous), ``jobset``, ``lws``, ``workload``, ``job-gang``,
  ``podgroup``; deleted (its owner, or its Pods and group) 20 to 90 s later;
- ``mid-bind``: a Pod deleted 0.1 to 3 s after it was made, while sunk is placing it;
- ``sbatch``: a plain Slurm job of someone else's on one node for 10 to 60 s (its prolog locks
  the node);
- ``scancel``: a placeholder job of the soak's, picked at random among the active ones,
  cancelled;
- ``cordon``: a Node cordoned, and uncordoned 10 to 45 s later;
- ``policy-edit``: the policy ConfigMap switched to another set (the default, one with a policy
  more, a broken one), when the scheduler reads its policies from one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.chaosobjects import (
    DENIED_LABEL,
    GANG_SOURCES,
    GPU_TEMPLATES,
    OWNERS,
    claim_template,
    gang_objects,
    gpu_pod,
    pod,
    policy_sets,
)
from testbed import cluster
from testbed.errors import TestbedError

#: Each kind of work and how often it comes (per second).
RATES = {"pod": 0.8, "gpu-pod": 1 / 15, "gang": 1 / 60, "jobset": 1 / 120, "lws": 1 / 120,
         "workload": 1 / 120, "job-gang": 1 / 120, "podgroup": 1 / 120, "mid-bind": 1 / 20,
         "sbatch": 1 / 30, "scancel": 1 / 45, "cordon": 1 / 60, "policy-edit": 1 / 90}
SBATCH_NAME = "chaos-sbatch"
#: The policy ConfigMap the soak edits (in its namespace), when the scheduler reads it.
POLICY_CONFIGMAP = "sunk-policies"


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
    #: Which of the active jobs a scancel picks, or the policy set an edit puts in force (a
    #: fraction of their count); whether a Pod carries the label the extra policy refuses.
    pick: float = 0.0
    denied: bool = False


def _one(rng: random.Random, at: float, kind: str, n: int, nodes: int) -> Work:
    if kind == "pod":
        return Work(at, kind, f"p{n:05d}", cpus=rng.choice((1, 2, 4, 8)),
                    lifetime=round(rng.uniform(5, 90), 1), denied=rng.random() < 0.1)
    if kind == "gpu-pod":
        return Work(at, kind, f"d{n:05d}", size=rng.choice((1, 2)),
                    lifetime=round(rng.uniform(5, 90), 1))
    if kind in GANG_SOURCES:
        return Work(at, kind, f"g{n:05d}", size=rng.randint(2, 8), cpus=rng.choice((1, 2)),
                    lifetime=round(rng.uniform(20, 90), 1),
                    het=kind == "gang" and rng.random() < 0.25)
    if kind == "mid-bind":
        return Work(at, kind, f"m{n:05d}", cpus=rng.choice((1, 2, 4)),
                    lifetime=round(rng.uniform(0.1, 3), 2))
    if kind == "sbatch":
        return Work(at, kind, size=rng.randrange(nodes), lifetime=round(rng.uniform(10, 60)))
    if kind in ("scancel", "policy-edit"):
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
    #: The policy ConfigMap (in ``namespace``) the scheduler reads, if it reads one.
    policy_configmap: str | None = None
    #: The version Kubernetes' PodGroups are served in (v1beta1 from 1.37, v1alpha2 in 1.36).
    workload_version: str = "v1beta1"

    async def run(self, work: list[Work]) -> None:
        async with asyncio.TaskGroup() as group:
            for item in work:
                await asyncio.sleep(max(0.0, item.at - (time.monotonic() - self.started)))
                group.create_task(self.do(item))

    async def prepare(self) -> None:
        """The claim templates the GPU Pods name."""
        for count, name in GPU_TEMPLATES.items():
            await self.create(f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/"
                              "resourceclaimtemplates", claim_template(self.namespace, name, count))

    async def do(self, work: Work) -> None:
        pods = f"/api/v1/namespaces/{self.namespace}/pods"
        made: list[str] = []  # what to delete once its lifetime is over
        done = False
        if work.kind in ("pod", "mid-bind"):
            labels = {DENIED_LABEL: "yes"} if work.denied else None
            made = await self.create_all([(pods, pod(work.name, self.namespace, self.scheduler,
                                                     work.cpus, labels=labels))])
        elif work.kind == "gpu-pod":
            made = await self.create_all([(pods, gpu_pod(work.name, self.namespace,
                                                         self.scheduler, work.size))])
        elif work.kind in GANG_SOURCES:
            made = await self.create_all(gang_objects(
                work.kind, work.name, self.namespace, self.scheduler, work.size, work.cpus,
                het=work.het, workload_version=self.workload_version))
        elif work.kind == "sbatch":
            done = await asyncio.to_thread(self._sbatch, work)
        elif work.kind == "scancel":
            done = await self._scancel(work.pick)
        elif work.kind == "policy-edit":
            done = await self._edit_policies(work.pick)
        else:
            done = await self._cordon(work)
        if made or done:
            self.done[work.kind] = self.done.get(work.kind, 0) + 1
        if made:
            await asyncio.sleep(work.lifetime)
            await asyncio.gather(*(self.delete(path) for path in reversed(made)))

    async def create_all(self, objects: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """Each object made, in order; the paths of those made."""
        return [f"{path}/{body['metadata']['name']}" for path, body in objects
                if await self.create(path, body)]

    async def create(self, path: str, manifest: dict[str, Any]) -> bool:
        try:
            r = await self.kube.post(path, json=manifest)
        except httpx.HTTPError:
            return False  # the API server is down: this one is not made (the work goes on)
        self.created += r.status_code == 201 and manifest["kind"] == "Pod"
        return r.status_code == 201

    async def delete(self, path: str) -> None:
        """Delete it, and what it owns, retried until the API server says it is gone."""
        while True:
            try:
                r = await self.kube.delete(path, params={"propagationPolicy": "Background"})
                self.deleted += r.status_code in (200, 202) and "/pods/" in path
                if r.status_code in (200, 202, 404):
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

    async def _edit_policies(self, pick: float) -> bool:
        """The policy ConfigMap switched to one of :func:`policy_sets` (a merge patch: keys
        the new set lacks are removed)."""
        if self.policy_configmap is None:
            return False
        sets = policy_sets()
        data: dict[str, str | None] = dict(sets[min(int(pick * len(sets)), len(sets) - 1)])
        for key in {k for s in sets for k in s} - data.keys():
            data[key] = None
        try:
            r = await self.kube.patch(
                f"/api/v1/namespaces/{self.namespace}/configmaps/{self.policy_configmap}",
                json={"data": data}, headers={"Content-Type": "application/merge-patch+json"})
        except httpx.HTTPError:
            return False
        return r.is_success

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
        """Every cordon lifted, every owner of Pods deleted, every sbatch job of the soak's
        cancelled, the default policies in force again (the work is over)."""
        for node in [n.k8s_name for n in self.tb.nodes]:
            await self.set_cordon(node, False)
        for owners in OWNERS:
            with contextlib.suppress(httpx.HTTPError):
                await self.kube.delete(owners.format(ns=self.namespace),
                                       params={"propagationPolicy": "Background"})
        await self._edit_policies(0.0)
        with contextlib.suppress(TestbedError):
            await asyncio.to_thread(self.tb.slurm, "scancel", f"--name={SBATCH_NAME}")
