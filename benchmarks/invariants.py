"""What must always hold between Kubernetes and Slurm, checked on one look at both (pure).

A look is plain data: the Pods of the soak's namespace, every Slurm job whose ``extra`` names a
Pod, and which Kubernetes Node hosts each Slurm node. :func:`violations` says, in words, what
does not hold in that look; :class:`Tracker` keeps the first time each one was seen and reports
those that last longer than their grace (a Pod deleted a moment ago, a job ending now: the two
sides are allowed a moment to agree, never for long).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Slurm job states in which a job holds its node.
ACTIVE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "PENDING"})


@dataclass(frozen=True)
class PodLook:
    name: str
    uid: str
    node: str = ""
    deleting: bool = False


@dataclass(frozen=True)
class JobLook:
    job_id: int
    state: str
    #: The uid of the Pod the job's ``extra`` names ("" if none).
    uid: str
    #: The Slurm nodes it runs on ("" while pending).
    nodes: str = ""
    #: Whether its state has the COMPLETING flag (it still holds its node).
    completing: bool = False


@dataclass(frozen=True)
class Violation:
    """One thing that does not hold: which invariant, of what, and what was seen."""

    invariant: str
    subject: str
    seen: str


#: Each invariant, in words (the report states them), and how long it may fail before it counts.
INVARIANTS: dict[str, tuple[str, float]] = {
    "bound-pod-has-one-job": (
        "every Pod bound by sunk has exactly one active Slurm job that names it, running on "
        "the Slurm node its Kubernetes Node hosts", 45.0),
    "no-job-without-pod": (
        "no active placeholder job runs without its Pod for longer than KillWait plus a margin",
        0.0),  # its grace is KillWait + margin, given to the Tracker
}


def violations(pods: Iterable[PodLook], jobs: Iterable[JobLook],
               host_of: Mapping[str, str]) -> list[Violation]:
    """What does not hold in one look. ``host_of``: Slurm node -> Kubernetes Node."""
    pods, jobs = list(pods), list(jobs)
    active: dict[str, list[JobLook]] = {}
    for job in jobs:
        if job.uid and (job.state in ACTIVE or job.completing):
            active.setdefault(job.uid, []).append(job)
    found: list[Violation] = []
    for pod in pods:
        if not pod.node or pod.deleting:
            continue
        running = [j for j in active.get(pod.uid, []) if j.state == "RUNNING"]
        if len(running) != 1 or host_of.get(running[0].nodes) != pod.node:
            seen = ", ".join(f"job {j.job_id} {j.state} on {j.nodes or '-'}"
                             for j in active.get(pod.uid, [])) or "no active job"
            found.append(Violation("bound-pod-has-one-job", pod.name,
                                   f"bound to {pod.node}; {seen}"))
    alive = {pod.uid for pod in pods}
    for uid, held in sorted(active.items()):
        if uid not in alive:
            for job in held:
                if job.state != "PENDING":
                    found.append(Violation("no-job-without-pod", f"job {job.job_id}",
                                           f"{job.state} on {job.nodes}; its Pod is gone"))
    return found


@dataclass
class Tracker:
    """The violations seen, kept from the first look that showed each until a look without it;
    one that lasts past its grace is reported once, with when it began and what was seen."""

    graces: Mapping[str, float]
    _since: dict[tuple[str, str], tuple[float, Violation]] = field(default_factory=dict)
    reported: list[dict[str, object]] = field(default_factory=list)
    _told: set[tuple[str, str]] = field(default_factory=set)

    def look(self, now: float, seen: Iterable[Violation]) -> list[dict[str, object]]:
        """Record one look at ``now`` (seconds); returns the violations that just became
        reportable."""
        current = {(v.invariant, v.subject): v for v in seen}
        for key in list(self._since):
            if key not in current:
                del self._since[key]
                self._told.discard(key)
        new = []
        for key, violation in current.items():
            began, _ = self._since.setdefault(key, (now, violation))
            if now - began >= self.graces[violation.invariant] and key not in self._told:
                self._told.add(key)
                entry = {"invariant": violation.invariant, "subject": violation.subject,
                         "since": round(began, 1), "lasted": round(now - began, 1),
                         "seen": violation.seen}
                self.reported.append(entry)
                new.append(entry)
        return new

    def lasting(self, now: float) -> list[dict[str, object]]:
        """The violations still seen, with how long (for the end of a run)."""
        return [{"invariant": v.invariant, "subject": v.subject, "since": round(began, 1),
                 "lasted": round(now - began, 1), "seen": v.seen}
                for began, v in self._since.values()]
