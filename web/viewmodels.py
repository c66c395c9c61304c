"""The view models: what the pages render and the JSON API serialises, so the two never
disagree. Plain frozen dataclasses; the functions that build them are in :mod:`web.pods`,
:mod:`web.nodes`, :mod:`web.gangs`, :mod:`web.policies` and :mod:`web.summary`."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Final, Literal

PodState = Literal["waiting", "rejected", "bound", "running", "terminating", "finished"]
POD_STATES: Final[tuple[PodState, ...]] = (
    "waiting", "rejected", "bound", "running", "terminating", "finished")
#: Rows per Pods page unless asked otherwise: enough for a big cluster's waiting Pods, few
#: enough for a browser to swap every 2 s.
DEFAULT_LIMIT: Final = 1000
#: ``busy``: anything but a plain idle node (on a big cluster, the rows worth reading).
#: A gang as a whole: ``rejected`` (it can never run: ``problem``), ``waiting`` (for what:
#: ``waiting``), ``bound`` (every member bound) or ``running`` (every member running).
GangState = Literal["rejected", "waiting", "bound", "running"]
NODE_FILTERS: Final = ("busy", "idle", "mixed", "allocated", "drain", "down", "locked",
                       "unlocked")


def utc(ts: float) -> datetime.datetime:
    """A Unix time as the view models hold it: aware, in UTC."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC)


