"""What must always hold between Kubernetes and Slurm, checked on one look at both (pure).

A look is plain data (:class:`Look`): the Pods of the soak's namespace (and, for the Nodes'
room, every other Pod bound to a Node), every Slurm job whose ``extra`` names a Pod or a gang of
the soak's, which Kubernetes Node hosts each Slurm node, the Nodes with their Slurm side, and the
soak's ResourceClaims. :func:`check` says, in words, what does not hold in that look;
:class:`Tracker` keeps the first time each one was seen and reports those that last longer than
their grace (a Pod deleted a moment ago, a job ending now: the two sides are allowed a moment
to agree, never for long). The invariants of Pods and jobs are here, those of Nodes and GPUs in
:mod:`benchmarks.nodeinvariants`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: Slurm job states in which a job holds its node.
ACTIVE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "PENDING"})
#: How long a Pod of the soak may wait with nothing on it saying why.
WAIT_UNEXPLAINED = 60.0
#: sunk's gang bind timeout (``scheduler.gangs.bindTimeout``), and what is added to it.
GANG_BIND_TIMEOUT, GANG_MARGIN = 60.0, 30.0
#: How late Slurm may resend a kill its slurmd never got (it was down): slurmctld sends each
#: kill once, and resends it to a job still completing once KillWait plus twice MessageTimeout
#: (10 s) have passed, on its pass over old jobs every 60 s (``_list_find_job_old``).
SLURM_KILL_RESEND = 2 * 10.0 + 60.0


@dataclass(frozen=True)
class PodLook:
    name: str
    uid: str
    node: str = ""
    deleting: bool = False
    #: The gang it belongs to (sunk's gang label; "" if none) and the gang's size.
    gang: str = ""
    gang_size: int = 0
    #: Its requests (millicores, bytes) while it holds room (not Succeeded or Failed).
    cpu_m: int = 0
    memory: int = 0
    #: The message of its PodScheduled=False condition ("" if none).
    waiting_says: str = ""
    #: Its phase is Succeeded or Failed: it holds no room and needs no job.
    ended: bool = False


@dataclass(frozen=True)
class JobLook:
    job_id: int
    state: str
    #: The uid of the Pod (or gang) the job's ``extra`` names ("" if none).
    uid: str
    #: The Slurm nodes it runs on ("" while pending), as Slurm writes them (a host list).
    nodes: str = ""
    #: Whether its state has the COMPLETING flag (it still holds its node).
    completing: bool = False
    #: A gang's job: its members' ids (the first 12 hex digits of each Pod's uid).
    members: tuple[str, ...] = ()
    #: The Slurm nodes it runs on, one by one (a gang's job runs on several).
    node_list: tuple[str, ...] = ()
    #: The GPUs it holds: (Slurm node, GPU index).
    gpus: frozenset[tuple[str, int]] = frozenset()
    #: Its heterogeneous job's id (each component is a job record of its own); 0 if none.
    het_job_id: int = 0

    def on(self) -> tuple[str, ...]:
        return self.node_list or ((self.nodes,) if self.nodes else ())


@dataclass(frozen=True)
class NodeLook:
    """A Kubernetes Node and the Slurm node it hosts."""

    name: str
    slurm_name: str = ""
    cpu_m: int = 0
    memory: int = 0
    cordoned: bool = False
    #: Whether it carries sunk's lock taint, and the lock state on its slurmd Pod.
    tainted: bool = False
    lock: str = "false"
    #: Slurm's node state flags (IDLE, ALLOCATED, MIXED, DRAIN, ...) and reason.
    slurm_states: frozenset[str] = frozenset()
    slurm_reason: str = ""


@dataclass(frozen=True)
class ClaimLook:
    """A ResourceClaim of the soak's, allocated: its Pod, its Node and the GPUs it holds."""

    name: str
    pod_uid: str
    node: str
    gpus: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Look:
    pods: tuple[PodLook, ...]
    jobs: tuple[JobLook, ...]
    #: Slurm node -> Kubernetes Node.
    host_of: Mapping[str, str]
    nodes: tuple[NodeLook, ...] = ()
    #: Pods outside the soak's namespace that hold room on a Node (the slurmd Pods, ...).
    others: tuple[PodLook, ...] = ()
    #: The uids of the soak's Pods that some Event is about.
    explained: frozenset[str] = frozenset()
    claims: tuple[ClaimLook, ...] = ()


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
    "no-ended-job-holds-on": (
        "no placeholder job that has ended (cancelled, timed out) without its Pod still holds "
        "its node for longer than Slurm takes to resend a kill its slurmd missed", 0.0),
        # its grace is KillWait + SLURM_KILL_RESEND + margin, given to the Tracker
    "no-gang-partly-bound": (
        "no gang is partly bound (some members bound, others not or gone) for longer than the "
        "gang bind timeout plus a margin", GANG_BIND_TIMEOUT + GANG_MARGIN),
    "no-node-over-allocatable": (
        "no Node holds bound Pods whose CPU or memory requests add up to more than its "
        "allocatable", 10.0),
    "no-gpu-given-twice": (
        "no GPU is given both to a ResourceClaim and to a Slurm job that is not its Pod's",
        10.0),
    "no-lock-nothing-needs": (
        "no Node stays locked or tainted by sunk while its Slurm node runs nothing, nor drained "
        "by sunk once nothing needs the drain (its Node uncordoned, its Pod gone)", 60.0),
    "no-pod-waits-unexplained": (
        "no Pod of the soak waits (unbound, not deleting) without a reason it can read (an "
        "Event or a PodScheduled=False condition with a message) for longer than a minute",
        WAIT_UNEXPLAINED),
}


