"""What to do next for one Pod and its job (pure): the scheduler's state machine.

The Pod is the source of truth for its own progress (the job id is an annotation on it), so the
decision needs only the Pod as the API server has it and the job as Slurm has it. That makes the
scheduler level-triggered: after a restart, the same inputs give the same next step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sunk.slurm.job import FINISHED_STATES, Job

#: End states of a job that failed to launch (its node failed, or slurmd refused it): a Pod not
#: yet bound loses nothing by getting a new job.
LAUNCH_FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "BOOT_FAIL"})
#: Why Slurm holds a job whose launch failed (a prolog failure: the node is drained and the job
#: requeued held; ``sunk.slurm.job.LAUNCH_FAILED_HELD``). Holds set by a person (JobHeldAdmin,
#: JobHeldUser) are theirs to lift.
FAILED_LAUNCH_HOLDS = frozenset({"launch_failed_requeued_held"})
#: Pod phases after which the Pod holds nothing: its job is released.
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


class Step(enum.Enum):
    NOTHING = "nothing"          # done, or nothing to do until something changes
    SUBMIT = "submit"            # validate, then submit a placeholder job (again, if lost)
    WAIT = "wait"                # the job is pending, or running but not started yet
    BIND = "bind"                # the job runs and its script started: bind the Pod
    CANCEL_JOB = "cancel-job"    # the Pod is going or gone: release its job
    DELETE_POD = "delete-pod"    # the job ended from Slurm's side: the Pod goes too


@dataclass(frozen=True, slots=True)
class PodView:
    phase: str = "Pending"
    bound: bool = False
    deleting: bool = False
    job_id: int | None = None
    rejected: bool = False
    #: The Node it is bound to, as the API server has it ("" if none yet).
    node: str = ""


@dataclass(frozen=True, slots=True)
class JobView:
    """The job as last seen in Slurm; ``None`` in place of a JobView means Slurm has no such job."""

    state: str
    started: bool = False
    node: str = ""
    #: Why it is pending, as last read ("" if not read or not pending).
    reason: str = ""

    @classmethod
    def of(cls, job: Job) -> JobView:
        """The view of a job as the job table has it."""
        return cls(state=job.state, started=job.started, node=job.nodes,
                   reason=job.reason if job.state == "PENDING" else "")

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def launch_failed(self) -> bool:
        """It will not run as it is: its launch failed and Slurm ended it, or holds it."""
        return not self.started and (self.state in LAUNCH_FAILED_STATES or (
            self.state == "PENDING" and self.reason in FAILED_LAUNCH_HOLDS))


def waiting(job: JobView | None) -> bool:
    """The job leaves its Pod where it is: pending for an ordinary reason, or running with its
    script not started yet. Between two such views of a job :func:`decide` gives any Pod the
    same step, so the change needs no new look at the Pod (only its line on the dashboard)."""
    return job is not None and not (job.finished or job.started or job.launch_failed)


def decide(pod: PodView | None, job: JobView | None) -> Step:
    """The next step. ``pod`` None: the Pod is gone from the API server."""
    if pod is None or pod.deleting or pod.phase in ENDED_PHASES:
        return Step.CANCEL_JOB if job is not None and not job.finished else Step.NOTHING
    if pod.rejected:
        return Step.NOTHING
    if pod.job_id is None:
        return Step.NOTHING if pod.bound else Step.SUBMIT
    if not pod.bound and (job is None or job.launch_failed):
        # Slurm lost the job before it ran (a slurmctld crash before it saved its state), or
        # purged it, or it failed to launch (and ended, or is held after a prolog failure): the
        # Pod holds nothing yet, so it gets a new job rather than going (the scheduler bounds
        # how often).
        return Step.SUBMIT
    if job is None or job.finished:
        return Step.DELETE_POD
    if pod.bound:
        return Step.NOTHING
    if job.state == "RUNNING" and job.started and job.node:
        return Step.BIND
    return Step.WAIT
