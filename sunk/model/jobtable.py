"""The Slurm jobs of this scheduler, as last read (pure: no I/O).

A job is ours when its ``extra`` names a Pod of this scheduler **and** its ``admin_comment``
carries the stamp only a Slurm operator can set (:func:`sunk.slurm.job.admin_comment`): a
user's job that copies a placeholder's ``extra`` never passes for a Pod's job.

One writer per fact. The table has one writer, the Slurm poller
(:class:`sunk.model.slurmwatch.SlurmWatch`): it alone holds the table writable and calls the
methods below that change it. Every other part reads it through :class:`JobsView`
(``Cluster.jobs``, which mypy holds to reading), and tells the poller what it saw through the
poller's method of the same name (``watch.submitted(...)``, ``watch.lock_answered(...)``):

================  ==========================================  =================================
field             says                                        changed by (who tells the poller)
================  ==========================================  =================================
``jobs``          job id -> the job of ours as last read      ``learn`` (the poll's reads, the
                                                              full listings, a read for a Pod's
                                                              facts or a hook, a submission:
                                                              the executor), ``learn_started``
                                                              (the ``started`` hook), ``forget``
                                                              (the poll); in place: its
                                                              ``state``/``reason``/``checked_at``
                                                              by ``saw_state`` (the poll), its
                                                              ``checked_at`` by ``lock_answered``
                                                              (the syncer's lock request)
``by_uid``        Pod (or gang) uid -> its newest job's id    ``learn``, ``submitted`` (the
                                                              executor: the newest submission is
                                                              the Pod's job), ``forget``
``member_of``     gang member id -> its gang's newest job     ``learn``, ``forget``
``submitted_at``  job id -> when sunk submitted it            ``submitted`` (the executor),
                                                              ``forget``
``started_at``    job id -> when sunk heard it start          ``learn`` (a job read started),
                                                              ``heard_started`` (the ``started``
                                                              hook), ``forget``
``allocated``     job id -> its nodes, as Slurm said when     ``lock_checked`` (the syncer's lock
                  its prolog asked for a lock                 check), ``forget``
``in_prolog``     jobs whose prolog waits for its lock        ``prolog_waiting``,
                                                              ``lock_answered`` (the syncer's
                                                              lock request), ``forget``
``_impostors``    jobs claiming a Pod of ours without our     ``learn``, ``lock_checked`` (each
                  stamp (logged once)                         logs an impostor once)
``_elsewhere``    Pods of other sunk schedulers whose         ``lock_checked`` (the syncer's lock
                  placeholders lock nodes                     check)
``_newest``       the highest job id in ``jobs``              ``learn``, ``forget``
``unanswered``    Pod (or gang) uid -> the newest job id      ``submit_unanswered`` (the
                  known before a submit whose answer was      executor), ``looked_up`` (the
                  lost: Slurm's jobs since are read before    poller, once it read them)
                  it is submitted again
================  ==========================================  =================================
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from sunk.slurm.job import STARTED, Job, PodIdentity, admin_comment

log = logging.getLogger("sunk.jobs")


@dataclass(frozen=True)
class Learned:
    """What reading one job taught: the Pod it is for (None: not ours), and the Pod that lost
    it if Slurm gave its id to another Pod's job (it lost the earlier job in a crash)."""

    owner: PodIdentity | None
    displaced: PodIdentity | None = None


class JobsView(Protocol):
    """The job table, read-only: what every part but its one writer (the Slurm poller) sees.
    Its fields are :class:`JobTable`'s (the module's table says what each says)."""

    @property
    def jobs(self) -> Mapping[int, Job]: ...
    @property
    def by_uid(self) -> Mapping[str, int]: ...
    @property
    def member_of(self) -> Mapping[str, int]: ...
    @property
    def submitted_at(self) -> Mapping[int, float]: ...
    @property
    def started_at(self) -> Mapping[int, float]: ...
    @property
    def allocated(self) -> Mapping[int, str]: ...
    @property
    def in_prolog(self) -> AbstractSet[int]: ...
    @property
    def unanswered(self) -> Mapping[str, int]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...
    def get(self, job_id: int) -> Job | None: ...
    def owner(self, job_id: int) -> PodIdentity | None: ...
    def placed(self, uid: str, member: str) -> bool: ...
    def newest_id(self) -> int: ...


