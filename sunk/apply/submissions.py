"""A Pod's (or gang's) job into Slurm once, even when Slurm's answer to a submit was lost.

A submit that timed out may still have reached Slurm: before the next try, the jobs Slurm took
since are read, and one naming the Pod is adopted instead of a second being submitted. The job
carries its hook credential, added here so that no record shows it. What it submits and adopts
it tells the job table's one writer, the Slurm poller (:mod:`sunk.model.jobtable`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from sunk.apply.ports import SlurmPort
from sunk.model.cluster import Cluster
from sunk.model.podmemory import PodMemory
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError
from sunk.slurm.job import Job

log = logging.getLogger("sunk.apply.executor")

class JobRecorder(Protocol):
    """The job table's one writer (:class:`sunk.model.slurmwatch.SlurmWatch`), as far as the
    submitter tells it what it learned."""

    def learn(self, job: Job) -> object:
        """A job read from Slurm."""
        ...

    def submitted(self, uid: str, job: Job, at: float) -> None:
        """A job just submitted for the Pod (or gang) ``uid``, sent at ``at`` (monotonic)."""
        ...


class Submitter:
    """Submits the executor's jobs, a Pod's and a gang's alike."""

    def __init__(self, cluster: Cluster, slurm: SlurmPort, memory: PodMemory, *,
                 credential: Callable[[str], str], jobs: JobRecorder) -> None:
        self.cluster = cluster
        self.slurm = slurm
        self.memory = memory
        #: A Pod's (or gang's) uid -> the credential its job shows the hook API.
        self.credential = credential
        #: Told of every job read from Slurm and every submission.
        self.jobs = jobs

    async def submit(self, uid: str, job: dict[str, Any]) -> int:
        """Submit the job of the Pod (or gang) ``uid``, with its hook credential; its job id."""
        credential = self.credential(uid)
        job = {**job, "environment": [*job["environment"], f"SUNK_JOB_TOKEN={credential}"]}
        try:
            job_id = await self._submit_once(uid, job)
        except SlurmError:
            metrics.SUBMIT_ERRORS.inc()
            raise
        metrics.JOBS_SUBMITTED.inc()
        return job_id

    async def _submit_once(self, uid: str, job: dict[str, Any]) -> int:
        """Submit, unless an earlier try whose answer was lost (a timeout, an outage) did reach
        Slurm: jobs Slurm took since then are read, and one naming this Pod is adopted."""
        jobs = self.cluster.jobs
        since = self.memory.uncertain_submits.get(uid)
        if since is not None:  # kept until the lookup has succeeded: never submit blind
            for job_id in sorted(j for j in await self.slurm.job_states() if j > since
                                 and j not in jobs.jobs):
                if (found := await self.slurm.job(job_id)) is not None:
                    self.jobs.learn(found)
            del self.memory.uncertain_submits[uid]
            if (existing := jobs.by_uid.get(uid)) is not None and existing > since:
                log.info("pod uid %s: job %d from an earlier, unanswered submit adopted", uid,
                         existing)
                return existing
        newest = jobs.newest_id()
        sent = time.monotonic()
        try:
            job_id = await self.slurm.submit(job)
        except SlurmError as exc:
            if not exc.permanent:  # it may have reached Slurm: look before submitting again
                self.memory.uncertain_submits[uid] = newest
            raise
        # learned as any job read from Slurm (a Pod whose lost job had this id is woken), and
        # the newest submission is the Pod's job
        self.jobs.submitted(uid, Job(job_id=job_id, name=job["name"], state="PENDING",
                                extra=job["extra"], nodes="", reason="", raw={},
                                admin_comment=job["admin_comment"]), sent)
        return job_id
