"""The scheduler's answers to the placeholder job's hook calls.

The hook API (:mod:`sunk.hooks`) checks the caller's credential; each answer here checks the
call against what Slurm says of the job (one read of it where Slurm's word matters) and refuses
a call that does not match, with the reason. An outage while answering is a 503 with
Retry-After (the caller retries), never a failure.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from sunk import kube, metrics
from sunk.cluster import Cluster
from sunk.executor import Executor
from sunk.hookauth import HookRefused, job_owner
from sunk.slurm.client import SlurmError
from sunk.slurm.job import Job, PodIdentity
from sunk.slurm.text import expand_hostlist
from sunk.slurmwatch import SlurmWatch

log = logging.getLogger("sunk.hooks")

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

    def _ours(self, job_id: int) -> tuple[PodIdentity, kube.Obj | None] | None:
        """The Pod a job of ours is for, and that Pod if it still exists."""
        who = self.cluster.jobs.owner(job_id)
        if who is None or who.scheduler != self.cluster.settings.scheduler_name:
            return None
        if job_id in self.executor.memory.refitted.get(who.uid, ()):
            return who, None  # cancelled to go elsewhere: its Pod is no longer this job's
        return who, self.cluster.pod_of(who)

    def job_owner(self, job_id: int) -> str | None:
        """What the job's credential is bound to (its Pod), or None if it is not ours."""
        found = self._ours(job_id)
        return None if found is None else job_owner(found[0].scheduler, found[0].uid)

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
        who, pod = found
        cached = self.cluster.jobs.get(job_id)
        if (cached is None or cached.state == "PENDING") and (
                await self._fresh_job(job_id)).state == "PENDING":
            raise HookRefused(409, f"Slurm shows job {job_id} pending: no script of it runs, "
                                   "so nothing of it is ending")
        if pod is None:
            return who.key, True
        if not pod["metadata"].get("deletionTimestamp"):
            async with answering(f"deleting Pod {who.key}"):
                await self.executor.kube.delete_pod(pod)
            self.executor.pod_event(pod, self.cluster.state.pods.get(who.key),
                                    "SlurmJobTerminating",
                                    f"Slurm is ending job {job_id} on {node}; deleting the Pod",
                                    warning=True)
            metrics.PODS_DELETED.inc()
        return who.key, False

    async def job_started(self, job_id: int, node: str) -> Answer:
        """The placeholder says its job started on ``node``, right after writing ": started"
        into the job's extra. Bound only if Slurm runs the job on that node and its extra says
        started; the Pod is then bound now, without waiting for the next poll."""
        found = self._ours(job_id)
        if found is None:
            return None
        who, pod = found
        fresh = await self._fresh_job(job_id)
        if fresh.state != "RUNNING":
            raise HookRefused(409, f"Slurm shows job {job_id} {fresh.state.lower()}, not "
                                   "running: its Pod is not bound")
        if node not in expand_hostlist(fresh.nodes):
            raise HookRefused(409, f"Slurm runs job {job_id} on {fresh.nodes}, not on {node}")
        if not fresh.started:
            raise HookRefused(409, f"job {job_id}'s extra does not say started: the "
                                   "placeholder writes it before it calls")
        self.wake(who)
        return who.key, pod is None

    async def drain_for_job(self, job_id: int, node: str) -> Answer:
        """The job reached KillWait with its Pod still there: drain its Slurm node, naming the
        Pod, so nothing else lands there until someone looks."""
        found = self._ours(job_id)
        if found is None:
            return None
        who, pod = found
        cached = self.cluster.jobs.get(job_id)
        nodes = (cached.nodes if cached is not None else "") or (
            await self._fresh_job(job_id)).nodes
        if node not in expand_hostlist(nodes):
            raise HookRefused(409, f"job {job_id} was given {nodes or 'no node'}, not {node}: "
                                   "only its own node can be drained for it")
        if pod is None:
            return who.key, True
        reason = (f"sunk: Pod {who.key} still terminating at KillWait (job {job_id}); "
                  "drained so nothing else lands here")
        async with answering(f"draining {node}"):
            await self.executor.slurm.update_node(node, {"state": ["DRAIN"], "reason": reason})
        self.executor.pod_event(pod, self.cluster.state.pods.get(who.key), "SlurmNodeDrained",
                                f"{node}: {reason}", warning=True)
        log.warning("drained Slurm node %s: %s", node, reason)
        return who.key, False

    async def wait_pod_gone(self, job_id: int, within: float) -> Answer:
        found = self._ours(job_id)
        if found is None:
            return None
        who, pod = found
        if pod is None:
            return who.key, True
        return who.key, await self.cluster.wait_pod_gone(who.uid, within)