@dataclass(frozen=True, slots=True)
class Health:
    """One outside connection: the Kubernetes API server or slurmrestd."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Summary:
    """The header of every page: connection health and counts."""

    scheduler_name: str
    now: datetime.datetime
    started_at: datetime.datetime
    kubernetes: Health
    slurm: Health
    pods: dict[str, int]
    nodes: dict[str, int]
    active_jobs: int
    policy_generation: int
    policy_reload_failed: bool
    #: ``total`` gangs, and how many of them wait (or can never run).
    gangs: dict[str, int]


@dataclass(frozen=True, slots=True)
class PodRow:
    namespace: str
    name: str
    state: PodState
    phase: str
    job_id: int | None
    job_state: str
    pending_reason: str
    slurm_node: str
    k8s_node: str
    created_at: datetime.datetime
    age_seconds: float
    time_to_bound_seconds: float | None
    last_event: str
    #: The newest transition the scheduler noted (for a Pod with no Event of ours yet).
    last_transition: str
    rejected: str
    #: The key (``namespace/source:name``) of the gang the Pod is a member of, and its rank
    #: there; "" and None for a Pod scheduled alone.
    gang: str = ""
    gang_rank: int | None = None
    #: Why it waits (its PodScheduled condition's message) and Slurm's expected start.
    waiting: str = ""
    expected_start: datetime.datetime | None = None
    #: The Slurm account and QOS its job runs under: Slurm's record of the job, else what sunk
    #: submitted; "" while neither says.
    account: str = ""
    qos: str = ""


@dataclass(frozen=True, slots=True)
class PodList:
    """One page of Pods: ``matching`` of ``total`` matched the filters; ``pods`` are those of
    them from the ``offset``-th on (0: the first), at most ``limit``: empty when ``offset`` is
    past the last match."""

    total: int
    matching: int
    offset: int
    limit: int
    namespaces: list[str]
    pods: list[PodRow]


@dataclass(frozen=True, slots=True)
class TransitionView:
    at: datetime.datetime
    what: str
    detail: str


@dataclass(frozen=True, slots=True)
class EventView:
    """A core/v1 Event of the Pod, as ``kubectl describe`` lists it."""

    type: str
    reason: str
    message: str
    count: int
    last_seen: datetime.datetime | None
    source: str


@dataclass(frozen=True, slots=True)
class PodDetail:
    pod: PodRow
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    job_description: dict[str, Any] | None
    slurm_job: dict[str, Any] | None
    history: list[TransitionView]
    events: list[EventView] = field(default_factory=list)
    events_error: str = ""


@dataclass(frozen=True, slots=True)
class GangMemberView:
    """One Pod of a gang: its rank, the Slurm node that rank was given and the Kubernetes Node
    it is bound to ("" while not)."""

    namespace: str
    name: str
    rank: int
    slurm_node: str
    k8s_node: str
    phase: str
    #: Its component of the gang's heterogeneous job (None: the job is of one shape).
    component: int | None = None


@dataclass(frozen=True, slots=True)
class GangRow:
    """A gang (a group of Pods that becomes one multi-node Slurm job) and its members, in
    rank order. ``name`` says where the gang comes from (``job:``, ``label:``, ``podgroup:``,
    ``lws:``); ``size`` is None while it is not known."""

    namespace: str
    name: str
    state: GangState
    size: int | None
    members: list[GangMemberView]
    #: Members bound to a Kubernetes Node.
    bound: int
    job_id: int | None
    job_state: str
    #: What the gang waits for ("" once every member is bound).
    waiting: str
    #: Why it can never be scheduled as it is ("" if it can).
    problem: str
    #: The newest transition the scheduler noted.
    last_transition: str
    #: The Slurm account and QOS of its job, from Slurm's record of it ("" while not read).
    account: str = ""
    qos: str = ""
    #: The components of its heterogeneous job (0: its job is of one shape).
    components: int = 0


@dataclass(frozen=True, slots=True)
class GangList:
    """Every gang, those that wait (or can never run) first, then by namespace and name."""

    total: int
    waiting: int
    gangs: list[GangRow]


@dataclass(frozen=True, slots=True)
class GangDetail:
    gang: GangRow
    #: Slurm's record of the gang's job, as on a Pod's page.
    slurm_job: dict[str, Any] | None
    #: Newest first.
    history: list[TransitionView]


@dataclass(frozen=True, slots=True)
class NodeRow:
    slurm_node: str
    k8s_node: str
    slurm_state: str
    state_flags: list[str]
    #: The slurmd Pod's lock annotation (false, pending, locked, locked_strict); "" if none.
    lock: str
    #: The Node's lock taint as ``value:Effect``; "" if not tainted.
    taint: str
    cordoned: bool
    reason: str
    drain_reason: str
    drain_from_kubernetes: bool
    partitions: list[str]
    jobs: list[int]
    pods: list[str]
    cpus: int
    cpus_free: int
    memory_mib: int
    memory_free_mib: int
    gpus: int
    gpus_free: int
    #: Kubernetes' side: the Node's allocatable, and what the Pods bound there that a node lock
    #: leaves in place request (the slurmd Pod, DaemonSet Pods, sunk's Pods, ...).
    k8s_cpus: float = 0
    k8s_cpus_requested: float = 0
    k8s_memory_mib: int = 0
    k8s_memory_requested_mib: int = 0
    k8s_gpus: int = 0
    k8s_gpus_requested: int = 0
    #: How Slurm's node definition disagrees with what Kubernetes leaves for Slurm ("": agree).
    size_mismatch: str = ""
    #: Pods on the Node that take room Slurm does not know is taken, as last seen when a Pod
    #: could not be bound there ("": none seen since a Pod was last bound there).
    not_counted: str = ""


@dataclass(frozen=True, slots=True)
class NodeList:
    total: int
    nodes: list[NodeRow]


@dataclass(frozen=True, slots=True)
class IssueView:
    message: str
    source: str
    policy: str
    field: str


@dataclass(frozen=True, slots=True)
class RuleView:
    """A validation: its reason and message; ``computed``: the message is a CEL expression
    (``messageExpression``, or the check itself when no message is given)."""

    reason: str
    message: str
    computed: bool = False


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """One policy of the set in force, summarised: what it checks and which job fields it
    sets (the YAML itself is in the file or ConfigMap named by ``source``)."""

    name: str
    source: str
    failure_policy: str
    actions: list[str]
    match_conditions: list[str]
    variables: list[str]
    validations: list[RuleView]
    mappings: list[str]


@dataclass(frozen=True, slots=True)
class EvaluationErrorView:
    """An expression that could not be evaluated for a Pod (and whether the policy's
    ``failurePolicy: Fail`` turned that into a denial)."""

    at: datetime.datetime
    pod: str
    policy: str
    field: str
    message: str
    enforced: bool


@dataclass(frozen=True, slots=True)
class PolicyView:
    """The policy set in force (``policies``, in the order they apply) and, if the last reload
    failed, its problems: the set in force stays until a reload succeeds."""

    generation: int
    policies: list[PolicyInfo]
    loaded_at: datetime.datetime
    last_reload_ok: bool
    errors: list[IssueView]
    error_at: datetime.datetime | None
    #: Expressions that failed on Pods lately, newest first.
    evaluation_errors: list[EvaluationErrorView] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LatencySample:
    """One latency histogram's observations within one interval, in seconds. ``p50`` and
    ``p99`` are approximate: at the resolution of the histogram's buckets. None when no
    observation fell in the interval."""

    count: int
    mean_seconds: float | None
    p50_seconds: float | None
    p99_seconds: float | None


@dataclass(frozen=True, slots=True)
class TrendSample:
    """What the scheduler did in the ``seconds`` up to ``at``, from its own metrics."""

    at: datetime.datetime
    seconds: float
    pods_bound: int
    pods_bound_per_minute: float
    jobs_submitted: int
    pods_rejected: int
    #: ``sunk_pod_creation_to_bound_seconds`` of the Pods bound in the interval.
    bound_latency: LatencySample
    #: ``sunk_gang_start_to_bound_seconds`` of the gangs whose last member was bound in it.
    gang_latency: LatencySample


@dataclass(frozen=True, slots=True)
class Trends:
    """The scheduler's throughput and latency over the last ``window_seconds``, one sample
    every ``interval_seconds``, oldest first (none before the first interval has passed)."""

    interval_seconds: float
    window_seconds: float
    samples: list[TrendSample]
