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
    #: Whether every Pod has a completion index (a Job of several Pods that is not Indexed
    #: has none): without, the gang's Pods are ranked in name order.
    indexed: bool = True

    @property
    def size(self) -> int:
        return sum(role.replicas * role.pods for role in self.roles)

    def pods_of(self, role: str) -> int | None:
        return next((known.pods for known in self.roles if known.name == role), None)

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


def shape(jobset: Mapping[str, Any], scheduler_name: str | None = None) -> Shape:
    """The shape of a JobSet as its spec states it (the API server has defaulted it);
    ``scheduler_name``: every Pod of a gang must name this scheduler."""
    spec = jobset.get("spec")
    replicated = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    if not isinstance(replicated, list) or not replicated:
        return Shape((), not_a_gang="it lists no replicated jobs")
    startup = spec.get("startupPolicy") if isinstance(spec, Mapping) else None
    if isinstance(startup, Mapping) and startup.get("startupPolicyOrder") == "InOrder":
        return Shape((), not_a_gang="its replicated jobs start in order (startupPolicy InOrder)")
    roles: list[Role] = []
    indexed = True
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
        pod_template = job_spec.get("template")
        pod_spec = pod_template.get("spec") if isinstance(pod_template, Mapping) else None
        named = pod_spec.get("schedulerName") if isinstance(pod_spec, Mapping) else None
        if scheduler_name is not None and named != scheduler_name:
            return Shape((), not_a_gang=f"replicated job {name}'s Pods name another scheduler")
        if parallelism is None or parallelism < 1 or completions != parallelism:
            return Shape((), not_a_gang=f"replicated job {name} does not run its Pods all at "
                                        "once (parallelism differs from completions)")
        if replicas is None or replicas < 0:
            return Shape((), not_a_gang=f"replicated job {name} has no valid replicas")
        roles.append(Role(name, replicas, parallelism))
        if parallelism > 1 and job_spec.get("completionMode", "Indexed") != "Indexed":
            indexed = False
    return Shape(tuple(roles), indexed=indexed)


def trim(jobset: dict[str, Any]) -> dict[str, Any]:
    """What the JobSet cache keeps of a JobSet: its metadata and what :func:`shape` reads (its
    Pod templates and status stay out: a large JobSet's are most of it)."""
    meta = jobset.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    spec = jobset.get("spec")
    if not isinstance(spec, dict):
        return {"metadata": meta}
    kept_jobs = []
    for entry in spec.get("replicatedJobs") or ():
        if not isinstance(entry, dict):
            kept_jobs.append(entry)
            continue
        template = entry.get("template")
        job_spec = template.get("spec") if isinstance(template, dict) else None
        if isinstance(job_spec, dict):
            pod_template = job_spec.get("template")
            pod_spec = pod_template.get("spec") if isinstance(pod_template, dict) else None
            named = pod_spec.get("schedulerName") if isinstance(pod_spec, dict) else None
            job_spec = {k: job_spec[k] for k in ("parallelism", "completions", "completionMode")
                        if k in job_spec} | {"template": {"spec": {"schedulerName": named}}}
        kept_jobs.append({k: entry[k] for k in ("name", "replicas", "dependsOn") if k in entry}
                         | {"template": {"spec": job_spec}})
    kept = {k: spec[k] for k in ("startupPolicy",) if k in spec}
    return {"metadata": meta, "spec": kept | {"replicatedJobs": kept_jobs}}
