"""A Pod's (or gang's) job into Slurm, with its hook credential (added here, so that no record
shows it).

A submit that timed out may still have reached Slurm: it is told to the job table's one writer,
the Slurm poller, which reads the jobs Slurm took since before the Pod's next plan
(:meth:`sunk.model.slurmwatch.SlurmWatch.find_unanswered`); a job naming the Pod is then
adopted by the plan, not submitted again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from sunk.apply.ports import SlurmPort
from sunk.model.cluster import Cluster
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

    def submit_unanswered(self, uid: str, newest: int) -> None:
        """A submit for ``uid`` got no answer; ``newest``: the newest job id before it."""
        ...


class Submitter:
    """Submits the executor's jobs, a Pod's and a gang's alike."""

    def __init__(self, cluster: Cluster, slurm: SlurmPort, *,
                 credential: Callable[[str], str], jobs: JobRecorder) -> None:
        self.cluster = cluster
        self.slurm = slurm
        #: A Pod's (or gang's) uid -> the credential its job shows the hook API.
        self.credential = credential
        #: Told of every job read from Slurm and every submission.
        self.jobs = jobs

    async def submit(self, uid: str, job: dict[str, Any],
                     components: tuple[dict[str, Any], ...] = ()) -> int:
        """Submit the job of the Pod (or gang) ``uid``, with its hook credential; its job id.
        ``components``: the rest of a gang's heterogeneous job (each runs the placeholder's
        script too, so each carries the credential)."""
        credential = self.credential(uid)

        def credited(job: dict[str, Any]) -> dict[str, Any]:
            return {**job, "environment": [*job["environment"],
                                           f"SUNK_JOB_TOKEN={credential}"]}
        try:
            job_id = await self._submit_once(uid, credited(job),
                                             tuple(credited(c) for c in components))
        except SlurmError:
            metrics.SUBMIT_ERRORS.inc()
            raise
        metrics.JOBS_SUBMITTED.inc()
        return job_id

    async def _submit_once(self, uid: str, job: dict[str, Any],
                           components: tuple[dict[str, Any], ...]) -> int:
        """Submit; a failure that may have reached Slurm is told as unanswered."""
        newest = self.cluster.jobs.newest_id()
        sent = time.monotonic()
        try:
            job_id = await self.slurm.submit(job, components)
        except SlurmError as exc:
            if not exc.permanent:  # it may have reached Slurm: look before submitting again
                self.jobs.submit_unanswered(uid, newest)
            raise
        # learned as any job read from Slurm (a Pod whose lost job had this id is woken), and
        # the newest submission is the Pod's job
        self.jobs.submitted(uid, Job(job_id=job_id, name=job["name"], state="PENDING",
                                extra=job["extra"], nodes="", reason="", raw={},
                                admin_comment=job["admin_comment"],
                                het_job_id=job_id if components else 0), sent)
        return job_id
