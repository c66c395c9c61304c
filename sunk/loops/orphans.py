"""Orphaned jobs: jobs of ours whose Pod no longer exists are cancelled.

A DELETED event missed, or a Pod deleted while the scheduler was down, leaves a job no reconcile
looks at again: this loop finds them in the job table. (A bound Pod whose job is gone is its own
reconcile's: :mod:`sunk.plans.decide`, DELETE_POD.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from sunk.apply.executor import Executor
from sunk.model.cluster import Cluster
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError
from sunk.slurm.job import Job, member_id

log = logging.getLogger("sunk.loops.orphans")


def why_orphaned(job_id: int, job: Job, *, newest: Mapping[str, int], live: set[str],
                 members: set[str]) -> str | None:
    """Why job ``job_id`` is to be cancelled (None: it is not). ``newest``: Pod uid -> its
    newest job's id; ``live``: the uids of the Pods that exist, ``members``: their member ids.
    A gang's job stays while it is its gang's newest and a member lives."""
    who = job.owner
    if who is None or job.finished:
        return None
    if not who.gang:
        return None if who.uid in live else "orphaned: its Pod no longer exists"
    if not any(m in members for m in who.members):
        return "orphaned: none of its gang's Pods exists"
    return None if newest.get(who.uid) == job_id else "its gang has a newer job"


async def collect(cluster: Cluster, executor: Executor, interval: float = 30.0,
                  wake: asyncio.Event | None = None) -> None:
    """Every ``interval`` seconds, cancel the orphaned jobs; the first time right away: the
    orphans left while the scheduler was down go now. ``wake`` set (Slurm answers again after
    an outage): at once, not at the next round, so a job whose Pod went while Slurm was away
    ends as soon as it can."""
    while True:
        live = {p["metadata"]["uid"] for p in cluster.pods()}
        members = {member_id(uid) for uid in live}
        for n, (job_id, job) in enumerate(list(cluster.jobs.jobs.items()), 1):
            if n % 1000 == 0:  # 10,000 jobs: not one long step (the dashboard waits)
                await asyncio.sleep(0)
            who = job.owner
            why = why_orphaned(job_id, job, newest=cluster.jobs.by_uid, live=live,
                               members=members)
            if who is None or why is None:
                continue
            try:
                if await executor.cancel(job_id, who.key, why):
                    metrics.ORPHANS_CANCELLED.inc()
            except SlurmError as exc:
                log.warning("cancelling orphaned job %d failed: %s", job_id, exc)
        if wake is None:
            await asyncio.sleep(interval)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), interval)
        wake.clear()
