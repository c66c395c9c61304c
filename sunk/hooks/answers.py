"""The scheduler's answers to the placeholder job's hook calls.

The hook API (:mod:`sunk.hooks.routes`) checks the caller's credential; each answer here checks the
call against what Slurm says of the job (one read of it where Slurm's word matters) and refuses
a call that does not match, with the reason. An outage while answering is a 503 with
Retry-After (the caller retries), never a failure.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from sunk import kube, objects
from sunk.apply.executor import Executor
from sunk.hooks.auth import HookRefused, job_owner
from sunk.hooks.inflight import waiting
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.plans.gang import TERMINAL
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError
from sunk.slurm.job import Job, PodIdentity
from sunk.slurm.text import expand_hostlist

log = logging.getLogger("sunk.hooks.routes")

#: The job's Pod (``ns/name``) and whether it is gone; None for a job that is not ours.
Answer = tuple[str, bool] | None


@contextlib.asynccontextmanager
async def answering(what: str) -> AsyncIterator[None]:
    """An outage while answering a hook: the caller is told to retry (503), not failed."""
    try:
        yield
    except SlurmError as exc:
        raise HookRefused(503, f"{what}: Slurm did not answer: {exc}", retry_after=5) from exc
    except kube.KubeError as exc:
        raise HookRefused(503, f"{what}: the API server did not answer: {exc}",
                          retry_after=5) from exc


class HookAnswers:
    def __init__(self, cluster: Cluster, watch: SlurmWatch, executor: Executor, *,
                 wake: Callable[[PodIdentity], None]) -> None:
        self.cluster = cluster
        self.watch = watch
        self.executor = executor
        self.wake = wake
        self.ready = cluster.ready
        self.scheduler_name = cluster.settings.scheduler_name

    def _ours(self, job_id: int) -> tuple[PodIdentity, list[kube.Obj]] | None:
        """The Pod a job of ours is for (a gang: its members), and those that still exist."""
        who = self.cluster.jobs.owner(job_id)
        if who is None or who.scheduler != self.cluster.settings.scheduler_name:
            return None
        if who.gang:  # members that ended hold nothing: not deleted, not waited for
            return who, [p for p in self.cluster.gang_members(who)
                         if objects.pod(p).status.phase not in TERMINAL]
        if job_id in self.executor.memory.refitted.get(who.uid, ()):
            return who, []  # cancelled to go elsewhere: its Pod is no longer this job's
        pod = self.cluster.pod_of(who)
        return who, [] if pod is None else [pod]

    def job_owner(self, job_id: int) -> str | None:
        """What the job's credential is bound to (its Pod), or None if it is not ours."""
        found = self._ours(job_id)
        return None if found is None else job_owner(found[0].scheduler, found[0].uid)

    async def read_job(self, job_id: int) -> None:
        """Learn the job from Slurm now: a placeholder is told its job is not ours (and lets
        its node go) only on Slurm's word."""
        async with answering(f"reading job {job_id}"):
            await self.watch.read(job_id)

    async def _fresh_job(self, job_id: int) -> Job:
        """The job as Slurm has it now (hooks that act on Slurm's word read it first)."""
        async with answering(f"reading job {job_id}"):
            fresh = await self.watch.read(job_id)
        if fresh is None:
            raise HookRefused(409, f"Slurm has no job {job_id}")
        return fresh

    async def job_terminating(self, job_id: int, node: str) -> Answer:
        """The placeholder job got its termination signal: delete its Pod (with the Pod's own
        grace period)."""
        found = self._ours(job_id)
        if found is None:
            return None
        who, pods = found
        cached = self.cluster.jobs.get(job_id)
        if (cached is None or cached.state == "PENDING") and (
                await self._fresh_job(job_id)).state == "PENDING":
            raise HookRefused(409, f"Slurm shows job {job_id} pending: no script of it runs, "
                                   "so nothing of it is ending")
        if not pods:
            return who.key, True
        for pod in pods:
            meta = objects.pod(pod).metadata
            if meta.terminating:
                continue
            async with answering(f"deleting Pod {meta.key}"):
                await self.executor.kube.delete_pod(pod)
            self.executor.pod_event(pod, self.cluster.state.pods.get(meta.key),
                                    "SlurmJobTerminating",
                                    f"Slurm is ending job {job_id} on {node}; deleting the Pod"
                                    + (f" and the rest of gang {who.name}" if who.gang else ""),
                                    warning=True)
            metrics.PODS_DELETED.inc()
        return who.key, False

    async def job_started(self, job_id: int, node: str) -> Answer:
        """The placeholder says its job started on ``node``, right after writing ": started"
        into the job's extra. Bound only if Slurm runs the job on that node (as read at its
        lock, or now) and its extra says started (the call's word after a lock read, Slurm's
        otherwise); the Pod is then bound now, without waiting for the next poll."""
        found = self._ours(job_id)
        if found is None:
            return None
        who, pods = found
        # Slurm was read when the job's prolog asked for this node's lock: the job runs there,
        # on the nodes that read gave (a gang's every node). The call (the job's own
        # credential, or the node's) says its script has written ": started"; a second read
        # would only add slurmctld's delay. A heterogeneous job is read again: its nodes are
        # its components', each read at its own prolog (learn_started says None).
        if (node in expand_hostlist(self.cluster.jobs.allocated.get(job_id, ""))
                and self.watch.learn_started(job_id) is not None):
            self.watch.heard_started(job_id)
            self.wake(who)
            return who.key, not pods
        fresh = await self._fresh_job(job_id)
        if fresh.state != "RUNNING":
            raise HookRefused(409, f"Slurm shows job {job_id} {fresh.state.lower()}, not "
                                   "running: its Pod is not bound")
        if node not in expand_hostlist(fresh.nodes):
            raise HookRefused(409, f"Slurm runs job {job_id} on {fresh.nodes}, not on {node}")
        if not fresh.started:
            raise HookRefused(409, f"job {job_id}'s extra does not say started: the "
                                   "placeholder writes it before it calls")
        self.watch.heard_started(job_id)
        self.wake(who)
        return who.key, not pods

    async def drain_for_job(self, job_id: int, node: str) -> Answer:
        """The job reached KillWait with its Pod still there: drain its Slurm node, naming the
        Pod, so nothing else lands there until someone looks. A gang's job drains the node of
        each member still there, and only those."""
        found = self._ours(job_id)
        if found is None:
            return None
        who, pods = found
        cached = self.cluster.jobs.get(job_id)
        nodes = (cached.nodes if cached is not None else "") or (
            await self._fresh_job(job_id)).nodes
        allocated = expand_hostlist(nodes)
        if node not in allocated:
            raise HookRefused(409, f"job {job_id} was given {nodes or 'no node'}, not {node}: "
                                   "only its own node can be drained for it")
        if not pods:
            return who.key, True
        from_k8s = self.cluster.index().from_k8s
        for pod in pods:
            typed = objects.pod(pod)
            here = node
            if who.gang:  # the node its member is bound to, if it is one of the job's
                hosted = from_k8s.get(typed.spec.node_name, ())
                ours = [n for n in hosted if n in allocated]
                if not ours:
                    continue
                here = ours[0]
            reason = (f"sunk: Pod {typed.metadata.key} still terminating at KillWait (job "
                      f"{job_id}); drained so nothing else lands here")
            async with answering(f"draining {here}"):
                await self.executor.slurm.update_node(here, {"state": ["DRAIN"],
                                                             "reason": reason})
            self.executor.pod_event(pod, self.cluster.state.pods.get(typed.metadata.key),
                                    "SlurmNodeDrained", f"{here}: {reason}", warning=True)
            log.warning("drained Slurm node %s: %s", here, reason)
        return who.key, False

    async def wait_pod_gone(self, job_id: int, within: float) -> Answer:
        found = self._ours(job_id)
        if found is None:
            return None
        who, pods = found
        if not pods:
            return who.key, True
        deadline = time.monotonic() + within
        for pod in pods:  # a gang's job waits for every member
            left = max(0.0, deadline - time.monotonic())
            with waiting():  # a hook's long poll: not at work meanwhile
                gone = await self.cluster.wait_pod_gone(objects.pod(pod).metadata.uid, left)
            if not gone:
                return who.key, False
        return who.key, True
