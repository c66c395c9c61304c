"""Gangs: which Pods belong together, how many there must be, and each one's rank (pure).

A gang is a group of Pods that becomes one multi-node Slurm job, all or nothing
(docs/gangs.md). Six sources say a Pod belongs to one, checked in this order:

- sunk's own label ``<prefix>gang`` (its value names the gang), with the annotation
  ``<prefix>gang-size`` and, optionally, ``<prefix>gang-index`` (the rank);
- Kubernetes' own PodGroup (``spec.schedulingGroup.podGroupName``, :mod:`sunk.plans.workload`)
  with a gang policy: size its ``minCount``, rank the completion index of the Job that made it
  (a basic policy asks for no gang: the sources below still apply, so a Pod of a bare basic
  PodGroup runs alone);
- a scheduler-plugins PodGroup (label ``scheduling.x-k8s.io/pod-group``; size ``minMember``);
- a LeaderWorkerSet group (label ``leaderworkerset.sigs.k8s.io/group-key``; size and rank from
  the LWS controller's annotation and labels; the leader is rank 0);
- a JobSet (label ``jobset.sigs.k8s.io/jobset-name``, :mod:`sunk.plans.jobset`) that runs all
  at once: every Pod of every replicated job, ranked in the JobSet's order;
- a batch Job whose ``parallelism`` equals its ``completions`` (more than one), rank from the
  completion index when it is Indexed.

Each gets a name with a ``:`` in it (``label:train``, ``job:train``, ...), which no Pod name has,
so the gang's queue key and its job's ``extra`` can never be taken for a Pod's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sunk import objects
from sunk.plans import jobset, workload
from sunk.slurm.job import member_id

PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: The API of scheduler-plugins' PodGroups.
PODGROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
#: The annotations and label of sunk's own source, under the annotation prefix.
GANG_LABEL, SIZE_ANNOTATION, INDEX_ANNOTATION = "gang", "gang-size", "gang-index"
#: What the scheduler writes on each member before binding it: its rank and its Slurm node.
RANK_ANNOTATION, NODE_ANNOTATION = "gang-rank", "gang-node"
#: Phases after which a Pod holds nothing.
TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Claim:
    """What one Pod says of its gang: the gang's name, its size and the Pod's rank, as
    written (checked when the gang is assembled). ``waiting``: what the size depends on is not
    known yet (the Job or PodGroup has not been seen)."""

    name: str
    size: str | None
    rank: str | None = None
    waiting: str = ""


@dataclass(frozen=True)
class Owners:
    """The objects a Pod's gang size may come from, looked up by namespace and name."""

    #: (namespace, name) -> (parallelism, completions) of a batch Job.
    job: Callable[[str, str], tuple[int | None, int | None] | None]
    #: (namespace, name) -> a PodGroup's ``minMember``.
    podgroup: Callable[[str, str], int | None]
    #: Whether PodGroups can be known at all (their CRD is installed and watched).
    podgroups_known: bool = True
    #: (namespace, name) -> the policy of a ``scheduling.k8s.io`` PodGroup.
    workload: Callable[[str, str], workload.Policy | None] = lambda namespace, name: None
    #: Whether those can be known (the API server serves them and they are watched).
    workloads_known: bool = False
    #: (namespace, name) -> a JobSet's shape.
    jobset: Callable[[str, str], jobset.Shape | None] = lambda namespace, name: None
    #: Whether JobSets can be known (their CRD is installed and watched).
    jobsets_known: bool = False