def member_id(uid: str) -> str:
    """A gang member's id in its job's ``extra`` (as sunk.slurm.job writes it)."""
    return uid.replace("-", "")[:12].lower()


def check(look: Look) -> list[Violation]:
    """Every invariant, on one look."""
    from benchmarks import nodeinvariants

    return [*violations(look.pods, look.jobs, look.host_of),
            *partly_bound_gangs(look.pods), *unexplained_waits(look.pods, look.explained),
            *nodeinvariants.over_allocatable(look),
            *nodeinvariants.gpus_given_twice(look),
            *nodeinvariants.needless_locks(look)]


def _naming(pod: PodLook, active: Mapping[str, list[JobLook]]) -> dict[int, list[JobLook]]:
    """The active jobs that name ``pod``, itself or as a member of a gang, by job (a
    heterogeneous job's components together)."""
    found: dict[int, list[JobLook]] = {}
    for job in [*active.get(pod.uid, []), *active.get(member_id(pod.uid), [])]:
        found.setdefault(job.het_job_id or job.job_id, []).append(job)
    return found


def violations(pods: Iterable[PodLook], jobs: Iterable[JobLook],
               host_of: Mapping[str, str]) -> list[Violation]:
    """Each bound Pod has its one job, and no job outlives its Pod. ``host_of``: Slurm node ->
    Kubernetes Node."""
    pods, jobs = list(pods), list(jobs)
    active: dict[str, list[JobLook]] = {}
    for job in jobs:
        if job.uid and (job.state in ACTIVE or job.completing):
            for key in job.members or (job.uid,):
                active.setdefault(key, []).append(job)
    found: list[Violation] = []
    for pod in pods:
        if not pod.node or pod.deleting or pod.ended:
            continue
        naming = _naming(pod, active)
        running = [parts for parts in naming.values()
                   if any(j.state == "RUNNING" for j in parts)]
        if len(running) != 1 or pod.node not in {host_of.get(n) for j in running[0]
                                                 for n in j.on()}:
            seen = ", ".join(f"job {j.job_id} {j.state} on {j.nodes or '-'}"
                             for parts in naming.values() for j in parts) or "no active job"
            found.append(Violation("bound-pod-has-one-job", pod.name,
                                   f"bound to {pod.node}; {seen}"))
    alive = ({pod.uid for pod in pods if not pod.ended}
             | {member_id(pod.uid) for pod in pods if not pod.ended})
    seen_jobs: set[int] = set()
    for _, held in sorted(active.items()):
        for job in held:
            if job.job_id in seen_jobs or job.state == "PENDING":
                continue
            if not any(k in alive for k in job.members or (job.uid,)):
                seen_jobs.add(job.job_id)
                ended = job.state not in ACTIVE  # cancelled: Slurm is finishing it
                found.append(Violation("no-ended-job-holds-on" if ended else
                                       "no-job-without-pod", f"job {job.job_id}",
                                       f"{job.state}{'+COMPLETING' if ended else ''} on "
                                       f"{job.nodes}; its Pod is gone"))
    return found


