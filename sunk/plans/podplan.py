"""What to do for one Pod and its job, as a list of actions (pure).

The scheduler gathers plain facts (the Pod as the API server has it, what its annotations may
be believed to say, its job as Slurm has it), and these functions answer with
:mod:`sunk.plans.actions`. :func:`sunk.plans.decide.decide` picks the step; this module spells it
out: which Events, which annotations, how often a lost job is replaced, why a Pod is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from sunk import objects
from sunk.plans import actions as do
from sunk.plans import ownership, placement, translate, waiting
from sunk.plans.claims import ClaimsSeen
from sunk.plans.decide import JobView, PodView, Step, decide
from sunk.policy import Decision

#: How often a Pod not yet bound gets a new job when Slurm lost its job or it failed to launch.
MAX_RESUBMITS = 3


@dataclass(frozen=True)
class PodFacts:
    key: str
    view: PodView
    owned: ownership.Ownership
    job: JobView | None
    #: The Kubernetes Node that hosts the job's Slurm node (None: no slurmd Pod has it).
    k8s_node: str | None = None
    #: The Pod was already told its annotations were ignored.
    told_ignored: bool = False
    #: Jobs of this Pod already replaced (lost, or failed to launch).
    replaced: Set[int] = field(default_factory=frozenset)
    #: What the job's Node lacks for the Pod in Kubernetes' view (() if it has room).
    no_room: tuple[str, ...] = ()
    #: The Pod's job was cancelled because its Node had no room: it gets a new one.
    refitted: bool = False
    #: Where the job's Node has no room: the Pods there that Slurm does not count.
    not_counted: tuple[str, ...] = ()
    #: A submit of the Pod's got no answer and Slurm's jobs since could not be read (why): it
    #: may have reached Slurm, so nothing is submitted until they are.
    unanswered: str | None = None
    #: Failed reconciles of the Pod so far (Events of a repeated failure are told on the 1st,
    #: 2nd, 4th, 8th ... only).
    tries: int = 0


def plan_pod(facts: PodFacts) -> do.Plan:
    """The actions for one Pod; ``submit`` asks the caller to run :func:`plan_submission`."""
    view, owned = facts.view, facts.owned
    job = None if facts.refitted else facts.job  # a job cancelled to refit holds nothing
    first: list[do.PodAction] = []
    if owned.ignored and not facts.told_ignored:
        first.append(_report_ignored(owned, bound=view.bound))
    step = decide(view, job)
    if facts.refitted and view.job_id is not None and facts.job is not None and (
            not facts.job.finished):  # its cancel may have failed: never leave it running
        first.append(do.CancelJob(view.job_id, "moved: its Node had no room for the Pod"))
    if step is Step.SUBMIT:
        plan = _plan_submit(facts, job, first)
        if plan.submit and facts.unanswered is not None:  # never submit blind
            return do.Plan((*plan.actions, *_submit_failed(facts, facts.unanswered)))
        return plan
    if owned.write and view.job_id is not None:  # adopted, or a wrong job-id repaired
        first.append(do.Annotate(dict(owned.write), note=f"adopted job {view.job_id}"))
    if step is Step.BIND and job is not None and view.job_id is not None:
        first += _plan_bind(facts, job, view.job_id)
    elif step is Step.CANCEL_JOB and view.job_id is not None:
        first.append(do.CancelJob(view.job_id, "its Pod is being deleted" if view.deleting
                                  else f"its Pod is {view.phase.lower()}"))
    elif step is Step.DELETE_POD and job is not None:
        first.append(do.DeletePod(f"job {view.job_id} {job.state.lower()}"))
    elif step is Step.DELETE_POD:  # bound, and Slurm no longer counts it on its node
        first.append(do.DeletePod(
            f"job {view.job_id} of this bound Pod " + (
                f"was lost by Slurm ({owned.lost})" if owned.lost
                else "is no longer in Slurm (ended and purged, or lost)")
            + ": Slurm no longer counts the Pod on its node", reason="SlurmJobLost"))
    elif step is Step.NOTHING and (moved := _runs_elsewhere(facts)):
        first.append(do.DeletePod(moved, reason="SlurmJobLost"))
    return do.Plan(tuple(first))


def _runs_elsewhere(facts: PodFacts) -> str:
    """Why a bound Pod's job runs on another Node than the Pod ("" if it does not): a slurmctld
    that restarted from state saved before the job started runs it again, where it picks, and
    the first run's step is killed as on the wrong node. Slurm then counts the Pod there, not on
    the Pod's Node, which it may fill."""
    view, job = facts.view, facts.job
    if not (view.bound and view.node and job is not None and job.state == "RUNNING"
            and job.node and facts.k8s_node is not None and facts.k8s_node != view.node):
        return ""
    return (f"job {view.job_id} of this Pod bound to {view.node} runs on Slurm node {job.node} "
            f"(Node {facts.k8s_node}): Slurm no longer counts the Pod on its node")


def _report_ignored(owned: ownership.Ownership, *, bound: bool) -> do.ReportIgnored:
    """Tell the Pod that the annotations only the scheduler writes were not believed."""
    what = "; ".join(f"{k}: {why}" for k, why in owned.ignored.items())
    return do.ReportIgnored(
        f"only the scheduler writes these, for this Pod alone: {what}. "
        + (f"Its job is {owned.job_id}." if owned.job_id is not None
           else "The Pod is bound already and is left where it is." if bound
           else "The Pod is scheduled from scratch."))


