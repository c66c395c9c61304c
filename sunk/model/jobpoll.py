"""What one poll of Slurm's job states means for the jobs we follow (pure).

slurmrestd's full job listing (``GET /jobs/``) costs about 18 kB and a fair share of
slurmctld's and slurmrestd's CPU per job, and its ``update_time`` filter is all or nothing:
one change anywhere in the cluster and every job comes back (measured: 1,601 jobs, 29 MB, for
one new submission). A busy cluster changes every second, so polling it meant listing every
job, every poll. ``GET /jobs/state/`` answers every job's id and state in about 80 bytes each.

So the poller reads states only. A changed state is recorded (and wakes the job's Pod); a
job's details (``GET /job/{id}``: its node, and its ``extra``, where the placeholder writes
``: started``) are read only when they can matter:

- it runs but its script has not said ``started`` for ``detail_every`` seconds since its
  prolog's lock was answered (the script starts right after): the placeholder's ``started``
  hook normally says so at once, with the node, and binds the Pod; reading the job is the
  fallback when that call was lost (on a loaded node slurmstepd takes seconds to launch the
  script: a shorter wait read most jobs under load). Not while its prolog still waits for the
  lock (no script runs yet), and only after ``unlocked_every`` seconds for a running job
  whose prolog this scheduler has not heard from (one that asked a scheduler since
  restarted): under load Slurm shows a job running seconds before its prolog calls;
- it is pending: once a second after it was submitted (Slurm has said why it waits by
  then; if not, every second until it has), then every ``pending_every`` seconds, a few jobs
  per poll, never-read ones first (the Pod's condition and the dashboard say why).

A job that ended needs no details: its state is all that reconciling reads.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol

from sunk.slurm.job import FINISHED_STATES


class Known(Protocol):
    """What the poller knows of a job it follows (the job table's records have it: no copy
    of every job is made per poll)."""

    @property
    def state(self) -> str: ...
    @property
    def started(self) -> bool: ...
    @property
    def checked_at(self) -> float: ...
    @property
    def reason(self) -> str: ...


@dataclass(frozen=True)
class Followed:
    """What the poller knows of a job it follows (a plain :class:`Known`)."""

    state: str
    started: bool
    #: When its details were last read from Slurm, or its state last changed (monotonic).
    checked_at: float
    #: Why it is pending, as last read ("" until read).
    reason: str = ""


@dataclass
class PollPlan:
    #: Jobs whose details to read now.
    fetch: list[int] = field(default_factory=list)
    #: Jobs whose state changed: job id -> the new state.
    changed: dict[int, str] = field(default_factory=dict)
    #: Jobs Slurm no longer lists (purged after MinJobAge, or lost): forget them.
    gone: list[int] = field(default_factory=list)


#: Pending jobs whose details (why they wait) are read per second, whatever the queue's length:
#: 10,000 pending jobs must not mean 10,000 reads per refresh.
PENDING_READS_PER_SECOND = 2.0
#: A pending job's reason before Slurm's scheduler looked at it: read again soon, not in 30 s.
NOT_LOOKED_AT = "None"


def plan_poll(followed: Mapping[int, Known], states: Mapping[int, str], *, now: float,
              asked: Set[int], in_prolog: Set[int] = frozenset(),
              locked: Set[int] | None = None, detail_every: float = 15.0,
              unlocked_every: float = 30.0, pending_first: float = 1.0,
              pending_every: float = 30.0, pending_per_poll: int = 1) -> PollPlan:
    """``states``: Slurm's answer, job id -> state. ``asked``: the jobs followed when the
    poll was sent (a job submitted while it was in flight is not missing from it).
    ``in_prolog``: jobs whose prolog waits for its lock; ``locked``: jobs whose lock was
    checked (None: not known, every running job counts as locked). Pending
    jobs are read at most ``pending_per_poll`` per poll, never-read ones first, then the
    longest unread: many may wait at once."""
    plan = PollPlan()
    stale_pending: list[tuple[bool, float, int]] = []
    for job_id, known in followed.items():
        state = states.get(job_id)
        if state is None:
            if job_id in asked:
                plan.gone.append(job_id)
            continue
        if state != known.state:
            plan.changed[job_id] = state
        elif state in FINISHED_STATES:
            continue
        elif state == "PENDING":
            said = bool(known.reason) and known.reason != NOT_LOOKED_AT
            if now - known.checked_at >= (pending_every if said else pending_first):
                stale_pending.append((said, known.checked_at, job_id))
        elif not known.started and job_id not in in_prolog and now - known.checked_at >= (
                detail_every if locked is None or job_id in locked else unlocked_every):
            plan.fetch.append(job_id)
    # the few oldest, not a sort of every pending job at every poll
    plan.fetch += [job_id for _, _, job_id in heapq.nsmallest(pending_per_poll, stale_pending)]
    return plan
