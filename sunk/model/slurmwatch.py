"""Slurm's jobs and nodes, followed for the cluster model (the one Slurm poller).

Every job's state in one cheap call per poll, a job's details only where they matter
(:mod:`sunk.model.jobpoll`); jobs that changed wake their Pods. Slurm's nodes every few seconds
(which exist, for placement; their state, for locks, drains and the dashboard). On start, and when
Slurm comes back from an outage, every job is listed once in full: a slurmctld that crashed
comes back with the state it last saved, having lost the jobs submitted just before and giving
their ids to new jobs.

The job table's one writer (:mod:`sunk.model.jobtable`): it alone holds the table writable. What
the other parts learn of a job (a submission, a lock request, a ``started`` call) they tell it
through the methods of :class:`SlurmWatch` named after the table's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from sunk.model import jobpoll
from sunk.model.cluster import Cluster
from sunk.plans.decide import FAILED_LAUNCH_HOLDS
from sunk.runtime import heap
from sunk.slurm.client import SlurmClient, SlurmError
from sunk.slurm.job import Job, PodIdentity
from sunk.slurm.text import never_starts

log = logging.getLogger("sunk.model.slurmwatch")

T = TypeVar("T")
Wake = Callable[[PodIdentity], None]
Stuck = Callable[[Job, PodIdentity, str], None]


class SlurmWatch:
    def __init__(self, cluster: Cluster, slurm: SlurmClient) -> None:
        self.cluster = cluster
        #: The job table, writable: this is its one writer (every other part reads
        #: ``cluster.jobs``).
        self._jobs = cluster.job_table
        self.slurm = slurm
        #: Who hears of it (the scheduler, once built): a job of this Pod changed; a job is
        #: pending for a reason that needs a person.
        self.wake: Wake = lambda who: None
        self.stuck: Stuck = lambda job, who, why: None
        self.interval = cluster.settings.slurm_poll_interval
        #: (job id, pending reason) pairs already reported as stuck (once each).
        self._stuck_reported: set[tuple[int, str]] = set()

    async def call(self, call: Callable[[], Awaitable[T]]) -> T:
        """One call to slurmrestd, its outcome noted for health."""
        try:
            result = await call()
        except SlurmError as exc:
            self.cluster.health.slurm_answered(exc)
            raise
        self.cluster.health.slurm_answered(None)
        return result

    async def read(self, job_id: int) -> Job | None:
        """A job as Slurm has it now, learned if it is ours (None: Slurm has no such job)."""
        job = await self.slurm.job(job_id)
        if job is not None:
            self.learn(job)
        return job

    def learn(self, job: Job) -> PodIdentity | None:
        """Record ``job`` if it is ours (a Pod whose job's id Slurm gave it is woken): the Pod
        it is for (None: not ours)."""
        learned = self._jobs.learn(job)
        if learned.displaced is not None:
            self.wake(learned.displaced)
        return learned.owner

    # -- what the other parts tell the job table's one writer (sunk.model.jobtable) ------------
    def submitted(self, uid: str, job: Job, at: float) -> None:
        """The executor submitted ``job`` for the Pod (or gang) ``uid`` at ``at``: learned as
        any job read from Slurm, and the newest submission is the Pod's job."""
        self.learn(job)
        self._jobs.submitted(uid, job.job_id, at)

    def submit_unanswered(self, uid: str, newest: int) -> None:
        """The executor's submit for the Pod (or gang) ``uid`` got no answer; ``newest`` was
        the newest job id before it (:meth:`find_unanswered` looks, before the next try)."""
        self._jobs.submit_unanswered(uid, newest)

    async def find_unanswered(self, uid: str) -> None:
        """An unanswered submit for ``uid`` may have reached Slurm: the jobs Slurm took since
        are read and learned, so a job naming the Pod is among its facts and adopted, not
        submitted again. Raises :class:`SlurmError` if Slurm cannot be read: kept until
        then."""
        since = self._jobs.unanswered.get(uid)
        if since is None:
            return
        states = await self.call(self.slurm.job_states)
        for job_id in sorted(j for j in states if j > since and j not in self._jobs.jobs):
            await self.call(functools.partial(self.read, job_id))
        self._jobs.looked_up(uid)
        if (found := self._jobs.by_uid.get(uid)) is not None and found > since:
            log.info("pod uid %s: job %d from an earlier, unanswered submit found", uid, found)

    def lock_checked(self, job_id: int, job: Job) -> None:
        """Slurm's read of ``job_id`` showed it starting where its prolog asks for a lock."""
        self._jobs.lock_checked(job_id, job)

    def prolog_waiting(self, job_id: int) -> None:
        """The job's prolog waits for a node lock."""
        self._jobs.prolog_waiting(job_id)

    def lock_answered(self, job_id: int, at: float) -> None:
        """The job's prolog got its lock at ``at``: its script starts now."""
        self._jobs.lock_answered(job_id, at)

    def learn_started(self, job_id: int) -> Job | None:
        """The job as its ``started`` call tells it, learned, if Slurm's read at its lock
        showed it allocated (None: not known well enough; read it)."""
        return self._jobs.learn_started(job_id)

    def heard_started(self, job_id: int) -> None:
        """The placeholder's ``started`` hook arrived."""
        self._jobs.heard_started(job_id)

    # -- adoption and recovery -----------------------------------------------------------------
    async def adopt(self) -> None:
        """One full job listing at start: learn every job of ours (the poll then reads only
        states). Waits out an outage of Slurm."""
        delay = 0.5
        while True:
            try:
                listed = await self.call(self.slurm.all_jobs)
                break
            except SlurmError as exc:
                log.warning("listing jobs failed, retrying in %.1fs: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(30.0, delay * 2)
        for job in listed:
            self.learn(job)
        del listed
        heap.give_back_free_memory()  # the listing was every job in full
        log.info("adopted %d jobs of ours from Slurm", len(self._jobs))

    async def relist(self) -> None:
        """After an outage: every job again, in full. What was lost is forgotten (its Pod is
        reconciled: submitted again if it was not bound yet); what moved to another Pod is
        learned anew.

        Only what was known when the listing was asked is judged by it: a job learned while it
        was on its way (submitted then, or read at its prolog's lock) is newer than the
        listing, and forgetting it would tell its placeholder it is no job of ours (its node
        let go under its Pod)."""
        before = dict(self._jobs.jobs)
        try:
            listed = await self.slurm.all_jobs()
        except SlurmError as exc:
            log.warning("listing jobs after Slurm came back failed: %s", exc)
            return
        fresh = {job.job_id for job in listed}
        for job_id, known in before.items():
            if job_id not in fresh and self._jobs.get(job_id) is known:
                self._forget(job_id)
        for job in listed:
            if self._jobs.get(job.job_id) is not before.get(job.job_id):
                continue  # learned since the listing was asked: what the listing says is older
            if (who := self.learn(job)) is not None:
                self.wake(who)
        del listed
        heap.give_back_free_memory()
        log.info("Slurm came back: %d jobs of ours", len(self._jobs))

    def _forget(self, job_id: int) -> None:
        job = self._jobs.forget(job_id)
        if job is not None and job.owner is not None:
            self.wake(job.owner)

    # -- the polls -----------------------------------------------------------------------------
    async def poll_jobs(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            asked = set(self._jobs)
            try:
                states = await self.call(self.slurm.job_states)
                await self.follow(states, asked)
            except SlurmError as exc:
                log.warning("polling Slurm failed: %s", exc)

    async def follow(self, states: Mapping[int, str], asked: set[int]) -> None:
        """Apply one poll: changed states wake their Pods, gone jobs are forgotten, and the
        few jobs whose details matter are read."""
        now = time.monotonic()
        per_poll = max(1, round(jobpoll.PENDING_READS_PER_SECOND * self.interval))
        plan = jobpoll.plan_poll(self._jobs.jobs, states, now=now, asked=asked,
                                 in_prolog=self._jobs.in_prolog,
                                 locked=self._jobs.allocated.keys(),
                                 pending_per_poll=per_poll)
        for job_id, state in plan.changed.items():
            changed = self._jobs.saw_state(job_id, state, now)
            if changed.owner is not None:
                self.wake(changed.owner)
        for job_id in plan.gone:
            self._forget(job_id)
        for job_id in plan.fetch:
            fresh = await self.call(functools.partial(self.slurm.job, job_id))
            before = self._jobs.get(job_id)  # after the read: the started hook may have come
            if fresh is None:
                self._forget(job_id)
                continue
            if before is not None and before.started and not fresh.started:
                continue  # read before the started hook arrived: keep what the hook said
            who = self.learn(fresh)
            if who is not None and (before is None or (
                    before.state, before.extra, before.nodes, before.reason) != (
                    fresh.state, fresh.extra, fresh.nodes, fresh.reason)):
                self.wake(who)
                self._report_stuck(fresh, who)

    def _report_stuck(self, job: Job, who: PodIdentity) -> None:
        """A job pending for a reason that means "not without a person" (held, an invalid
        account, a constraint no node meets): told once per reason."""
        if job.reason in FAILED_LAUNCH_HOLDS:
            return  # not stuck: its Pod gets a new job (sunk.plans.podplan)
        why = never_starts(job.reason) if job.state == "PENDING" else None
        if why is None or (job.job_id, job.reason) in self._stuck_reported:
            return
        self._stuck_reported.add((job.job_id, job.reason))
        log.warning("pod %s: job %d pending (%s): %s", who.key, job.job_id, job.reason, why)
        self.stuck(job, who, why)

    async def poll_nodes(self, interval: float = 2.0) -> None:
        """Slurm's nodes: which exist (for placement) and their state. One cheap call."""
        while True:
            try:
                self.cluster.set_slurm_nodes(await self.call(self.slurm.nodes))
            except SlurmError as exc:
                log.warning("listing Slurm nodes failed: %s", exc)
            self.cluster.health.note_kube()
            await asyncio.sleep(interval)