def _submit_failed(facts: PodFacts, why: str) -> tuple[do.PodAction, ...]:
    """A submission that cannot be made now: a wait, told on the Pod on the 1st, 2nd, 4th,
    8th ... try (as a submit Slurm did not take is)."""
    told = () if facts.tries & (facts.tries - 1) else (do.PodEvent(
        "SubmitFailed", f"Slurm did not take the job (try {facts.tries + 1}, retrying with "
                        f"backoff): {why}", warning=True),)
    return (*told, do.RetryLater(why, show=waiting.scheduler_error(
        f"Slurm did not take the job (try {facts.tries + 1}, retrying with backoff): {why}")))


def _plan_submit(facts: PodFacts, job: JobView | None, first: list[do.PodAction]) -> do.Plan:
    """A new job, after the actions ``first``. One that replaces a lost or held job is counted
    (once per lost job, not per retry); past :data:`MAX_RESUBMITS` the Pod is deleted."""
    view, owned = facts.view, facts.owned
    if view.job_id is None or facts.refitted:
        return do.Plan(tuple(first), submit=True)
    what = f"job {view.job_id} " + (
        "was lost by Slurm before it ran"
        + (f" ({owned.lost})" if owned.lost else "")
        if job is None
        else f"is held by Slurm after its launch failed ({job.reason})"
        if job.state == "PENDING" else f"{job.state.lower()} before it started")
    actions = list(first)
    if job is not None and not job.finished:  # held: it goes before its successor comes
        actions.append(do.CancelJob(view.job_id, f"held after its launch failed "
                                                 f"({job.reason}); replaced"))
    if view.job_id not in facts.replaced:
        if len(facts.replaced) >= MAX_RESUBMITS:
            return do.Plan((*actions, do.DeletePod(
                f"{what}, the {MAX_RESUBMITS + 1}th lost job")))
        actions += [do.Replace(view.job_id), do.PodEvent(
            "SlurmJobLost", f"{what}; submitting a new one (try {len(facts.replaced) + 1} "
            f"of {MAX_RESUBMITS})", warning=True)]
    return do.Plan(tuple(actions), submit=True)


def _plan_bind(facts: PodFacts, job: JobView, job_id: int) -> list[do.PodAction]:
    """Slurm started the job: bind the Pod to the job's Node, unless no Kubernetes Node hosts
    the job's Slurm node (wait) or that Node has no room for the Pod (the job is refit)."""
    if facts.k8s_node is None:
        return [do.PodEvent("NoNodeForSlurmNode",
                            f"no slurmd Pod has hostname {job.node}; waiting", warning=True),
                do.RetryLater(f"Slurm node {job.node} has no slurmd Pod")]
    if not facts.no_room:
        return [do.Reserve(facts.k8s_node), do.Bind(facts.k8s_node, job.node, job_id)]
    why = (f"Slurm ran job {job_id} on {job.node}, but Node {facts.k8s_node} has "
           f"no room for the Pod ({'; '.join(facts.no_room)}): the kubelet would refuse it")
    actions: list[do.PodAction] = [
        do.PodEvent("NoRoomOnNode", f"{why}. The job is cancelled and the Pod submitted again "
                    "when a Node has room.", warning=True),
        do.Refit(job_id, why)]
    if facts.not_counted:
        actions.append(do.ReportNotCounted(facts.k8s_node, job.node, job_id, facts.not_counted))
    return actions


def plan_deleted(job_id: int, job: JobView | None) -> tuple[do.CancelJob, ...]:
    """The Pod object is gone: release its job if it still holds anything."""
    if decide(None, job) is Step.CANCEL_JOB:
        return (do.CancelJob(job_id, "its Pod was deleted"),)
    return ()


#: How often a Pod that waits for a policy set to be in force looks again.
POLICIES_AWAITED_EVERY = 10.0


def await_policies(why: str) -> do.RetryLater:
    """No policy set is in force (one that does not load, since start-up): the Pod cannot be
    judged, so it waits, saying why, and is looked at again soon; never refused for it."""
    return do.RetryLater(why, after=POLICIES_AWAITED_EVERY, show=waiting.scheduler_error(why))


def plan_submission(pod: Mapping[str, Any], admission: Decision, snapshot: placement.Snapshot,
                    settings: translate.TranslateSettings, *, annotation_prefix: str,
                    first_try: bool, claims: ClaimsSeen | None = None
                    ) -> tuple[do.PodAction, ...]:
    """Check, translate and submit: the Pod's placeholder job, or why it can never have one.
    Warnings are told on the first try only (not on every retry of a Slurm outage).
    ``claims``: what is known of ResourceClaims (None: not read yet)."""
    out: list[do.PodAction] = []
    if first_try:
        annotations = objects.pod(pod).metadata.annotations
        for unknown, hint in translate.unknown_annotations(annotations, annotation_prefix):
            out.append(do.PodEvent(
                "UnknownAnnotation", f"{unknown} is not an annotation sunk reads; it is ignored"
                + (f" (did you mean {hint}?)" if hint else ""), warning=True))
        out += [do.PodEvent(w.reason, f"{w.policy}: {w.message}", warning=True)
                for w in admission.warnings]
    if not admission.allowed:
        return (*out, do.Reject(admission.reason or "PolicyDenied", admission.message))
    try:
        job = translate.job_description(pod, admission.mappings, snapshot, settings, claims)
    except translate.Unschedulable as exc:
        return (*out, do.Reject(exc.reason, str(exc)))
    except translate.InvalidPod as exc:
        return (*out, do.Reject("InvalidPod", str(exc)))
    except translate.NotYet as exc:  # no room, a cordoned or unmapped node: may change, so wait
        return (*out, do.RetryLater(str(exc), room=isinstance(exc, translate.NoRoom),
                                    show=waiting.unschedulable(str(exc))))
    # Anything else raised is a fault of sunk's, never the Pod's: it goes up to the worker,
    # which logs it with its traceback, tells the Pod (InternalError) and retries.
    return (*out, do.Submit(job))