def _job_owner(pod: Mapping[str, Any]) -> str | None:
    """The controlling batch Job's name. Read from the dict, not :mod:`sunk.objects`: an odd
    owner reference (not an object) is skipped here, where the typed Pod is all defaults."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if (isinstance(ref, Mapping) and ref.get("kind") == "Job" and ref.get("controller")
                and str(ref.get("apiVersion", "")).startswith("batch/")):
            return str(ref.get("name", ""))
    return None


#: Nothing known of any Job, PodGroup or JobSet.
UNKNOWN = Owners(job=lambda namespace, name: None, podgroup=lambda namespace, name: None)


def gang_name(pod: Mapping[str, Any], prefix: str, owners: Owners = UNKNOWN) -> str | None:
    """The name of the gang ``pod`` may belong to, from its labels, owner, Kubernetes
    PodGroup and JobSet (a Job's Pods are a gang only if the Job runs them all at once:
    :func:`claim` says). ``owners``: what is known of those now."""
    return _gang_name(pod, objects.pod(pod), prefix, owners)


def _gang_name(pod: Mapping[str, Any], typed: objects.Pod, prefix: str,
               owners: Owners) -> str | None:
    meta = typed.metadata
    labels = meta.labels
    if (name := labels.get(prefix + GANG_LABEL)) is not None:
        return f"label:{name}"
    if kubernetes_group := typed.spec.scheduling_group.pod_group_name:
        # a basic policy asks for no gang: the sources below may still make one (a Job that
        # runs all at once stays a gang when the Job controller gives it a basic PodGroup)
        known = owners.workload(meta.namespace, kubernetes_group)
        if known is None or known.gang:
            return f"workload:{kubernetes_group}"
    if (group := labels.get(PODGROUP_LABEL)) is not None:
        return f"podgroup:{group}"
    if (key := labels.get(LWS_GROUP_KEY)) is not None:
        lws, index = labels.get(LWS_NAME), labels.get(LWS_GROUP_INDEX)
        return f"lws:{lws}-{index}" if lws and index is not None else f"lws:{key}"
    if (set_name := labels.get(jobset.NAME_LABEL)) is not None:
        # not all at once: its Jobs' Pods are scheduled as their Jobs say
        shape = owners.jobset(meta.namespace, set_name)
        if shape is None or not shape.not_a_gang:
            return f"jobset:{set_name}"
    if (job := _job_owner(pod)) is not None:
        return f"job:{job}"
    return None


def claim(pod: Mapping[str, Any], prefix: str, owners: Owners) -> Claim | None:
    """The gang ``pod`` belongs to, or None if it is scheduled alone."""
    typed = objects.pod(pod)
    meta = typed.metadata
    name = _gang_name(pod, typed, prefix, owners)
    if name is None:
        return None
    labels, annotations, namespace = meta.labels, meta.annotations, meta.namespace
    source, _, ref = name.partition(":")
    if source == "label":
        return Claim(name, annotations.get(prefix + SIZE_ANNOTATION),
                     annotations.get(prefix + INDEX_ANNOTATION))
    if source == "podgroup":
        group = ref
        size = owners.podgroup(namespace, group)
        waiting = "" if size is not None else (
            f"PodGroup {group} not found" if owners.podgroups_known
            else "PodGroups are not watched (their CRD is not installed)")
        return Claim(name, None if size is None else str(size), waiting=waiting)
    if source == "workload":
        return _workload_claim(name, ref, owners.workload(namespace, ref),
                               owners.workloads_known, labels.get(JOB_INDEX))
    if source == "lws":
        return Claim(name, annotations.get(LWS_SIZE), labels.get(LWS_WORKER_INDEX))
    if source == "jobset":
        return _jobset_claim(name, ref, owners.jobset(namespace, ref), owners.jobsets_known,
                             labels)
    shape = owners.job(namespace, ref)
    if shape is None:
        return Claim(name, None, waiting=f"Job {ref} not seen yet")
    parallelism, completions = shape
    if parallelism is None or parallelism != completions or parallelism < 2:
        return None  # not all at once: each Pod is scheduled alone
    return Claim(name, str(parallelism), labels.get(JOB_INDEX))


def _workload_claim(name: str, group: str, policy: workload.Policy | None, known: bool,
                    rank: str | None) -> Claim | None:
    """A member of the ``scheduling.k8s.io`` PodGroup ``group`` (None: a basic policy, each
    Pod alone)."""
    if policy is None:
        return Claim(name, None, waiting=(
            f"PodGroup {group} ({workload.GROUP}) not found" if known
            else f"the API server serves no PodGroups of {workload.GROUP}, or they are not "
                 "watched"))
    if not policy.gang:
        return None
    return Claim(name, None if policy.min_count is None else str(policy.min_count), rank)


def _jobset_claim(name: str, set_name: str, shape: jobset.Shape | None, known: bool,
                  labels: Mapping[str, str]) -> Claim:
    """A member of the JobSet ``set_name``, ranked in the JobSet's order."""
    if shape is None:
        return Claim(name, None, waiting=f"JobSet {set_name} not seen yet" if known
                     else "JobSets are not watched (their CRD is not installed)")
    role, job_index = labels.get(jobset.REPLICATED_JOB_LABEL, ""), labels.get(
        jobset.JOB_INDEX_LABEL)
    completion = labels.get(JOB_INDEX)
    if completion is None and shape.pods_of(role) == 1:
        completion = "0"  # a Job of one Pod need not be Indexed
    rank = None
    if shape.indexed and job_index is not None and job_index.isdigit() and (
            completion and completion.isdigit()):
        rank = shape.rank(role, int(job_index), int(completion))
    return Claim(name, str(shape.size), None if rank is None else str(rank))


