"""What a scheduler-plugins PodGroup's status says of its gang (pure).

``kubectl get podgroups`` prints a group's phase and its members' counts from ``status``, which
scheduler-plugins' own controller keeps. Clusters that run sunk instead of that scheduler rarely
run its controller, so sunk keeps the same fields, with the controller's meanings: ``Pending``
(fewer Pods than ``minMember``), ``Scheduling`` (all there, not all running: in Slurm's queue,
starting or being bound), ``Running``, and the final ``Finished`` and ``Failed``. The CRD has no
``conditions``: why the gang waits is on each member's ``PodScheduled`` condition.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Final

from sunk import objects

PENDING: Final = "Pending"
SCHEDULING: Final = "Scheduling"
RUNNING: Final = "Running"
FINISHED: Final = "Finished"
FAILED: Final = "Failed"
#: Phases the controller never leaves: the group's Pods are deleted after, as its job ends.
FINAL: Final = frozenset({FINISHED, FAILED})


def status(current: Mapping[str, Any], min_member: int, phases: Iterable[str],
           now: datetime.datetime) -> dict[str, Any] | None:
    """The status to write on a PodGroup whose ``status`` is ``current`` and whose Pods are in
    ``phases`` (one per Pod, terminated ones too); None when it says that already or its phase
    is final. ``scheduleStartTime`` is set once, when the group first leaves ``Pending``."""
    if current.get("phase") in FINAL:
        return None
    seen = list(phases)
    running, succeeded, failed = (seen.count(p) for p in ("Running", "Succeeded", "Failed"))
    if len(seen) < min_member:
        phase = PENDING
    elif succeeded >= min_member:
        phase = FINISHED
    elif failed and failed + running + succeeded >= min_member:
        phase = FAILED
    elif running + succeeded >= min_member:
        phase = RUNNING
    else:
        phase = SCHEDULING
    want: dict[str, Any] = {"phase": phase, "running": running, "succeeded": succeeded,
                            "failed": failed}
    if phase != PENDING and not current.get("scheduleStartTime"):
        want["scheduleStartTime"] = objects.timestamp(now)
    if all(current.get(field, 0 if field != "phase" else None) == value
           for field, value in want.items()):
        return None
    return want
