"""A Pod, its policy mappings and the cluster snapshot -> a Slurm job description (pure).

The result is slurmrestd's ``job_desc_msg`` (data parser v0.0.42, served by Slurm 24.11 through
26.05). Policies decide the Slurm-side fields (``mappings``); this module adds what comes from
the Pod itself: resources, identity, placement exclusions and the placeholder script.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from sunk.plans import claims as claims_mod
from sunk.plans import fit, placement
from sunk.slurm.job import PodIdentity, admin_comment, job_extra, job_name

#: Mapping names (as policies produce them) copied as plain strings into the job.
_STRING_FIELDS = ("account", "partition", "qos", "comment", "constraints", "reservation",
                  "prefer", "current_working_directory")
_NUMBER_FIELDS = ("priority", "time_limit", "segment_size")
_LIST_FIELDS = ("excluded_nodes", "required_nodes")

#: The annotations a Pod's author may set under the prefix (the reference product's table).
POD_ANNOTATIONS = ("account", "comment", "constraints", "exclusive", "excluded-nodes",
                   "required-nodes", "partition", "prefer", "priority", "qos", "reservation",
                   "user-id", "group-id", "current-working-dir", "timeout", "segment", "gang",
                   "gang-size", "gang-index", "gang-shape")
#: What the scheduler and syncer write themselves (docs/security.md).
OWNED_ANNOTATIONS = ("job-id", "rejected", "pod-uid", "lock", "slurm-state", "slurm-reason",
                     "leader", "gang-rank", "gang-node")


class NotYet(LookupError):
    """What the Pod asks for may pass (a required node cordoned, not mapped yet): it waits."""


class NoRoom(NotYet):
    """No Node has room for the Pod now: it waits (room frees up as Pods end)."""


class InvalidPod(ValueError):
    """The Pod itself cannot be made a job (a request that is not a quantity, an annotation's
    mapping that is not what its field takes): refused, as ``InvalidPod``. Any other exception
    from translating is a fault of sunk's, not the Pod's, and is retried."""


class Unschedulable(ValueError):
    """The Pod can never be placed as it stands (the Pod must be changed): refused up front."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def unknown_annotations(annotations: Mapping[str, str],
                        prefix: str) -> list[tuple[str, str | None]]:
    """Keys under the prefix that sunk does not read (a misspelling, most often), each with
    the closest known key, if one is close."""
    known = POD_ANNOTATIONS + OWNED_ANNOTATIONS
    unknown = []
    for key in sorted(annotations):
        if not key.startswith(prefix) or key[len(prefix):] in known:
            continue
        close = difflib.get_close_matches(key[len(prefix):], POD_ANNOTATIONS, n=1, cutoff=0.75)
        unknown.append((key[:200], prefix + close[0] if close else None))
    return unknown


@dataclass(frozen=True)
class TranslateSettings:
    scheduler_name: str
    placeholder_script: str
    gpu_resource: str = "nvidia.com/gpu"
    gpu_model_label: str = "gpu.nvidia.com/model"
    gpu_types: Mapping[str, str] | None = None
    kill_wait_seconds: float = 30
    #: How ResourceClaims are told to Slurm (None: claims are not read; a Pod with one is
    #: refused).
    devices: claims_mod.DeviceMapping | None = None


def _gres(pod: Mapping[str, Any], gpus: int, snap: placement.Snapshot,
          settings: TranslateSettings) -> str:
    """``gres/gpu:TYPE:N`` when the Pod can only land on one GPU model we know a type for."""
    models = placement.gpu_models(pod, snap, settings.gpu_model_label)
    types = {(settings.gpu_types or {}).get(m) for m in models}
    if len(types) == 1 and None not in types:
        return f"gres/gpu:{types.pop()}:{gpus}"
    return f"gres/gpu:{gpus}"


