"""Kubernetes' own gang API, ``scheduling.k8s.io`` Workloads and PodGroups, read and answered
(pure).

A Pod joins a PodGroup with ``spec.schedulingGroup.podGroupName`` (1.36 on); the PodGroup's
``spec.schedulingPolicy`` is ``gang: {minCount}`` (one gang of that many Pods) or ``basic: {}``
(each Pod alone). The Job controller makes a Workload and a PodGroup for a Job itself when its
``WorkloadWithJob`` gate is on. The API's version differs by release: ``v1alpha2`` in 1.36,
``v1beta1`` (and ``v1alpha3``) in 1.37, with the condition kube-scheduler writes on a PodGroup
renamed between them. The version is found at start-up from what the API server serves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

GROUP: Final = "scheduling.k8s.io"
#: The versions sunk reads, the one preferred first (as kube-scheduler of that release does).
VERSIONS: Final = ("v1beta1", "v1alpha3", "v1alpha2")
#: The PodGroup condition kube-scheduler writes, by version.
CONDITION_TYPE: Final = {"v1beta1": "PodGroupInitiallyScheduled",
                         "v1alpha3": "PodGroupInitiallyScheduled",
                         "v1alpha2": "PodGroupScheduled"}
#: Its reasons: placed, not placeable now, a fault of the scheduler's (or Slurm's).
SCHEDULED, UNSCHEDULABLE, SCHEDULER_ERROR = "Scheduled", "Unschedulable", "SchedulerError"


def served_versions(group: Mapping[str, Any]) -> list[str]:
    """The versions sunk reads among those an API group's discovery document lists (whatever
    its shape: an odd one lists none)."""
    entries = group.get("versions")
    return [str(e["version"]) for e in entries if isinstance(e, Mapping)
            and e.get("version") in VERSIONS] if isinstance(entries, list) else []


def served_resources(listing: Mapping[str, Any]) -> list[str]:
    """The resources a group version's discovery document lists."""
    resources = listing.get("resources")
    return [str(r.get("name")) for r in resources
            if isinstance(r, Mapping)] if isinstance(resources, list) else []


def choose_version(served: Mapping[str, Collection[str]]) -> str | None:
    """The version to read PodGroups in, from the versions the API server serves of the group
    and the resources each has; None if none of them serves ``podgroups``."""
    return next((v for v in VERSIONS if "podgroups" in served.get(v, ())), None)


@dataclass(frozen=True)
class Policy:
    """A PodGroup's scheduling policy: a gang of ``min_count`` Pods, or each Pod alone."""

    gang: bool
    min_count: int | None = None


def policy(group: Mapping[str, Any]) -> Policy | None:
    """The policy a PodGroup states; None if it states none that sunk can read (the API
    server validates it, so only a hand-made object lacks one)."""
    spec = group.get("spec")
    chosen = spec.get("schedulingPolicy") if isinstance(spec, Mapping) else None
    if not isinstance(chosen, Mapping):
        return None
    gang = chosen.get("gang")
    if isinstance(gang, Mapping):
        count = gang.get("minCount")
        valid = isinstance(count, int) and not isinstance(count, bool)
        return Policy(gang=True, min_count=count if valid else None)
    if isinstance(chosen.get("basic"), Mapping):
        return Policy(gang=False)
    return None


def condition(version: str, *, scheduled: bool, reason: str, message: str,
              generation: int | None, at: str) -> dict[str, Any]:
    """The PodGroup condition, as kube-scheduler writes it (``at``: its transition time)."""
    written: dict[str, Any] = {"type": CONDITION_TYPE.get(version, CONDITION_TYPE[VERSIONS[0]]),
                               "status": "True" if scheduled else "False", "reason": reason,
                               "message": message, "lastTransitionTime": at}
    if generation is not None:
        written["observedGeneration"] = generation
    return written


def to_write(current: Collection[Mapping[str, Any]], want: Mapping[str, Any]) -> bool:
    """Whether ``want`` says something the PodGroup's conditions do not. A condition ``True``
    is never turned back (kube-scheduler's rule: the group was placed once)."""
    found = next((c for c in current if c.get("type") == want["type"]), None)
    if found is None:
        return True
    if found.get("status") == "True":
        return False
    return any(found.get(k) != want[k] for k in ("status", "reason", "message"))


def gang_condition(version: str, *, gang: str, size: int | None, bound: int, job_id: int | None,
                   problem: str, waiting: str, generation: int | None, now: str,
                   current: Collection[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The PodGroup condition that says where the gang ``gang`` is, or None when the
    PodGroup says it already. ``True`` once every member is bound; ``False`` with reason
    ``Unschedulable`` while it cannot be placed (``problem``: never as it stands) or waits
    (``waiting``: for members, or in Slurm's queue)."""
    if size is not None and bound >= size:
        job = f" to the nodes of Slurm job {job_id}" if job_id is not None else ""
        scheduled, reason, message = True, SCHEDULED, f"all {size} members are bound{job}"
    elif problem:
        scheduled, reason, message = False, UNSCHEDULABLE, f"gang {gang}: {problem}"
    elif waiting:
        scheduled, reason, message = False, UNSCHEDULABLE, f"gang {gang}: {waiting}"
    else:
        return None
    want = condition(version, scheduled=scheduled, reason=reason, message=message,
                     generation=generation, at=now)
    found = next((c for c in current if c.get("type") == want["type"]), None)
    if found is not None and found.get("status") == want["status"] and (
            since := found.get("lastTransitionTime")):
        want["lastTransitionTime"] = since  # it changes only when the status does
    return want if to_write(current, want) else None
