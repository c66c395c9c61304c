"""A gang whose members differ in shape, as one heterogeneous Slurm job (pure).

A Slurm heterogeneous job is one job of several components, each with its own nodes and
resources; its components start together (all or nothing) and end together. A gang whose
members ask for different things (a LeaderWorkerSet's leader and its workers, a JobSet's CPU
driver and GPU workers) becomes one such job, a component per distinct shape, each sized
exactly: no GPU node is taken for a member that asks for none. Members of one shape are one
component; rank r runs on the next node of its component (the job's ``extra`` lists each
member's component, so a restarted scheduler maps them the same way).

What Slurm does not do for a heterogeneous job, sunk does not promise: it places each
component on its own (a ``segment`` cannot span components), on nodes of its own. The
annotation ``<prefix>gang-shape`` says what the gang's owner accepts then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sunk.plans import placement
from sunk.plans.translate import Unschedulable, check_gang_size, gang_job_description
from sunk.slurm.job import PodIdentity

#: The annotation (under the prefix) choosing how a gang whose members differ is run.
SHAPE_ANNOTATION = "gang-shape"
#: A component per distinct shape; refused where Slurm cannot (the default).
EXACT = "exact"
#: One shape for every member, the largest member's (every node gets what it asks for).
LARGEST = "largest"
#: A component per shape where Slurm can; the largest shape where it cannot (told in an Event).
EXACT_OR_LARGEST = "exact-or-largest"
SHAPES = (EXACT, LARGEST, EXACT_OR_LARGEST)
#: Slurm's most components of one heterogeneous job (``MAX_HET_JOB_COMPONENTS``).
MAX_COMPONENTS = 128

#: What makes a member's shape: what each of its nodes is given, and where it may run.
_SHAPE_FIELDS = ("cpus_per_task", "memory_per_node", "tres_per_node", "partition", "account",
                 "qos", "reservation", "constraints", "prefer", "shared")
#: What one job has once: rank 0's, on every component.
_JOB_FIELDS = ("time_limit", "priority", "user_id", "group_id", "comment",
               "current_working_directory")


def shape_of(annotations: Sequence[str | None]) -> str:
    """The gang's choice from its members' ``gang-shape`` annotations (already checked by the
    policies): the most lenient any member gives; ``exact`` when none gives one."""
    given = set(annotations)
    return next((s for s in (LARGEST, EXACT_OR_LARGEST) if s in given), EXACT)


def _shape(description: dict[str, Any]) -> tuple[str, ...]:
    return tuple(repr(description.get(f)) for f in _SHAPE_FIELDS)


def parts(descriptions: Sequence[dict[str, Any]]) -> tuple[int, ...]:
    """Each member's component, in rank order: components numbered as their first member
    comes (rank 0's is 0)."""
    numbered: dict[tuple[str, ...], int] = {}
    return tuple(numbered.setdefault(_shape(d), len(numbered)) for d in descriptions)


def why_not(descriptions: Sequence[dict[str, Any]], split: Sequence[int]) -> str | None:
    """Why Slurm cannot run these members as one heterogeneous job (None: it can)."""
    if (count := max(split) + 1) > MAX_COMPONENTS:
        return (f"they make {count} components and Slurm takes at most {MAX_COMPONENTS} in "
                "one heterogeneous job")
    if any(d.get("segment_size") for d in descriptions):
        return ("a segment keeps a job's nodes together, and Slurm places each component of a "
                "heterogeneous job on its own")
    return None


@dataclasses.dataclass(frozen=True)
class GangJobs:
    """The gang's job: one description, or a heterogeneous job's components (leader first)."""

    jobs: tuple[dict[str, Any], ...]
    #: Whose it is (with each member's component, for a heterogeneous job).
    who: PodIdentity
    #: Why the members' shapes were not kept ("" when they were, or were all one).
    fallback: str = ""


def gang_jobs(members: list[dict[str, Any]], gang: PodIdentity, snap: placement.Snapshot,
              shape: str = EXACT) -> GangJobs:
    """The gang's job from its members' descriptions (rank order): one job when the members
    are all of one shape or ``shape`` is ``largest``; else a component per shape
    (:func:`gang_job_description` of its members), Slurm-wide fields rank 0's. Raises
    Unschedulable (or NoRoom, NotYet) as :func:`gang_job_description` does, and
    ``HeterogeneousUnsupported`` where Slurm cannot keep the shapes and ``shape`` is
    ``exact``."""
    split = parts(members)
    if max(split) == 0 or shape == LARGEST:
        return GangJobs((gang_job_description(members, gang, snap),), gang)
    if (why := why_not(members, split)) is not None:
        if shape == EXACT:
            raise Unschedulable(
                "HeterogeneousUnsupported",
                f"the members differ in what they ask for ({max(split) + 1} shapes), but {why}; "
                f"annotate them {SHAPE_ANNOTATION}: {EXACT_OR_LARGEST} (or {LARGEST}) to run "
                "every member with the largest member's shape")
        return GangJobs((gang_job_description(members, gang, snap),), gang,
                        f"members differ in what they ask for, but {why}: every node is given "
                        "what the largest member asks for")
    check_gang_size(len(members), snap)
    who = dataclasses.replace(gang, parts=split)
    jobs = []
    for component in range(max(split) + 1):
        job = gang_job_description([m for m, p in zip(members, split, strict=True)
                                    if p == component], who, snap)
        for key in _JOB_FIELDS:
            if key in members[0]:
                job[key] = members[0][key]
            else:
                job.pop(key, None)
        if component:
            job.pop("script", None)  # Slurm runs the first component's script only
        jobs.append(job)
    return GangJobs(tuple(jobs), who)


def ranked_nodes(components: Sequence[Sequence[str]], split: Sequence[int],
                 node_order: Mapping[str, int] | None = None) -> tuple[str, ...]:
    """Each member's node, in rank order: rank r on the next node of its component (``()``
    while Slurm's node lists do not match the members).

    A component's nodes are taken in the order of Slurm's node table (``node_order``: each
    node's place in ``GET /nodes/``'s listing), the order its tasks are numbered in. Slurm
    prints a running job's nodes in that order but rewrites them sorted by name once it ends
    (``a100-[005,007],h100-006``): read as printed, an ended gang's ranks would move to other
    nodes. A node the table does not list keeps its printed place, after those it lists."""
    if order := node_order:
        components = [sorted(nodes, key=lambda n: (n not in order, order.get(n, 0)))
                      for nodes in components]
    if not split:
        return tuple(node for nodes in components for node in nodes)
    left = [list(reversed(nodes)) for nodes in components]
    if len(left) != max(split) + 1 or [len(n) for n in left] != [
            split.count(c) for c in range(len(left))]:
        return ()
    return tuple(left[c].pop() for c in split)
