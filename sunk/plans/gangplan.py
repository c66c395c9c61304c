"""What to do for one gang and its job, as a list of actions on its members (pure).

The gang's truth is its newest Slurm job (it names the gang and its members in rank order,
:mod:`sunk.slurm.job`) and the Pods as the API server has them, so after a restart the same
inputs give the same next step. All or nothing:

- the job is submitted only when every member exists and the gang is well formed;
- before the job starts, a member that goes (or a gang that changes) cancels it, and a new one
  is submitted when the gang is whole again;
- once it started, every member is bound, rank r to the r-th node of the job; a member deleted
  or Failed cancels the job, and a job that ended takes every member with it;
- the job ends (cancelled by sunk) only when every member has ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from sunk.plans import actions as do
from sunk.plans import hetjob, placement, waiting
from sunk.plans.decide import JobView
from sunk.plans.gang import NODE_ANNOTATION, RANK_ANNOTATION, TERMINAL, Gang
from sunk.plans.translate import NoRoom, Unschedulable
from sunk.plans.waiting import Waiting
from sunk.slurm.job import PodIdentity

#: How often a gang gets a new job after its job was held, failed to launch or was not
#: bound in time; then its members are deleted.
MAX_RESUBMITS = 3


@dataclass(frozen=True)
class MemberFacts:
    """One Pod of the gang as the API server has it (live or not)."""

    key: str
    id: str
    phase: str = "Pending"
    bound: bool = False
    deleting: bool = False
    #: Rejected by sunk (a policy denied it or its gang): the gang is not submitted again.
    rejected: bool = False

    @property
    def live(self) -> bool:
        return not self.deleting and self.phase not in TERMINAL


@dataclass(frozen=True)
class GangJob:
    """The gang's newest job as Slurm has it."""

    job_id: int
    view: JobView
    #: Its members' ids in rank order, and each one's node (expanded; rank r's is the r-th).
    members: tuple[str, ...]
    nodes: tuple[str, ...] = ()
    #: Each member's component of a heterogeneous job, in rank order (() for one shape).
    parts: tuple[int, ...] = ()


@dataclass(frozen=True)
class GangFacts:
    gang: Gang
    #: Every Pod of the gang present, by member id (terminal and terminating ones too).
    pods: Mapping[str, MemberFacts]
    job: GangJob | None
    prefix: str
    #: Slurm node -> Kubernetes Node.
    k8s_nodes: Mapping[str, str] = field(default_factory=dict)
    #: Jobs of the gang sunk cancelled to replace them (counted), or withdrew because the
    #: gang changed before they started (not counted).
    replaced: Set[int] = frozenset()
    withdrawn: Set[int] = frozenset()
    #: Jobs of the gang sunk has asked Slurm to cancel already.
    cancelled: Set[int] = frozenset()
    #: Seconds since the job was first seen started (None: not started), and since the oldest
    #: live member was created.
    started_for: float | None = None
    waited_for: float = 0.0
    incomplete_after: float = 300.0
    bind_within: float = 60.0


Step = tuple[str | None, do.GangAction]
"""An action on one member (its key), or on the gang as a whole (None)."""


@dataclass(frozen=True)
class GangPlan:
    steps: tuple[Step, ...] = ()
    #: Check every member against the policies and submit the gang's job.
    submit: bool = False
    #: Look again after this many seconds (a timeout is due), if nothing wakes it sooner.
    recheck_in: float | None = None
    #: What the gang waits for, for the dashboard ("" when nothing).
    waiting: str = ""
    #: What each of its members shows while it waits (its PodScheduled condition), if any.
    show: Waiting | None = None


