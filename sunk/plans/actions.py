"""What a reconcile wants done, as plain data (pure).

The plans (:mod:`sunk.plans.podplan`, :mod:`sunk.plans.nodeplan`) return lists of these; the
executor (:mod:`sunk.apply.executor`) carries them out through the Kubernetes and Slurm ports.
Nothing here knows how: a plan can be read and tested as a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sunk.plans.fit import Capacity
from sunk.plans.locking import LockState
from sunk.plans.waiting import Waiting
from sunk.slurm.job import PodIdentity

# -- a Pod and its job -------------------------------------------------------------------------


@dataclass(frozen=True)
class PodEvent:
    """An Event on the Pod (and a line of its dashboard history)."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class ReportIgnored:
    """Annotations on the Pod that only the scheduler writes were ignored: one Warning Event."""

    message: str


@dataclass(frozen=True)
class Annotate:
    annotations: Mapping[str, str | None]
    #: For the dashboard's history ("" for none).
    note: str = ""


@dataclass(frozen=True)
class Submit:
    """Submit the placeholder job (its credential is added by the executor, never shown), then
    write its id onto the Pod. A refusal that asking again cannot change rejects the Pod."""

    description: Mapping[str, Any]


@dataclass(frozen=True)
class Reject:
    """The Pod can never be scheduled as it is: an Event, the mark, no retry."""

    reason: str
    message: str


@dataclass(frozen=True)
class Reserve:
    """Hold the Pod's room on Kubernetes Node ``k8s_node``, as kube-scheduler's Reserve: checked
    against what is bound there and counted at once, with no wait between, so two Pods bound
    together cannot both take a Node's last room. Comes right before the Pod's ``Bind``; the
    room is released if the binding fails. A Node with no room any more is a wait for room."""

    k8s_node: str


@dataclass(frozen=True)
class Bind:
    k8s_node: str
    slurm_node: str
    job_id: int
    #: Set on the Pod with the binding, in the same write (a gang member's rank and node).
    annotations: Mapping[str, str] | None = None


@dataclass(frozen=True)
class CancelJob:
    job_id: int
    why: str


@dataclass(frozen=True)
class DeletePod:
    why: str
    #: The Event's reason: the job ended (from Slurm's side), or Slurm lost it.
    reason: str = "SlurmJobEnded"


@dataclass(frozen=True)
class Refit:
    """Slurm ran the Pod's job on a Node without room for the Pod in Kubernetes' view: the job
    is cancelled (its placeholder is told its Pod is gone) and the Pod submitted again, when
    some Node has room."""

    job_id: int
    why: str


@dataclass(frozen=True)
class ReportNotCounted:
    """Slurm chose ``slurm_node`` for a job, but Pods Slurm does not count take the room on
    its Node (``k8s_node``): said on the Node, on those Pods, in a metric and on the
    dashboard, since neither side alone shows why the two disagree."""

    k8s_node: str
    slurm_node: str
    job_id: int
    pods: tuple[str, ...]


@dataclass(frozen=True)
class Replace:
    """The Pod's job was lost or failed to launch: it gets a new one (counted per lost job).
    Not ``counted``: sunk withdrew a gang's job because the gang changed before it started."""

    lost_job: int
    counted: bool = True


@dataclass(frozen=True)
class RetryLater:
    """Nothing can be done yet: look again later, the one way any plan or loop says so. The
    executor stops there and hands it back; the work queue then backs off, as after a
    failure, or, with ``after``, looks again in that many seconds (a timeout is due).
    ``room``: it waits for room on a Node, so a Pod leaving a Node wakes it early. ``show``:
    what the Pod shows while it waits (its PodScheduled condition), if anything."""

    why: str
    room: bool = False
    after: float | None = None
    show: Waiting | None = None


PodAction = (PodEvent | ReportIgnored | Annotate | Submit | Reject | Reserve | Bind | CancelJob
             | DeletePod | Replace | Refit | ReportNotCounted | RetryLater)

# -- a gang as a whole ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitGang:
    """Submit the gang's one job; its id goes onto every member. ``members``: each member's
    Pod key and rank, in rank order. ``components``: the rest of a heterogeneous job, whose
    first component is ``job`` (:mod:`sunk.plans.hetjob`)."""

    gang: PodIdentity
    job: Mapping[str, Any]
    members: tuple[tuple[str, int], ...]
    components: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class RejectGang:
    """A member can never run, so neither can the gang: every member in ``members`` is
    rejected, and the gang's record says why."""

    name: str
    reason: str
    message: str
    members: tuple[str, ...]


GangAction = PodAction | SubmitGang | RejectGang

# -- a node's lock and drain -------------------------------------------------------------------


@dataclass(frozen=True)
class SetLockTaint:
    present: bool


@dataclass(frozen=True)
class Evict:
    pod_key: str


@dataclass(frozen=True)
class SetLockState:
    """The lock's state, kept on the slurmd Pod (a restarted syncer reads it back)."""

    before: LockState
    after: LockState
    waiting_for: tuple[str, ...] = ()


@dataclass(frozen=True)
class DrainSlurmNode:
    reason: str


@dataclass(frozen=True)
class ResumeSlurmNode:
    why: str


@dataclass(frozen=True)
class ShowSlurmState:
    """Show Slurm's drain or down state (and reason) on the slurmd Pod and the Node."""

    annotations: Mapping[str, str | None]
    #: "drain", "down" or "" (no longer), and Slurm's reason.
    shown: str
    reason: str = ""
    on_pod: bool = True
    on_node: bool = True


@dataclass(frozen=True)
class ShowCapacity:
    """Slurm's node definition and Kubernetes' room disagree (or agree again): a metric, an
    Event on the Node and a line on the dashboard."""

    mismatch: tuple[Capacity, ...]
    text: str


NodeAction = (SetLockTaint | Evict | SetLockState | DrainSlurmNode | ResumeSlurmNode
              | ShowSlurmState | ShowCapacity)


@dataclass(frozen=True)
class Plan:
    """A reconcile's answer: the actions in order, and whether the Pod must first pass the
    policies and be translated (:func:`sunk.plans.podplan.plan_submission`)."""

    actions: tuple[PodAction, ...] = ()
    submit: bool = False
