"""The prolog's lock request: how long it keeps a node's lock wanted, and its check against
Slurm.

A lock is taken only for a job Slurm is starting on that node (its prolog runs): a stray call
naming a pending job, an ended one or another node is refused. The prologs of a gang's job, one
per node, ask at the same moment: they share one read of the job. The syncer
(:meth:`sunk.loops.syncer.Syncer.request_lock`) keeps the requests and waits for the lock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from sunk.hooks.answers import answering
from sunk.hooks.auth import HookRefused
from sunk.hooks.inflight import waiting
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.slurm.client import SlurmClient
from sunk.slurm.job import Job
from sunk.slurm.text import expand_hostlist

#: How long an unanswered lock request keeps the lock wanted without the prolog asking again.
REQUEST_TTL = 60.0
#: How long an answered request keeps the lock wanted, while Slurm's node state catches up.
ANSWERED_GRACE = 10.0


@dataclass
class LockRequest:
    job_id: int
    strict: bool
    at: float = field(default_factory=time.monotonic)
    answered_at: float | None = None

    def keeps_lock(self, now: float) -> bool:
        if self.answered_at is not None:
            return now - self.answered_at < ANSWERED_GRACE
        return now - self.at < REQUEST_TTL


class LockRequestCheck:
    def __init__(self, cluster: Cluster, slurm: SlurmClient, watch: SlurmWatch) -> None:
        self.cluster = cluster
        self.slurm = slurm
        #: The job table's one writer, told what the check found.
        self.watch = watch
        #: Job id -> the read of it from Slurm that lock requests for it share (a gang's
        #: prologs, one per node, ask at the same moment).
        self.reads: dict[int, asyncio.Task[Job | None]] = {}

    async def check(self, node: str, job_id: int) -> None:
        """Raise :class:`HookRefused` unless Slurm shows ``job_id`` starting on ``node``."""
        async with answering(f"reading job {job_id}"):
            # Not at work while slurmrestd answers: a slow slurmrestd with every node's prolog
            # asking at once filled the hook API's bound, and prologs were told to retry.
            with waiting():
                job, joined = await self._read_job(job_id)
                if joined and lock_refusal(node, job_id, job) is not None:
                    # the read it joined began before it asked: a refusal takes a read of its own
                    job, _ = await self._read_job(job_id, join=False)
        if (refusal := lock_refusal(node, job_id, job)) is not None:
            raise refusal
        assert job is not None
        # A placeholder of another sunk scheduler sharing this Slurm cluster: its Pods, bound
        # once the lock is taken, are Slurm's too, not Pods for the lock to clear. One of ours
        # keeps the nodes Slurm gave it.
        self.watch.lock_checked(job.job_id, job)  # a component's: its leader's

    async def _read_job(self, job_id: int, *, join: bool = True) -> tuple[Job | None, bool]:
        """The job as Slurm has it now, one read for the lock requests that ask at once (a
        gang of 16 read its job 16 times as its prologs started); and whether this call joined
        a read another began. Shielded: a prolog that hangs up does not fail the read the
        others wait for. A single Pod's job runs on one node, one prolog: read alone."""
        who = self.cluster.jobs.owner(job_id)
        if who is not None and not who.gang:
            return await self.slurm.job(job_id), False
        read = self.reads.get(job_id) if join else None
        joined = read is not None
        if read is None:
            read = self.reads[job_id] = asyncio.ensure_future(self.slurm.job(job_id))

            def done(finished: asyncio.Task[Job | None]) -> None:
                if self.reads.get(job_id) is finished:
                    del self.reads[job_id]
                if not finished.cancelled():
                    finished.exception()  # retrieved: every waiter may have hung up

            read.add_done_callback(done)
        return await asyncio.shield(read), joined


def lock_refusal(node: str, job_id: int, job: Job | None) -> HookRefused | None:
    """Why a lock of ``node`` for the job as Slurm shows it is refused (None: it is not): only
    a job Slurm is starting on that node locks it."""
    if job is None:  # lost by a slurmctld that crashed: it will not run; nothing to lock
        return HookRefused(410, f"Slurm has no job {job_id}: no lock for it")
    if job.finished:  # cancelled while its prolog waited: let go, do not drain the node
        return HookRefused(410, f"Slurm shows job {job_id} {job.state.lower()}: it will not "
                                "run; nothing to lock")
    if job.state == "PENDING":
        return HookRefused(409, f"Slurm shows job {job_id} pending: only a job that is "
                                "starting locks a node")
    if node not in expand_hostlist(job.nodes):
        return HookRefused(409, f"job {job_id} was given {job.nodes or 'no node'}, not "
                                f"{node}: no lock for it there")
    return None