class JobTable:
    """The job table, writable: held by its one writer, the Slurm poller."""

    def __init__(self, scheduler_name: str) -> None:
        self.scheduler_name = scheduler_name
        self.jobs: dict[int, Job] = {}
        #: Pod uid -> id of the newest job of ours for it (adoption, cancellation, locks).
        self.by_uid: dict[str, int] = {}
        #: Gang member id (:func:`sunk.slurm.job.member_id`) -> its gang's newest job.
        self.member_of: dict[str, int] = {}
        #: Jobs whose extra names a Pod of ours but which we did not submit (logged once).
        self._impostors: set[int] = set()
        #: Pod uids and gang member ids of other sunk schedulers' placeholders seen locking a
        #: node (the newest few thousand: only jobs starting now matter).
        self._elsewhere: OrderedDict[str, None] = OrderedDict()
        #: The highest id in ``jobs``, kept as jobs come and go.
        self._newest = 0
        #: Job id -> when the scheduler submitted it and when it heard the job start
        #: (monotonic seconds): the timings its Pod's binding is logged with.
        self.submitted_at: dict[int, float] = {}
        self.started_at: dict[int, float] = {}
        #: Job id -> the nodes Slurm had given it when its prolog asked for a lock (read from
        #: Slurm then): a ``started`` call from one of them needs no second read.
        self.allocated: dict[int, str] = {}
        #: Jobs whose prolog waits for a node lock: their script cannot have started, so the
        #: poller does not read them to look for a lost ``started`` call.
        self.in_prolog: set[int] = set()
        #: Pod (or gang) uid -> the newest job id known before a submit whose answer was
        #: lost (a timeout, an outage): it may have reached Slurm, so the jobs Slurm took
        #: since are read before the Pod is submitted again. Never submit blind.
        self.unanswered: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[int]:
        return iter(self.jobs)

    def get(self, job_id: int) -> Job | None:
        return self.jobs.get(job_id)

    def owner(self, job_id: int) -> PodIdentity | None:
        """The Pod a job of ours is for (None: not a job we know)."""
        job = self.jobs.get(job_id)
        return job.owner if job is not None else None

    def placed(self, uid: str, member: str) -> bool:
        """Whether a sunk placeholder is for the Pod ``uid`` (alone, or as gang member
        ``member``): one of ours, or one of another sunk scheduler seen locking a node."""
        return (uid in self.by_uid or member in self.member_of or uid in self._elsewhere
                or member in self._elsewhere)

    def newest_id(self) -> int:
        """The highest job id known (asked at every submission: not a scan of every job)."""
        return self._newest

    # -- the writes: the Slurm poller's alone ------------------------------------------------
    def ours(self, job: Job) -> PodIdentity | None:
        """The Pod ``job`` is for, if this scheduler submitted it (an impostor is logged once:
        a write, hence not in :class:`JobsView`)."""
        who = job.owner
        if who is None or who.scheduler != self.scheduler_name or job.component:
            return None  # a heterogeneous job's component is followed through its leader
        if job.admin_comment != admin_comment(who):
            if job.job_id not in self._impostors:
                self._impostors.add(job.job_id)
                log.warning("job %d claims to be Pod %s's (extra) but was not submitted by "
                            "this scheduler (admin_comment %r): ignored", job.job_id, who.key,
                            job.admin_comment[:80])
            return None
        return who

    def learn(self, job: Job) -> Learned:
        """Record ``job`` if it is ours.

        Slurm keeps a FAILED record of every submission it refused; such a record (finished,
        never placed, unknown to us) is not a job of a Pod and is not recorded."""
        who = self.ours(job)
        if who is None or (job.finished and not job.nodes and job.job_id not in self.jobs):
            return Learned(None)
        before = self.jobs.get(job.job_id)
        displaced = None
        if before is not None and before.owner is not None and before.owner.uid != who.uid:
            # Slurm reuses a job id after it lost the job (a slurmctld that crashed before
            # saving its state): the id is now another Pod's, the old Pod's job is gone.
            displaced = before.owner
            log.warning("job %d is now %s's, no longer %s's: Slurm lost the earlier job",
                        job.job_id, who.key, displaced.key)
            if self.by_uid.get(displaced.uid) == job.job_id:
                del self.by_uid[displaced.uid]
        self.jobs[job.job_id] = job
        self._newest = max(self._newest, job.job_id)
        if job.started:
            self.started_at.setdefault(job.job_id, time.monotonic())
        newest = self.by_uid.get(who.uid)
        if newest is None or job.job_id >= newest or newest not in self.jobs:
            self.by_uid[who.uid] = job.job_id
            for member in who.members:
                self.member_of[member] = job.job_id
        return Learned(who, displaced)

    def note_placeholder(self, job: Job, keep: int = 10_000) -> None:
        """Remember whom a placeholder of any sunk scheduler is for (its stamp proves it)."""
        who = job.owner
        if who is None or job.admin_comment != admin_comment(who):
            return
        for key in who.members or (who.uid,):
            self._elsewhere[key] = None
            self._elsewhere.move_to_end(key)
        while len(self._elsewhere) > keep:
            self._elsewhere.popitem(last=False)

    def forget(self, job_id: int) -> Job | None:
        """Slurm no longer knows the job (purged after MinJobAge, or lost)."""
        job = self.jobs.pop(job_id, None)
        self.submitted_at.pop(job_id, None)
        self.started_at.pop(job_id, None)
        self.allocated.pop(job_id, None)
        self.in_prolog.discard(job_id)
        if job_id == self._newest:  # rare: the newest job is seldom the one Slurm forgets
            self._newest = max(self.jobs, default=0)
        if job is not None and job.owner is not None and self.by_uid.get(
                job.owner.uid) == job_id:
            del self.by_uid[job.owner.uid]
            for member in job.owner.members:
                if self.member_of.get(member) == job_id:
                    del self.member_of[member]
        return job

    # -- what the other parts tell the Slurm poller, which writes it here ----------------------
    def submitted(self, uid: str, job_id: int, at: float) -> None:
        """The executor submitted ``job_id`` for the Pod (or gang) ``uid`` at ``at`` (monotonic
        seconds), the job learned already: the newest submission is the Pod's job."""
        self.by_uid[uid] = job_id
        self.submitted_at[job_id] = at

    def submit_unanswered(self, uid: str, newest: int) -> None:
        """A submit for ``uid`` got no answer; ``newest`` was the newest job id before it."""
        self.unanswered[uid] = newest

    def looked_up(self, uid: str) -> None:
        """The jobs Slurm took since ``uid``'s unanswered submit were read (and learned)."""
        self.unanswered.pop(uid, None)

    def saw_state(self, job_id: int, state: str, at: float) -> Job:
        """A poll saw a known job in ``state`` at ``at`` (its pending reason, if it no longer
        pends, goes: the poll reads only states). The job, changed in place."""
        job = self.jobs[job_id]
        job.state, job.checked_at = state, at
        if state != "PENDING":
            job.reason = ""
        return job

    def lock_checked(self, job_id: int, job: Job) -> None:
        """Slurm's read of ``job_id`` (``job``) showed it starting where its prolog asks for a
        lock: a placeholder of any sunk scheduler is noted, and one of ours keeps the nodes
        Slurm gave it (its ``started`` call from one of them needs no second read)."""
        self.note_placeholder(job)
        if self.ours(job) is not None:
            self.allocated[job_id] = job.nodes

    def prolog_waiting(self, job_id: int) -> None:
        """The job's prolog waits for a node lock: no script of it can have started yet."""
        if job_id in self.jobs:
            self.in_prolog.add(job_id)

    def lock_answered(self, job_id: int, at: float) -> None:
        """The job's prolog got its lock at ``at``: its script starts now."""
        if (job := self.jobs.get(job_id)) is not None:
            self.in_prolog.discard(job_id)
            job.checked_at = at

    def learn_started(self, job_id: int) -> Job | None:
        """Learn the job as its ``started`` call tells it, if Slurm's read at its lock showed
        it allocated: running there, its script started (None: not known well enough; read
        it)."""
        job, nodes = self.jobs.get(job_id), self.allocated.get(job_id)
        if job is None or nodes is None or job.finished or job.owner is None or (
                job.owner.parts):  # a heterogeneous job: its components' nodes are read
            return None
        if job.started:
            return job
        told = Job(job_id=job.job_id, name=job.name, state="RUNNING",
                   extra=job.extra.rstrip() + STARTED, nodes=nodes, reason="", raw=job.raw,
                   admin_comment=job.admin_comment)
        self.learn(told)
        return told

    def heard_started(self, job_id: int) -> None:
        """The placeholder's ``started`` hook arrived (before the job is read again)."""
        self.started_at.setdefault(job_id, time.monotonic())