def _names(keys: list[str]) -> str:
    return ", ".join(k.split("/", 1)[-1] for k in keys[:5]) + (
        f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _all(members: list[MemberFacts], action: do.PodAction) -> list[Step]:
    return [(m.key, action) for m in members]


def plan_gang(f: GangFacts) -> GangPlan:
    job = f.job
    live = [m for m in f.pods.values() if m.live]
    if job is not None and not job.view.finished:
        return _with_live_job(f, job, live)
    return _without_live_job(f, job, live)


def _with_live_job(f: GangFacts, job: GangJob, live: list[MemberFacts]) -> GangPlan:
    if job.job_id in f.cancelled:
        return GangPlan(waiting=f"job {job.job_id} cancelled; waiting for Slurm to end it")
    of_job = [f.pods.get(m) for m in job.members]
    lost = [m.key if m is not None else f"member {i}" for i, m in enumerate(of_job)
            if m is None or m.deleting or m.phase == "Failed"]
    started = job.view.started and job.view.state == "RUNNING"
    cancel = do.CancelJob
    if started:
        if lost:
            return GangPlan(((None, cancel(job.job_id, f"member(s) {_names(lost)} gone or "
                                                       "failed after the gang started; the "
                                                       "rest go with it")),))
        if all(m is not None and m.phase == "Succeeded" for m in of_job):
            return GangPlan(((None, cancel(job.job_id, "every member has succeeded")),))
        return _bind(f, job, of_job)
    if job.view.launch_failed:
        return _replace(f, job, f"job {job.job_id} is held by Slurm after its launch failed "
                                f"({job.view.reason})")
    if lost or set(job.members) != {m.id for m in live} or f.gang.problem:
        why = (f"member(s) {_names(lost)} gone before the gang's job started" if lost
               else f.gang.problem or "the gang's members changed before its job started")
        return GangPlan(((None, do.Replace(job.job_id, counted=False)),
                         (None, cancel(job.job_id, why))), waiting=why)
    reason = f" ({job.view.reason})" if job.view.reason else ""
    return GangPlan(waiting=f"job {job.job_id} {job.view.state.lower()}{reason}: waiting for "
                            f"Slurm to start it on {len(job.members)} nodes at once")


def _bind(f: GangFacts, job: GangJob, of_job: list[MemberFacts | None]) -> GangPlan:
    """Every member of a started job onto its rank's node, all at once (by the executor), each
    binding carrying the member's rank, node and job onto the Pod in the same write. The
    mapping itself is the job's (its extra lists the members in rank order): a restarted
    scheduler gives every rank the same node."""
    if len(job.nodes) != len(job.members):
        return GangPlan(((None, do.RetryLater(
            f"job {job.job_id} runs on {len(job.nodes)} nodes for {len(job.members)} "
            "members; waiting for Slurm's node list")),))
    steps: list[Step] = []
    missing = [node for member, node in zip(of_job, job.nodes, strict=True)
               if member is not None and not member.bound and node not in f.k8s_nodes]
    for rank, (member, node) in enumerate(zip(of_job, job.nodes, strict=True)):
        if member is None or member.bound or missing:  # all at once, or none yet
            continue
        k8s_node = f.k8s_nodes[node]
        steps.append((member.key, do.Reserve(k8s_node)))
        steps.append((member.key, do.Bind(k8s_node, node, job.job_id, {
            f.prefix + RANK_ANNOTATION: str(rank), f.prefix + NODE_ANNOTATION: node,
            f.prefix + "job-id": str(job.job_id)})))
    if not steps and not missing:
        return GangPlan()
    late = f.started_for is not None and f.started_for > f.bind_within
    if late:
        return _replace(f, job, f"job {job.job_id} started {f.started_for:.0f}s ago but not "
                                "every member could be bound")
    if missing:
        steps.append((None, do.RetryLater(f"Slurm node(s) {', '.join(missing)} have no "
                                          "slurmd Pod")))
    left = None if f.started_for is None else max(1.0, f.bind_within - f.started_for)
    return GangPlan(tuple(steps), recheck_in=left, waiting="binding every member")


def _replace(f: GangFacts, job: GangJob, why: str, *, recheck: bool = False) -> GangPlan:
    """Cancel the job and give the gang a new one (bounded), or give up and delete it.
    ``recheck``: the job has ended already; look again at once (to submit its successor)."""
    live = [m for m in f.pods.values() if m.live]
    def cancel(why: str) -> list[Step]:
        return [] if job.view.finished else [(None, do.CancelJob(job.job_id, why))]

    if len(f.replaced) >= MAX_RESUBMITS and job.job_id not in f.replaced:
        return GangPlan((
            *cancel(why),
            *_all(live, do.DeletePod(f"{why}; the gang's {MAX_RESUBMITS + 1}th job lost"))))
    return GangPlan((
        (None, do.Replace(job.job_id)),
        *cancel(f"{why}; replaced"),
        *_all(live, do.PodEvent("GangJobReplaced", f"{why}; submitting a new job for the "
                                                   "gang", warning=True))),
        waiting=why, recheck_in=0.1 if recheck else None)


def _without_live_job(f: GangFacts, job: GangJob | None, live: list[MemberFacts]) -> GangPlan:
    gang = f.gang
    ours = job is not None and (job.job_id in f.replaced or job.job_id in f.withdrawn)
    if job is not None and not ours and job.view.launch_failed:
        return _replace(f, job, f"job {job.job_id} {job.view.state.lower()}: its launch "
                                "failed", recheck=True)
    if job is not None and not ours:
        of_job = [m for i in job.members if (m := f.pods.get(i)) is not None]
        ended = f"job {job.job_id} {job.view.state.lower()}"
        if any(m.bound for m in of_job):  # it ran: every member still there goes with it
            going = [m for m in of_job if m.live]
            return GangPlan(tuple(_all(going, do.DeletePod(f"the gang's {ended}"))),
                            waiting=f"the gang's {ended}; its members are deleted")
        if live and set(job.members) == {m.id for m in live}:
            # Slurm ended it before it ran (scancel, a time limit): the gang goes too
            return GangPlan(tuple(_all(live, do.DeletePod(
                f"the gang's {ended} before it started"))))
    if gang.waiting:
        # what makes the gang (its PodGroup, JobSet or Job) is not known yet: a Pod bound
        # may be no member at all (bound alone before a restart), so nothing is deleted
        return GangPlan(waiting=gang.waiting, recheck_in=5.0)
    if stray := [m for m in live if m.bound]:
        return GangPlan(tuple(_all(stray, do.DeletePod(
            "its gang has no job any more (it ended or Slurm lost it)"))))
    if not live:
        return GangPlan()
    if any(m.rejected for m in live):
        return GangPlan(waiting="rejected: a member can never run (see its Events)")
    if gang.problem:
        return GangPlan(tuple(_all(live, do.PodEvent("GangInvalid", gang.problem,
                                                     warning=True))), waiting=gang.problem)
    if not gang.complete:
        have = f"{len(gang.members)} of {gang.size} members"
        show = waiting.gang_incomplete(gang.name, len(gang.members), gang.size)
        if f.waited_for < f.incomplete_after:
            return GangPlan(waiting=f"{have}; nothing is submitted until all exist",
                            recheck_in=f.incomplete_after - f.waited_for, show=show)
        return GangPlan(tuple(_all(live, do.PodEvent(  # told once: the same words each time
            "GangIncomplete", f"gang {gang.name} has {have} after more than "
                              f"{f.incomplete_after:.0f}s; nothing is submitted until all "
                              "exist", warning=True))),
            waiting=f"{have}; nothing is submitted until all exist", show=show)
    return GangPlan(submit=True, waiting="submitting its job")


# -- its submission ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberSubmission:
    """One member's part of the gang's submission: its own plan as a Pod's would be
    (:func:`sunk.plans.podplan.plan_submission`: warnings, then ``Submit``, ``Reject`` or
    ``RetryLater``)."""

    key: str
    name: str
    actions: tuple[do.PodAction, ...]


def plan_gang_submission(gang: Gang, who: PodIdentity, members: list[MemberSubmission],
                         snapshot: placement.Snapshot, shape: str = hetjob.EXACT
                         ) -> tuple[Step, ...]:
    """The gang's job, all or nothing: each member's warnings on that member, then the job of
    every member's description (:func:`hetjob.gang_jobs`: one job, or a heterogeneous one as
    ``shape`` allows), or the first member's refusal for the whole gang, or a wait.
    ``members`` may stop at the first that cannot submit."""
    steps: list[Step] = []
    descriptions: list[dict[str, Any]] = []
    for member in members:
        *told, last = member.actions
        steps += [(member.key, action) for action in told]
        match last:
            case do.Submit(description):
                descriptions.append(dict(description))
            case do.Reject(reason, message):
                return (*steps, _reject(gang, reason, f"member {member.name}: {message}"))
            case do.RetryLater(why, room):
                return (*steps, (None, do.RetryLater(f"member {member.name}: {why}", room)))
    try:
        made = hetjob.gang_jobs(descriptions, who, snapshot, shape)
    except Unschedulable as exc:
        return (*steps, _reject(gang, exc.reason, str(exc)))
    except NoRoom as exc:
        return (*steps, (None, do.RetryLater(str(exc), room=True)))
    if made.fallback:
        steps += [(m.key, do.PodEvent("GangShapeLargest", made.fallback)) for m in members]
    first, *rest = made.jobs
    return (*steps, (None, do.SubmitGang(made.who, first, tuple(
        (m.key, m.rank) for m in gang.members), tuple(rest))))


def _reject(gang: Gang, reason: str, message: str) -> Step:
    return (None, do.RejectGang(gang.name, reason, message,
                                tuple(m.key for m in gang.members)))

