"""A Slurm job as sunk reads it, and whose Pod it is (pure: no I/O).

A placeholder job names its Pod in ``extra`` (the placeholder appends ``: started`` once its
script runs) and carries the scheduler's stamp in ``admin_comment``. :class:`Job` parses
``extra`` once, when the record is built, so the hot path never parses it again.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_EXTRA = re.compile(r"^sunk-(?P<kind>pod|gang)=(?P<ns>[^/\s]+)/(?P<name>[^\s]+)"
                    r" uid=(?P<uid>[0-9a-fA-F-]+) scheduler=(?P<scheduler>[^\s:]+)"
                    r"(?: members=(?P<members>[0-9a-f]{12}(?:,[0-9a-f]{12})*))?"
                    r"(?: parts=(?P<parts>[0-9]{1,3}(?:,[0-9]{1,3})*))?(?=\s*$|:)")
#: A job Slurm requeued held after its launch failed (a prolog failure), as slurmrestd
#: describes it (``state_description``), and the reason sunk (and scontrol) gives it.
LAUNCH_FAILED_DESCRIPTION = "launch failed requeued held"
LAUNCH_FAILED_HELD = "launch_failed_requeued_held"
#: The fields of Slurm's job record kept with a job, for the dashboard: the whole record is
#: about 18 kB a job, and a restart reads every job's (11,000 jobs: 450 MiB kept otherwise).
SHOWN_FIELDS = (
    "job_id", "name", "job_state", "state_reason", "state_description", "partition", "account",
    "qos", "user_name", "nodes", "priority", "time_limit", "submit_time", "start_time",
    "end_time", "tres_req_str", "tres_alloc_str", "comment", "extra", "exit_code",
    "scheduled_nodes")
#: Every field of slurmrestd's record that :meth:`Job.from_api` reads.
READ_FIELDS = (*SHOWN_FIELDS, "state_description", "admin_comment", "het_job_id",
               "het_job_offset")
#: What the placeholder appends to ``extra`` when its script starts.
STARTED = ": started"
#: Slurm job states after which the job holds nothing.
FINISHED_STATES = frozenset({"CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "PREEMPTED",
                             "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})


def member_id(uid: str) -> str:
    """A gang member's id in its job's ``extra``: the first 12 hex digits of its Pod's uid
    (short, so the ``extra`` of a large gang stays small; unique within one gang)."""
    return uid.replace("-", "")[:12].lower()


@dataclass(frozen=True)
class PodIdentity:
    """Whose a placeholder job is: the Pod, and the scheduler (by name) that submitted it, so
    two sunk schedulers sharing one Slurm cluster never adopt or reap each other's jobs.

    A gang's job (:mod:`sunk.plans.gang`) names the gang instead: ``name`` is the gang's name (it
    has a ``:``, which no Pod name has), ``uid`` the gang's id, and ``members`` its Pods'
    :func:`member_id` in rank order (rank r runs on the r-th node of the job). A gang whose
    members differ in shape runs as one heterogeneous job (:mod:`sunk.plans.hetjob`):
    ``parts`` then gives each member's component, in rank order (rank r runs on the next node
    of its component)."""

    namespace: str
    name: str
    uid: str
    scheduler: str
    members: tuple[str, ...] = ()
    parts: tuple[int, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang(self) -> bool:
        return bool(self.members)


def job_extra(pod: PodIdentity) -> str:
    """The job's ``extra``: who the job is for. The placeholder appends ``: started``."""
    if pod.gang:
        parts = f" parts={','.join(map(str, pod.parts))}" if pod.parts else ""
        return (f"sunk-gang={pod.namespace}/{pod.name} uid={pod.uid} scheduler={pod.scheduler}"
                f" members={','.join(pod.members)}{parts}")
    return f"sunk-pod={pod.namespace}/{pod.name} uid={pod.uid} scheduler={pod.scheduler}"