def _whole_number(key: str, value: object) -> int:
    """A number field's value from the policies' mappings (an annotation's, checked there)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidPod(f"{key}: {value!r} is not a whole number")
    try:
        return int(value)
    except ValueError:
        raise InvalidPod(f"{key}: {value!r} is not a whole number") from None


def job_description(pod: Mapping[str, Any], mappings: Mapping[str, Any],
                    snap: placement.Snapshot, settings: TranslateSettings,
                    claims: claims_mod.ClaimsSeen | None = None) -> dict[str, Any]:
    """The placeholder job for ``pod``; ``claims``: what is known of ResourceClaims (None:
    not read yet)."""
    meta = pod["metadata"]
    who = PodIdentity(meta["namespace"], meta["name"], meta["uid"], settings.scheduler_name)
    try:
        requests = fit.pod_requests(pod)
    except ValueError as exc:
        raise InvalidPod(str(exc)) from exc
    job = _placeholder_job(who, requests, settings)
    gpus = requests.get(settings.gpu_resource, 0)
    short: set[str] = set()
    if claims_mod.uses_claims(pod):
        tres, short = _claimed_gpus(pod, claims, gpus, snap, settings)
        if tres:
            job["tres_per_node"] = tres
    elif gpus:
        job["tres_per_node"] = _gres(pod, gpus, snap, settings)
    job.update(_mapped_fields(mappings))
    excluded, required = _placement_nodes(pod, mappings, snap, short)
    if excluded:
        job["excluded_nodes"] = excluded
    if required:
        job["required_nodes"] = required
    return job


def _claimed_gpus(pod: Mapping[str, Any], claims: claims_mod.ClaimsSeen | None, gpus: int,
                  snap: placement.Snapshot, settings: TranslateSettings
                  ) -> tuple[str | None, set[str]]:
    """The GRES the Pod's claims (and ``gpus`` as an extended resource) ask for, and the Slurm
    nodes without that many devices free of claims Slurm does not know of."""
    asked = _claimed(pod, claims, settings)
    count = sum(r.count for r in asked)
    free = claims.free if claims is not None else {}
    short = {slurm for slurm, k8s in snap.slurm_to_k8s.items() if free.get(k8s, count) < count}
    gpu_type = _gres(pod, gpus, snap, settings).split(":")[1:-1] if gpus else []
    try:
        return claims_mod.gres(asked, gpus, gpu_type[0] if gpu_type else None), short
    except claims_mod.Unmappable as exc:
        raise Unschedulable(exc.reason, str(exc)) from None


def _claimed(pod: Mapping[str, Any], claims: claims_mod.ClaimsSeen | None,
             settings: TranslateSettings) -> tuple[claims_mod.ClaimRequest, ...]:
    """What the Pod's ResourceClaims ask Slurm for; refused (Unschedulable) or waiting (NotYet)
    as :func:`sunk.plans.claims.claim_requests` says."""
    if settings.devices is None:
        raise Unschedulable("UnmappableClaim", "the Pod asks for devices by ResourceClaim, and "
                                               "this scheduler does not read claims "
                                               "(scheduler.dra.enabled is false)")
    if claims is None:
        raise NotYet("ResourceClaims and ResourceSlices are not read yet")
    try:
        return claims_mod.claim_requests(pod, claims.by_name, settings.devices)
    except claims_mod.Unmappable as exc:
        raise Unschedulable(exc.reason, str(exc)) from None
    except claims_mod.NotReady as exc:
        raise NotYet(str(exc)) from None


def _placeholder_job(who: PodIdentity, requests: Mapping[str, int],
                     settings: TranslateSettings) -> dict[str, Any]:
    """The job as the Pod alone makes it: its name and marks, its CPUs and memory, the
    placeholder script and what that script is told; run as root until a mapping says who."""
    cpus = max(1, math.ceil(requests.get("cpu", 0) / 1000))  # millicores, rounded up
    memory_mib = max(1, math.ceil(requests.get("memory", 0) / 2**20))
    extra = job_extra(who)
    return {
        "name": job_name(who),
        "admin_comment": admin_comment(who),
        "script": f"#!/bin/sh\nexec {settings.placeholder_script}\n",
        "extra": extra,
        "nodes": "1",
        "tasks": 1,
        "cpus_per_task": cpus,
        "memory_per_node": {"set": True, "number": memory_mib},
        "current_working_directory": "/tmp",
        "environment": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            # The batch script does not see SLURM_JOB_EXTRA; it needs it to append ": started".
            f"SUNK_JOB_EXTRA={extra}",
            f"SUNK_POD_NAMESPACE={who.namespace}",
            f"SUNK_POD_NAME={who.name}",
            f"SUNK_POD_UID={who.uid}",
            f"SUNK_KILL_WAIT={int(settings.kill_wait_seconds)}",
        ],
        "user_id": "0",
        "group_id": "0",
    }


def _mapped_fields(mappings: Mapping[str, Any]) -> dict[str, Any]:
    """The job's fields the policies' mappings set (the node lists aside), as the job takes
    them; a mapping that is None or empty sets nothing."""
    fields: dict[str, Any] = {}
    for key in _STRING_FIELDS:
        if (value := mappings.get(key)) not in (None, ""):
            fields[key] = str(value)
    for key in _NUMBER_FIELDS:
        if (value := mappings.get(key)) is not None:
            fields[key] = {"set": True, "number": _whole_number(key, value)}
    if (shared := mappings.get("shared")) not in (None, ""):
        fields["shared"] = [str(shared)]
    if (uid := mappings.get("user_id")) not in (None, ""):
        fields["user_id"] = str(uid)
        fields["group_id"] = str(uid)  # a user id without a group id uses it as the group id
    if (gid := mappings.get("group_id")) not in (None, ""):
        fields["group_id"] = str(gid)
    return fields


def _known_nodes(snap: placement.Snapshot) -> frozenset[str]:
    """Slurm's nodes (those mapped to a Kubernetes Node, until Slurm's own list is read)."""
    return snap.slurm_nodes if snap.slurm_nodes is not None else frozenset(snap.slurm_to_k8s)


def _placement_nodes(pod: Mapping[str, Any], mappings: Mapping[str, Any],
                     snap: placement.Snapshot, short: AbstractSet[str] = frozenset()
                     ) -> tuple[list[str], list[str]]:
    """The job's excluded and required nodes: those the mappings name, the nodes the Pod
    cannot be placed on, and those ``short`` of devices its claims ask for. Raises NoRoom,
    NotYet or Unschedulable when no job can run now."""
    requested = {k: [str(n) for n in mappings.get(k) or []] for k in _LIST_FIELDS}
    by_placement = set(placement.excluded_slurm_nodes(pod, snap)) | short
    excluded = sorted(set(requested["excluded_nodes"]) | by_placement)
    known = _known_nodes(snap)
    if known and by_placement >= known:
        _wait_for_room(pod, snap, known)
        if short:
            raise NoRoom(f"no Node has the devices the Pod's claims ask for free of claims "
                         f"Slurm does not know of ({len(short)} short); waiting")
    _check_required(pod, snap, requested["required_nodes"], requested["excluded_nodes"],
                    excluded)
    return excluded, requested["required_nodes"]


def _wait_for_room(pod: Mapping[str, Any], snap: placement.Snapshot,
                   known: frozenset[str]) -> None:
    """Every node is excluded for the Pod: if some only lack room, raise NoRoom. Room frees up
    as Pods end: the Pod waits, rather than send a job no node can run."""
    full = {n: why for n in sorted(known)
            if (why := placement.why_excluded(pod, snap, n)).startswith(placement.NO_ROOM)}
    if full:
        said = "; ".join(f"{n}: {why}" for n, why in list(full.items())[:3])
        raise NoRoom(f"no Node has room for the Pod now ({said}"
                          + (f"; and {len(full) - 3} more" if len(full) > 3 else "")
                          + "); waiting")


def _check_required(pod: Mapping[str, Any], snap: placement.Snapshot, required: list[str],
                    asked_excluded: list[str], excluded: list[str]) -> None:
    """A required node that is also excluded: NotYet if each such node may yet become usable,
    else Unschedulable (Slurm would refuse the job)."""
    if not (conflict := sorted(set(required) & set(excluded))):
        return
    reasons = {n: ("in excluded-nodes" if n in asked_excluded
                   else placement.why_excluded(pod, snap, n)) for n in conflict}
    said = "; ".join(f"{n}: {why}" for n, why in reasons.items())
    if all(placement.passes(why) for why in reasons.values()):
        raise NotYet(f"required node(s) not usable yet ({said}); waiting")
    raise Unschedulable("PlacementConflict",
                        f"required node(s) excluded ({said}): Slurm would refuse the job "
                        "('Invalid node name specified'); change the Pod")


def _gpus(tres: str | None) -> int:
    return int(tres.rsplit(":", 1)[1]) if tres else 0


def gang_job_description(members: list[dict[str, Any]], gang: PodIdentity,
                         snap: placement.Snapshot) -> dict[str, Any]:
    """One job for a gang: its members' jobs (rank order, from :func:`job_description`) made
    one, with a node per member and one task per node. Each node gets what the largest
    member asks; the Slurm-side fields (account, partition, ...) are rank 0's; the nodes a
    member cannot use are left out for all."""
    count = len(members)
    job = dict(members[0])
    extra = job_extra(gang)
    job.update(name=job_name(gang), admin_comment=admin_comment(gang), extra=extra,
               nodes=str(count), minimum_nodes=count, maximum_nodes=count, tasks=count,
               cpus_per_task=max(m["cpus_per_task"] for m in members),
               memory_per_node={"set": True, "number": max(
                   m["memory_per_node"]["number"] for m in members)})
    job["environment"] = [
        *(line for line in job["environment"] if not line.startswith(
            ("SUNK_JOB_EXTRA=", "SUNK_POD_NAMESPACE=", "SUNK_POD_NAME=", "SUNK_POD_UID="))),
        f"SUNK_JOB_EXTRA={extra}", f"SUNK_POD_NAMESPACE={gang.namespace}",
        f"SUNK_POD_NAME={gang.name}", f"SUNK_POD_UID={gang.uid}"]
    tres = sorted({m["tres_per_node"] for m in members if m.get("tres_per_node")},
                  key=_gpus)
    if tres:
        most = _gpus(tres[-1])
        typed = {t.rsplit(":", 1)[0] for t in tres}
        job["tres_per_node"] = tres[-1] if len(typed) == 1 else f"gres/gpu:{most}"
    excluded = sorted({n for m in members for n in m.get("excluded_nodes") or ()})
    required = sorted({n for m in members for n in m.get("required_nodes") or ()})
    job.pop("excluded_nodes", None)
    job.pop("required_nodes", None)
    if conflict := set(required) & set(excluded):
        raise Unschedulable("PlacementConflict",
                            f"one member requires node(s) {', '.join(sorted(conflict))} that "
                            "another member cannot use")
    check_gang_size(count, snap)
    known = _known_nodes(snap)
    usable = set(known) - set(excluded)
    if known and len(usable) < count:
        raise NoRoom(f"the gang needs {count} nodes; only {len(usable)} can take every member "
                     "now; waiting")
    if excluded:
        job["excluded_nodes"] = excluded
    if required:
        job["required_nodes"] = required
    return job


def check_gang_size(count: int, snap: placement.Snapshot) -> None:
    """Raise Unschedulable if Slurm has fewer nodes than a gang of ``count`` needs (one each)."""
    known = _known_nodes(snap)
    if known and len(known) < count:
        raise Unschedulable("GangTooLarge", f"the gang needs {count} nodes; Slurm has "
                                            f"{len(known)}")
