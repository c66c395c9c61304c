"""Why a Pod waits and until when, said as kube-scheduler says it (pure).

kube-scheduler writes ``PodScheduled=False`` with a reason and a message on every Pod it cannot
place, and ``kubectl describe``, cluster-autoscaler and dashboards read it. sunk says the same of
a Pod whose job waits in Slurm's queue: Slurm's reason in words, and the start time and nodes
Slurm's backfill plans for it (the Node goes into ``status.nominatedNodeName``, kube-scheduler's
field for the same idea). The Binding turns the condition ``True``, as it does for any scheduler.

This module decides what to show and whether it is worth a write; :mod:`sunk.loops.waiting`
gathers the facts and the executor writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sunk import objects
from sunk.slurm.text import expand_hostlist

#: The condition's reasons, as kube-scheduler's: waiting (here: in Slurm's queue), never
#: placeable as it is, and a fault of the scheduler's or Slurm's.
PENDING: Final = "Pending"
UNSCHEDULABLE: Final = "Unschedulable"
SCHEDULER_ERROR: Final = "SchedulerError"

#: Never more than one write of the condition per Pod in this many seconds.
MIN_WRITE_INTERVAL: Final = 10.0
#: A start estimate that moved less than this is not written again (:func:`estimate_tolerance`).
ESTIMATE_TOLERANCE: Final = 60.0
_ESTIMATE: Final = "; Slurm expects it to start at "
_ESTIMATE_AT: Final = re.compile(re.escape(_ESTIMATE) + r"\S+Z")
#: A job pending for less than this gets no write of its own: most start at once, and the
#: job id's write (two seconds after the submission) carries the condition of those that wait.
SHOW_AFTER: Final = 3.0

#: Slurm's reasons for a pending job (``squeue``'s NODELIST(REASON)), in words.
SLURM_REASONS: Final[Mapping[str, str]] = {
    "Resources": "the nodes it can use are busy",
    "Priority": "jobs of higher priority are ahead of it",
    "Dependency": "it depends on a job that has not ended",
    "DependencyNeverSatisfied": "it depends on a job that can never end as required",
    "ReqNodeNotAvail": "a node it needs is not available (down, drained or reserved)",
    "Reservation": "it waits for its reservation to begin",
    "ReservationDeleted": "its reservation was deleted",
    "BeginTime": "its begin time has not come yet",
    "JobHeldUser": "it is held by its user",
    "JobHeldAdmin": "it is held by an administrator",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "its time limit exceeds its partition's",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "no node has the features it asks for",
    "Licenses": "the licenses it needs are in use",
    "None": "Slurm has not looked at it yet",
}


@dataclass(frozen=True)
class Waiting:
    """What a waiting Pod shows: the ``PodScheduled`` condition's reason and message, and the
    Kubernetes Node Slurm plans to start it on ("" for none)."""

    reason: str
    message: str
    nominated: str = ""
    #: Slurm's expected start (epoch seconds), for the metrics; None when it gives none.
    expected_start: float | None = None


@dataclass(frozen=True)
class Shown:
    """What was last written on a Pod, and when (monotonic)."""

    waiting: Waiting
    at: float
    #: When the Pod began to wait (epoch seconds): the condition's ``lastTransitionTime``.
    since: float = 0.0


def slurm_reason_in_words(reason: str) -> str:
    """``QOSMaxGRESPerUser`` -> a sentence; an unknown code is given as it is."""
    if reason in SLURM_REASONS:
        return SLURM_REASONS[reason]
    if reason.startswith("QOS"):
        return f"a limit of its QOS is reached ({reason})"
    if reason.startswith("Assoc"):
        return f"a limit of its account is reached ({reason})"
    return reason or "no reason given yet"


def expected_start(raw: Mapping[str, Any], now: float) -> float | None:
    """Slurm's expected start of a pending job from its record's ``start_time`` (a number,
    or slurmrestd's ``{"set", "infinite", "number"}``); None where Slurm has no estimate
    (0, unset, infinite) or one already past."""
    value = raw.get("start_time")
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value) if value > now else None


def _when(epoch: float) -> str:
    return objects.timestamp(epoch)


def in_slurm(job_id: int, reason: str, start: float | None, nodes: Sequence[str],
             *, gang: str = "") -> Waiting:
    """A Pod whose job (``job_id``) Slurm holds pending for ``reason``; ``nodes``: the
    Kubernetes Nodes Slurm plans to start it on (the first is nominated); ``gang``: the
    gang's name, for a member."""
    who = f"gang {gang}'s Slurm job {job_id}" if gang else f"Slurm job {job_id}"
    message = f"{who} is pending ({reason or 'None'}): {slurm_reason_in_words(reason)}"
    if start is not None:
        message += f"{_ESTIMATE}{_when(start)}"
        if nodes:
            message += " on " + ", ".join(nodes)
    return Waiting(PENDING, message + ".", nominated=nodes[0] if nodes and start else "",
                   expected_start=start)


def starting(job_id: int, slurm_nodes: str, to_k8s: Mapping[str, str]) -> Waiting:
    """A Pod whose job Slurm has allocated (on ``slurm_nodes``) but not started yet."""
    where = f" on {slurm_nodes}" if slurm_nodes else ""
    nodes = [to_k8s[n] for n in expand_hostlist(slurm_nodes) if n in to_k8s]
    if nodes:
        where += f" (Node {', '.join(nodes)})"
    return Waiting(PENDING, f"Slurm job {job_id} is starting{where}: the Pod is bound when "
                            "its placeholder starts, after the node's prolog.")


def gang_incomplete(gang: str, present: int, size: int | None) -> Waiting:
    """A member of a gang that waits for its other members before it is submitted."""
    of = f"{present} of {size}" if size is not None else f"{present} of a size not known yet,"
    return Waiting(PENDING, f"gang {gang} waits for its members: {of} exist; it is submitted "
                            "to Slurm as one job when all do.")


def unschedulable(message: str) -> Waiting:
    return Waiting(UNSCHEDULABLE, message)


def scheduler_error(message: str) -> Waiting:
    return Waiting(SCHEDULER_ERROR, message)


@dataclass(frozen=True)
class Said:
    """What a message of :func:`in_slurm` says, read back (``kubectl sunk``): Slurm's reason
    and expected start ("" where it says none)."""

    reason: str = ""
    start: str = ""


_SAID = re.compile(r"Slurm job \d+ is (?:pending \((?P<reason>[^)]*)\)|(?P<starting>starting))"
                   r"(?:.*?Slurm expects it to start at (?P<start>\S+?)(?: on |\.$))?")


def read_message(message: str) -> Said:
    """The reason and start a condition's message of ours gives; empty for another's."""
    found = _SAID.search(message)
    if found is None:
        return Said("GangIncomplete" if " waits for its members: " in message else "")
    return Said(found["reason"] or ("Starting" if found["starting"] else ""),
                found["start"] or "")


def is_ours(message: str) -> bool:
    """A condition message sunk writes of a job or a gang (not another scheduler's)."""
    return bool(_SAID.search(message)) or " waits for its members: " in message


def to_write(shown: Shown | None, want: Waiting, now: float, wall: float = 0.0
             ) -> float | None:
    """0 to write ``want`` now; seconds to wait before it may be written (the last write was
    too recent); None when the Pod shows it already, or near enough: only Slurm's start
    estimate moved, by less than :func:`estimate_tolerance` (``wall``: the time now)."""
    if shown is None:
        return 0.0
    old = shown.waiting
    if (old.reason, old.message, old.nominated) == (want.reason, want.message, want.nominated):
        return None
    if _only_the_estimate_moved(old, want, wall):
        return None
    return max(0.0, shown.at + MIN_WRITE_INTERVAL - now)


def estimate_tolerance(start: float, wall: float) -> float:
    """How far Slurm's start estimate may move before it is written again: a minute, or a
    tenth of the wait left when that is longer. Slurm's backfill moves every queued job's
    estimate by seconds each time a job ends; writing each move cost a write per waiting Pod
    per job start."""
    return max(ESTIMATE_TOLERANCE, 0.1 * (start - wall))


def _only_the_estimate_moved(old: Waiting, new: Waiting, wall: float) -> bool:
    if (old.reason, old.nominated) != (new.reason, new.nominated) or (
            old.expected_start is None or new.expected_start is None):
        return False
    if _ESTIMATE_AT.sub("", old.message) != _ESTIMATE_AT.sub("", new.message):
        return False  # more changed than the time (the planned Nodes, say)
    return abs(new.expected_start - old.expected_start) < estimate_tolerance(
        new.expected_start, wall)


def condition(want: Waiting, since_wall: float) -> dict[str, Any]:
    """The ``PodScheduled`` condition as kube-scheduler writes it; ``since_wall``: when the
    Pod began to wait (the condition has been False since then)."""
    return {"type": "PodScheduled", "status": "False", "reason": want.reason,
            "message": want.message, "lastTransitionTime": _when(since_wall),
            "lastProbeTime": None}