def parse_extra(extra: str | None) -> tuple[PodIdentity | None, bool]:
    """The Pod a job of ours is for (None if not ours), and whether its script has started."""
    if not extra:
        return None, False
    m = _EXTRA.match(extra)
    if m is None:
        return None, False
    gang = m["kind"] == "gang"
    if gang != bool(m["members"]) or (m["parts"] and not gang):
        return None, False  # a gang names its members; a Pod's job names none
    members = tuple(m["members"].split(",")) if gang else ()
    parts = tuple(int(p) for p in m["parts"].split(",")) if m["parts"] else ()
    if parts and len(parts) != len(members):
        return None, False
    who = PodIdentity(m["ns"], m["name"], m["uid"], m["scheduler"], members, parts)
    return who, extra.rstrip().endswith(STARTED)


def admin_comment(pod: PodIdentity) -> str:
    """The job's ``admin_comment``: the proof that the scheduler submitted the job for this
    Pod. ``extra`` can be written by the job's own user (the placeholder appends to it, and
    ``sbatch --extra`` sets it), so a user could make a job of theirs claim to be a Pod's;
    only Slurm operators can set ``admin_comment`` (slurmctld refuses anyone else)."""
    return f"sunk-pod-uid={pod.uid} scheduler={pod.scheduler}"


def job_name(pod: PodIdentity) -> str:
    """The job's name: the Pod (or gang), readable in ``squeue``."""
    return f"{'gang' if pod.gang else 'pod'}:{pod.namespace}/{pod.name}"


def _text(raw: dict[str, Any], key: str) -> str:
    """A string field of slurmrestd's record ("" if missing or not a string: a record that
    says something odd is no reason to fail the whole listing)."""
    value = raw.get(key)
    return value if isinstance(value, str) else ""


@dataclass
class Job:
    """The fields of a Slurm job that sunk reads.

    ``owner`` and ``started`` are parsed from ``extra`` once, at construction; ``extra`` is
    therefore set once (assigning it again raises). ``state``, ``reason`` and ``checked_at``
    follow the job and may be assigned."""

    job_id: int
    name: str
    state: str
    extra: str
    nodes: str
    reason: str
    #: What the dashboard shows of Slurm's record (:func:`shown_fields`; {} if never read).
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    #: Set by the submitter only if a Slurm operator (sunk's proof that a job is its own).
    admin_comment: str = ""
    #: When this record was read from Slurm, or its state last changed (monotonic seconds).
    checked_at: float = field(default_factory=time.monotonic)
    #: A heterogeneous job's leader id (0: not one) and this record's offset in it: Slurm lists
    #: each component as a job of its own; sunk follows the leader (:meth:`folded`).
    het_job_id: int = 0
    het_offset: int = 0
    #: A heterogeneous leader read with its components: each component's nodes, in order
    #: (``nodes`` is all of them).
    components: tuple[str, ...] = ()
    #: The Pod that ``extra`` names (None: not a placeholder's ``extra``). A claim only: the
    #: job is the scheduler's only if ``admin_comment`` is :func:`admin_comment` of it.
    owner: PodIdentity | None = field(init=False, compare=False)
    #: Whether the placeholder's script has started (it appended ``: started`` to ``extra``).
    started: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        owner, started = parse_extra(self.extra)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "started", started)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("extra", "owner", "started") and name in self.__dict__:
            raise AttributeError(f"Job.{name} is set once (owner and started come from extra)")
        super().__setattr__(name, value)

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> Job:
        """A job from slurmrestd's record (``GET /job/{id}`` or ``/jobs/``)."""
        states = raw.get("job_state") or []
        reason = _text(raw, "state_reason")
        if _text(raw, "state_description") == LAUNCH_FAILED_DESCRIPTION:
            # slurmrestd says JobHeldUser, as for a hold a person set; scontrol (and sunk)
            # name it by its description: Slurm held it itself, after its launch failed.
            reason = LAUNCH_FAILED_HELD
        return cls(job_id=int(raw["job_id"]), name=_text(raw, "name"),
                   state=str(states[0]) if states else "UNKNOWN", extra=_text(raw, "extra"),
                   nodes=_text(raw, "nodes"), reason=reason,
                   raw=shown_fields(raw),
                   admin_comment=_text(raw, "admin_comment"),
                   het_job_id=_count(raw.get("het_job_id")),
                   het_offset=_count(raw.get("het_job_offset")))

    @staticmethod
    def folded(jobs: list[Job]) -> list[Job]:
        """The jobs of a listing, each heterogeneous job as its leader with every component's
        nodes (:attr:`components`); a component whose leader is not listed is left out. A
        heterogeneous job's components start and end together: its leader's state is the
        job's."""
        parts: dict[int, dict[int, str]] = {}
        for job in jobs:
            if job.het_job_id:
                parts.setdefault(job.het_job_id, {})[job.het_offset] = job.nodes
        out = []
        for job in jobs:
            if not job.het_job_id:
                out.append(job)
            elif job.het_offset == 0 and job.het_job_id == job.job_id:
                nodes = tuple(n for _, n in sorted(parts[job.job_id].items()))
                job.nodes = ",".join(n for n in nodes if n)
                job.components = nodes
                out.append(job)
        return out

    @property
    def component(self) -> bool:
        """A heterogeneous job's component other than its leader (followed through it)."""
        return bool(self.het_job_id) and self.het_job_id != self.job_id

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