def partly_bound_gangs(pods: Iterable[PodLook]) -> list[Violation]:
    """A gang with members bound while another of its members is unbound or gone (members
    being deleted do not count: sunk deletes a gang whose member went)."""
    gangs: dict[str, list[PodLook]] = {}
    for pod in pods:
        if pod.gang and not pod.deleting:
            gangs.setdefault(pod.gang, []).append(pod)
    found = []
    for gang, members in sorted(gangs.items()):
        bound = sorted(p.name for p in members if p.node)
        if bound and (len(bound) < len(members) or len(members) < max(
                p.gang_size for p in members)):
            found.append(Violation("no-gang-partly-bound", f"gang {gang}",
                                   f"{len(bound)} of {max(p.gang_size for p in members)} "
                                   f"bound ({', '.join(bound)}); {len(members)} there"))
    return found


def unexplained_waits(pods: Iterable[PodLook], explained: frozenset[str]) -> list[Violation]:
    """An unbound Pod with neither an Event about it nor a PodScheduled=False message."""
    return [Violation("no-pod-waits-unexplained", pod.name, "unbound; no Event, no "
                      "PodScheduled=False condition with a message")
            for pod in pods if not pod.node and not pod.deleting and not pod.waiting_says
            and pod.uid not in explained]


@dataclass
class Tracker:
    """The violations seen, kept from the first look that showed each until a look without it;
    one that lasts past its grace is reported once, with when it began and what was seen.
    Time between looks made while a fault holds a part down does not count toward a grace
    (nothing can be put right by a part that is down), though it counts in ``lasted``."""

    graces: Mapping[str, float]
    _since: dict[tuple[str, str], tuple[float, Violation]] = field(default_factory=dict)
    reported: list[dict[str, object]] = field(default_factory=list)
    _told: set[tuple[str, str]] = field(default_factory=set)
    _paused: dict[tuple[str, str], float] = field(default_factory=dict)
    _last: float | None = None

    def look(self, now: float, seen: Iterable[Violation], *, down: bool = False
             ) -> list[dict[str, object]]:
        """Record one look at ``now`` (seconds; ``down``: a part was down since the look
        before); returns the violations that just became reportable."""
        current = {(v.invariant, v.subject): v for v in seen}
        for key in list(self._since):
            if key not in current:
                del self._since[key]
                self._paused.pop(key, None)
                self._told.discard(key)
            elif down and self._last is not None:
                self._paused[key] = self._paused.get(key, 0.0) + now - self._last
        self._last = now
        new = []
        for key, violation in current.items():
            began, _ = self._since.setdefault(key, (now, violation))
            counted = now - began - self._paused.get(key, 0.0)
            if counted >= self.graces[violation.invariant] and key not in self._told:
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


def graces(kill_wait: float, margin: float) -> dict[str, float]:
    """Each invariant's grace on a bed whose placeholder KillWait is ``kill_wait``."""
    return {name: grace for name, (_, grace) in INVARIANTS.items()} | {
        "no-job-without-pod": kill_wait + margin,
        "no-ended-job-holds-on": kill_wait + SLURM_KILL_RESEND + margin}