def gang_id(namespace: str, name: str) -> str:
    """The gang's id in its jobs (``uid=`` in ``extra``): stable for its name."""
    return hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Member:
    key: str
    uid: str
    rank: int

    @property
    def id(self) -> str:
        return member_id(self.uid)


@dataclass(frozen=True)
class Gang:
    """A gang as its live Pods make it up. ``problem``: why it can never be scheduled as it
    stands (told on every member; fixed by changing the Pods); ``waiting``: what it waits for
    that is not a missing member (its Job or PodGroup)."""

    namespace: str
    name: str
    size: int | None
    #: In rank order once complete; in name order before.
    members: tuple[Member, ...]
    problem: str = ""
    waiting: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def id(self) -> str:
        return gang_id(self.namespace, self.name)

    @property
    def complete(self) -> bool:
        return not self.problem and not self.waiting and len(self.members) == self.size


def _number(text: str | None) -> int | None:
    """A non-negative integer as written in an annotation (ASCII digits only), else None."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None


def assemble(namespace: str, name: str, pods: Iterable[tuple[Mapping[str, Any], Claim]], *,
             max_size: int) -> Gang:
    """The gang from its live Pods (not terminal, not being deleted) and their claims."""
    found = sorted(((objects.pod(p).metadata, c) for p, c in pods), key=lambda mc: mc[0].name)
    claims = [c for _, c in found]
    plain = tuple(Member(f"{namespace}/{meta.name}", meta.uid, i)
                  for i, (meta, _) in enumerate(found))

    def gang(size: int | None, members: tuple[Member, ...] = plain, problem: str = "",
             waiting: str = "") -> Gang:
        return Gang(namespace, name, size, members, problem, waiting)

    if waiting := next((c.waiting for c in claims if c.waiting), ""):
        return gang(None, waiting=waiting)
    written = sorted({c.size for c in claims if c.size is not None})
    if not written:
        return gang(None, problem="no member gives the gang's size")
    if len(written) > 1:
        return gang(None, problem="members disagree on the gang's size: "
                                  + ", ".join(repr(s[:20]) for s in written))
    size = _number(written[0])
    if size is None or not 1 <= size <= max_size:
        return gang(None, problem=f"gang size {written[0][:20]!r} is not a whole number from "
                                  f"1 to {max_size}")
    if len(found) > size:
        return gang(size, problem=f"{len(found)} Pods claim a gang of {size}: a gang's job "
                                  "has a fixed number of nodes; remove the extra Pods")
    if any(c.size is None for c in claims):
        return gang(size, problem="some members do not give the gang's size")
    hints = [c.rank for c in claims]
    if all(h is None for h in hints):
        return gang(size)
    ranks = [_number(h) for h in hints]
    if any(r is None for r in ranks):
        return gang(size, problem="members' ranks are not all whole numbers: "
                                  + ", ".join(repr((h or "")[:12]) for h in hints))
    if len(set(ranks)) != len(ranks) or any(r is not None and r >= size for r in ranks):
        return gang(size, problem=f"members' ranks are not distinct numbers from 0 to "
                                  f"{size - 1}: {sorted(r for r in ranks if r is not None)}")
    members = sorted((Member(m.key, m.uid, r) for m, r in zip(plain, ranks, strict=True)
                      if r is not None), key=lambda m: m.rank)
    return gang(size, tuple(members))