def _count(value: Any) -> int:
    """A whole-number field of Slurm's record (0 when not set, or not a number)."""
    number = _number(value)
    return number if isinstance(number, int) and not isinstance(number, bool) else 0


def _number(value: Any) -> Any:
    """Slurm's ``{"set": .., "infinite": .., "number": ..}`` as its number, "infinite" or None;
    anything else as it is."""
    if isinstance(value, Mapping) and "set" in value and "number" in value:
        if not value.get("set"):
            return None
        return "infinite" if value.get("infinite") else value.get("number")
    return value


def shown_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`SHOWN_FIELDS` of Slurm's job record, flat, as the dashboard shows them: a
    number object is its number ("infinite", or left out when not set), the state's flags one
    string, the exit code its return code; empty ones left out. Kept for every job instead of
    the record's own nested objects: a third of a job's memory, at 11,000 jobs."""
    out: dict[str, Any] = {}
    for key in SHOWN_FIELDS:
        if key not in raw:
            continue
        value = _number(raw[key])
        if key == "job_state" and isinstance(value, list):
            value = "+".join(str(v) for v in value)
        elif key == "exit_code" and isinstance(value, Mapping):
            value = f"{_number(value.get('return_code'))}"
        if value not in (None, "", [], {}):
            out[key] = value
    return out


def _plain(value: Any) -> str:
    """A job field as text: "" unless a non-blank string (Slurm's record may hold anything)."""
    return value.strip() if isinstance(value, str) else ""


def account_and_qos(job: Job | None, submitted: Mapping[str, Any] | None = None
                    ) -> tuple[str, str]:
    """The Slurm account and QOS a job runs under: Slurm's own record of it first (defaults
    included), else the job description sunk submitted (which names them only if a policy or
    annotation set them); "" where neither says, or says something that is not text. Two dict
    lookups: cheap enough for every row of the dashboard's page."""
    raw: Mapping[str, Any] = job.raw if job is not None else {}
    sent = submitted or {}
    return (_plain(raw.get("account")) or _plain(sent.get("account")),
            _plain(raw.get("qos")) or _plain(sent.get("qos")))


def gres_by_node(records: list[dict[str, Any]]) -> dict[str, str]:
    """Each node's GRES of a running job, as Slurm's ``gres_detail`` gives it
    (``gpu:h100:2(IDX:0-1)``): the job's records (a heterogeneous job's components) pair
    ``job_resources.nodes.allocation`` (node by node, in Slurm's node order) with
    ``gres_detail`` (in the same order). A record that lists no allocation gives its one
    node's detail if it has one node."""
    out: dict[str, str] = {}
    for raw in records:
        details = raw.get("gres_detail")
        if not isinstance(details, list):
            continue
        resources = raw.get("job_resources")
        nodes = resources.get("nodes") if isinstance(resources, Mapping) else None
        allocation = nodes.get("allocation") if isinstance(nodes, Mapping) else None
        names = [str(a.get("name")) for a in allocation or () if isinstance(a, Mapping)]
        if not names and len(details) == 1 and "," not in _text(raw, "nodes"):
            names = [_text(raw, "nodes")]
        out.update({name: str(detail) for name, detail in zip(names, details, strict=False)})
    return out
