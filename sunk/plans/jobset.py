"""A JobSet as one gang: its size and each Pod's rank (pure).

A JobSet (``jobset.x-k8s.io``) runs several replicated Jobs together: a driver and its workers,
or several roles of one training run. All its Pods are one gang, ranked in the JobSet's own
order: replicated job by replicated job as the spec lists them, then by the Job's index within
its replicated job, then by the Pod's completion index. A JobSet is a gang only when all of it
runs at once: each Job runs all its Pods together (``parallelism`` equal to ``completions``)
and no replicated job waits for another (``dependsOn``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

VERSION: Final = "jobset.x-k8s.io/v1alpha2"
NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"


@dataclass(frozen=True)
class Role:
    """One replicated job: ``replicas`` Jobs of ``pods`` Pods each."""

    name: str
    replicas: int
    pods: int


@dataclass(frozen=True)
class Shape:
    """What a JobSet's spec says of its Pods; ``not_a_gang``: why they are not one gang."""

    roles: tuple[Role, ...]
    not_a_gang: str = ""

    @property
    def size(self) -> int:
        return sum(role.replicas * role.pods for role in self.roles)

    def rank(self, role: str, job_index: int, completion_index: int) -> int | None:
        """The rank of a Pod of ``role``'s Job ``job_index``; None if it has no such place."""
        offset = 0
        for known in self.roles:
            if known.name == role:
                if not (0 <= job_index < known.replicas and 0 <= completion_index < known.pods):
                    return None
                return offset + job_index * known.pods + completion_index
            offset += known.replicas * known.pods
        return None


def _count(value: Any, default: int | None) -> int | None:
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def shape(jobset: Mapping[str, Any]) -> Shape:
    """The shape of a JobSet as its spec states it (the API server has defaulted it)."""
    spec = jobset.get("spec")
    replicated = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    if not isinstance(replicated, list) or not replicated:
        return Shape((), not_a_gang="it lists no replicated jobs")
    roles: list[Role] = []
    for entry in replicated:
        if not isinstance(entry, Mapping):
            return Shape((), not_a_gang="a replicated job is not an object")
        name = str(entry.get("name") or "")
        if entry.get("dependsOn"):
            return Shape((), not_a_gang=f"replicated job {name} waits for another (dependsOn)")
        template = entry.get("template")
        job_spec = template.get("spec") if isinstance(template, Mapping) else None
        job_spec = job_spec if isinstance(job_spec, Mapping) else {}
        parallelism = _count(job_spec.get("parallelism"), 1)
        completions = _count(job_spec.get("completions"),
                             1 if job_spec.get("parallelism") is None else None)
        replicas = _count(entry.get("replicas"), 1)
        if parallelism is None or parallelism < 1 or completions != parallelism:
            return Shape((), not_a_gang=f"replicated job {name} does not run its Pods all at "
                                        "once (parallelism differs from completions)")
        if replicas is None or replicas < 0:
            return Shape((), not_a_gang=f"replicated job {name} has no valid replicas")
        roles.append(Role(name, replicas, parallelism))
    return Shape(tuple(roles))
