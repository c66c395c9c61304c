"""Scheduler state and informer caches -> plain view models for the pages and the JSON API.

Pure functions over what the scheduler already holds in memory: a page view costs no call to
the API server or to slurmrestd, so many open dashboards cannot slow scheduling down. The same
view models are rendered as HTML and serialised as JSON, so the two never disagree.

Everything here runs on the scheduler's event loop (never in a thread): the caches it reads are
mutated by that loop, and reading them between two awaits is what keeps the reads consistent.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from sunk.locking import LOCK_KEY
from sunk.policy.engine import PolicyEngine
from sunk.policy.loader import PolicyStatus
from sunk.settings import Settings
from sunk.slurm import Job
from sunk.state import PodRecord, SchedulerState

# -- what the views read: the parts of sunk.scheduler.Scheduler they need ------------------------


class Flag(Protocol):
    """``asyncio.Event`` as far as the views care."""

    def is_set(self) -> bool: ...


class InformerView(Protocol):
    """A list-then-watch cache (``sunk.kube.Informer``), read-only."""

    @property
    def cache(self) -> Mapping[str, Mapping[str, Any]]: ...

    @property
    def synced(self) -> Flag: ...

    @property
    def last_error(self) -> str: ...


class PolicySource(Protocol):
    """``sunk.policy.PolicyStore``: its status, and the engine in force (for the documents)."""

    def status(self) -> PolicyStatus: ...

    @property
    def engine(self) -> PolicyEngine: ...


class SchedulerView(Protocol):
    """What the dashboard reads of the scheduler; ``sunk.scheduler.Scheduler`` satisfies it and
    tests build one from plain data (``sunk.web.sample.StaticScheduler``)."""

    @property
    def state(self) -> SchedulerState: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def policies(self) -> PolicySource: ...

    @property
    def jobs(self) -> Mapping[int, Job]: ...

    @property
    def pod_informers(self) -> Sequence[InformerView]: ...

    @property
    def node_informer(self) -> InformerView: ...

    @property
    def slurmd_informer(self) -> InformerView: ...


# -- view models ---------------------------------------------------------------------------------

PodState = Literal["waiting", "rejected", "bound", "running", "terminating", "finished"]
POD_STATES: Final[tuple[PodState, ...]] = (
    "waiting", "rejected", "bound", "running", "terminating", "finished")
#: Rows per Pods page unless asked otherwise: enough for a big cluster's waiting Pods, few
#: enough for a browser to swap every 2 s.
DEFAULT_LIMIT: Final = 1000
#: ``busy``: anything but a plain idle node (on a big cluster, the rows worth reading).
NODE_FILTERS: Final = ("busy", "idle", "mixed", "allocated", "drain", "down", "locked",
                       "unlocked")
#: Slurm job states in which the job holds its node.
_ACTIVE_JOB_STATES: Final = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})
_FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})


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


@dataclass(frozen=True, slots=True)
class PodList:
    """One page of Pods: ``matching`` of ``total`` matched the filters, ``pods`` are shown."""

    total: int
    matching: int
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
class PolicyView:
    """The policy set in force (``policies``, in the order they apply) and, if the last reload
    failed, its problems: the set in force stays until a reload succeeds."""

    generation: int
    policies: list[PolicyInfo]
    loaded_at: datetime.datetime
    last_reload_ok: bool
    errors: list[IssueView]
    error_at: datetime.datetime | None


# -- helpers ------------------------------------------------------------------------------------


def _utc(ts: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC)


def _number(value: Any) -> int:
    """slurmrestd's numbers: plain, or ``{"set": true, "infinite": false, "number": N}``."""
    if isinstance(value, Mapping):
        return int(value.get("number") or 0) if value.get("set", True) else 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


_GPU: Final = re.compile(r"(?:^|,)gpu(?::[^:(,]+)?:(\d+)")


def gpu_count(gres: str | None) -> int:
    """GPUs in a Slurm GRES string: ``gpu:a100:8(S:0-1),gpu:h100:2`` -> 10; ``gres_used`` too
    (``gpu:a100:2(IDX:0,3)``)."""
    if not gres or gres == "N/A":
        return 0
    return sum(int(n) for n in _GPU.findall(gres))


_RANGE: Final = re.compile(r"\[([^\]]+)\]")


def expand_hostlist(text: str) -> list[str]:
    """Slurm node names from a hostlist: ``a100-[001-003,007],h100-000`` -> five names."""
    names: list[str] = []
    for part in re.split(r",(?![^\[]*\])", text.strip()):
        if not part:
            continue
        m = _RANGE.search(part)
        if m is None:
            names.append(part)
            continue
        head, tail = part[: m.start()], part[m.end():]
        for item in m.group(1).split(","):
            lo, _, hi = item.partition("-")
            if not hi:
                names.extend(expand_hostlist(head + lo + tail))
                continue
            width = len(lo)
            for n in range(int(lo), int(hi) + 1):
                names.extend(expand_hostlist(f"{head}{n:0{width}d}{tail}"))
    return names


def pod_state(rec: PodRecord) -> PodState:
    """One word an operator filters by; finer detail (job state, reason) is in its own column."""
    if rec.phase == "Terminating":
        return "terminating"
    if rec.phase in _FINISHED_PHASES:
        return "finished"
    if rec.rejected:
        return "rejected"
    if rec.k8s_node:
        return "running" if rec.phase == "Running" else "bound"
    return "waiting"


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def scheduled_after(pod: Mapping[str, Any] | None, created: float) -> float | None:
    """Seconds from creation to the ``PodScheduled`` condition (which binding sets), to the
    second: what a Pod bound before this scheduler process started still tells."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            at = _timestamp(condition.get("lastTransitionTime"))
            return None if at is None else max(0.0, at - created)
    return None


def _pod_row(scheduler: SchedulerView, rec: PodRecord, now: float) -> PodRow:
    to_bound = rec.time_to_bound
    if to_bound is None and rec.k8s_node:
        to_bound = scheduled_after(pod_object(scheduler, rec.namespace, rec.name), rec.created)
    last = rec.history[-1] if rec.history else None
    return PodRow(
        namespace=rec.namespace, name=rec.name, state=pod_state(rec), phase=rec.phase,
        job_id=rec.job_id, job_state=rec.job_state, pending_reason=rec.pending_reason,
        slurm_node=rec.slurm_node, k8s_node=rec.k8s_node, created_at=_utc(rec.created),
        age_seconds=max(0.0, now - rec.created), time_to_bound_seconds=to_bound,
        last_event=rec.last_event,
        last_transition=f"{last.what}: {last.detail}" if last and last.detail else
        (last.what if last else ""),
        rejected=rec.rejected)


# -- health and header ---------------------------------------------------------------------------


def kubernetes_health(scheduler: SchedulerView) -> Health:
    """Healthy when every informer has listed once and none reports an error since."""
    state = scheduler.state
    if state.kube_error:
        return Health("Kubernetes API", False, state.kube_error)
    informers = [*scheduler.pod_informers, scheduler.node_informer, scheduler.slurmd_informer]
    for informer in informers:
        if informer.last_error:
            return Health("Kubernetes API", False, informer.last_error)
    if not all(informer.synced.is_set() for informer in informers):
        return Health("Kubernetes API", False, "caches not synced yet")
    return Health("Kubernetes API", True, "watching")


def slurm_health(scheduler: SchedulerView) -> Health:
    state = scheduler.state
    if state.slurm_healthy:
        return Health("slurmrestd", True, "polling")
    return Health("slurmrestd", False, state.slurm_error or "not reached yet")


def summary(scheduler: SchedulerView, now: float) -> Summary:
    pods: dict[str, int] = dict.fromkeys(POD_STATES, 0)
    for rec in scheduler.state.pods.values():
        pods[pod_state(rec)] += 1
    pods["total"] = len(scheduler.state.pods)
    nodes = {"total": 0, "drain": 0, "down": 0, "locked": 0}
    locks = _locks(scheduler)
    for name, raw in scheduler.state.slurm_nodes.items():
        flags = raw.get("state") or []
        nodes["total"] += 1
        nodes["drain"] += "DRAIN" in flags
        nodes["down"] += "DOWN" in flags
        nodes["locked"] += locks.get(name, ("", ""))[1] in ("locked", "locked_strict")
    status = scheduler.policies.status()
    return Summary(
        scheduler_name=scheduler.settings.scheduler_name, now=_utc(now),
        started_at=_utc(scheduler.state.started),
        kubernetes=kubernetes_health(scheduler), slurm=slurm_health(scheduler),
        pods=pods, nodes=nodes,
        active_jobs=sum(not job.finished for job in scheduler.jobs.values()),
        policy_generation=status.generation, policy_reload_failed=status.error is not None)


# -- Pods ----------------------------------------------------------------------------------------


def pods(scheduler: SchedulerView, now: float, *, namespace: str = "", state: str = "",
         query: str = "", limit: int = DEFAULT_LIMIT) -> PodList:
    """Pods sorted by namespace and name (a stable order: rows do not jump between refreshes),
    filtered by namespace, state and a substring of the name."""
    records = scheduler.state.pods
    namespaces = sorted({rec.namespace for rec in records.values()})
    query = query.strip().lower()
    rows: list[PodRow] = []
    matching = 0
    for key in sorted(records):
        rec = records[key]
        if namespace and rec.namespace != namespace:
            continue
        if query and query not in rec.name.lower():
            continue
        if state and pod_state(rec) != state:
            continue
        matching += 1
        if len(rows) < limit:
            rows.append(_pod_row(scheduler, rec, now))
    return PodList(total=len(records), matching=matching, namespaces=namespaces, pods=rows)


def _flatten(value: Any) -> Any:
    if isinstance(value, Mapping) and "set" in value and "number" in value:
        if not value.get("set"):
            return None
        return "infinite" if value.get("infinite") else value.get("number")
    return value


#: Fields of Slurm's own job record worth showing next to what sunk submitted.
SLURM_JOB_FIELDS: Final = (
    "job_id", "name", "job_state", "state_reason", "state_description", "partition", "account",
    "qos", "user_name", "nodes", "priority", "time_limit", "submit_time", "start_time",
    "end_time", "tres_req_str", "tres_alloc_str", "comment", "extra", "exit_code")
_TIME_FIELDS: Final = frozenset({"submit_time", "start_time", "end_time"})


def slurm_job(job: Job | None) -> dict[str, Any] | None:
    """The fields of Slurm's job record an operator asks about, flattened."""
    if job is None:
        return None
    raw = job.raw
    if not raw:
        return {"job_id": job.job_id, "job_state": job.state, "state_reason": job.reason,
                "nodes": job.nodes}
    out: dict[str, Any] = {}
    for key in SLURM_JOB_FIELDS:
        if key not in raw:
            continue
        value = _flatten(raw[key])
        if key == "job_state" and isinstance(value, list):
            value = "+".join(str(v) for v in value)
        elif key == "exit_code" and isinstance(value, Mapping):
            value = f"{_flatten(value.get('return_code'))}"
        elif key in _TIME_FIELDS and isinstance(value, int):
            value = _utc(value).isoformat() if value else None
        if value not in (None, "", [], {}):
            out[key] = value
    return out


def pod_object(scheduler: SchedulerView, namespace: str, name: str) -> Mapping[str, Any] | None:
    key = f"{namespace}/{name}"
    for informer in scheduler.pod_informers:
        if (pod := informer.cache.get(key)) is not None:
            return pod
    return None


def pod_detail(scheduler: SchedulerView, namespace: str, name: str, now: float, *,
               events: Iterable[EventView] = (), events_error: str = "") -> PodDetail | None:
    rec = scheduler.state.pods.get(f"{namespace}/{name}")
    if rec is None:
        return None
    meta = (pod_object(scheduler, namespace, name) or {}).get("metadata") or {}
    job = scheduler.jobs.get(rec.job_id) if rec.job_id is not None else None
    return PodDetail(
        pod=_pod_row(scheduler, rec, now), uid=rec.uid,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        job_description=rec.job_description, slurm_job=slurm_job(job),
        history=[TransitionView(_utc(t.at), t.what, t.detail) for t in reversed(rec.history)],
        events=list(events), events_error=events_error)


def event_view(event: Mapping[str, Any]) -> EventView:
    """A core/v1 Event (either the old or the events.k8s.io-style timestamps)."""
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get(
        "firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp")
    seen = _timestamp(stamp)
    last_seen = None if seen is None else _utc(seen)
    source = event.get("source") or {}
    return EventView(
        type=str(event.get("type") or ""), reason=str(event.get("reason") or ""),
        message=str(event.get("message") or ""), count=int(event.get("count") or 1),
        last_seen=last_seen,
        source=str(source.get("component") or event.get("reportingComponent") or ""))


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


# -- nodes ---------------------------------------------------------------------------------------


def _locks(scheduler: SchedulerView) -> dict[str, tuple[str, str]]:
    """Slurm node name -> (Kubernetes Node, lock annotation of its slurmd Pod)."""
    out: dict[str, tuple[str, str]] = {}
    for pod in scheduler.slurmd_informer.cache.values():
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        hostname = spec.get("hostname")
        if not hostname or meta.get("deletionTimestamp"):
            continue
        lock = (meta.get("annotations") or {}).get(LOCK_KEY, "false")
        out[str(hostname)] = (str(spec.get("nodeName") or ""), str(lock))
    return out


def _taint(node: Mapping[str, Any] | None, key: str) -> str:
    for taint in ((node or {}).get("spec") or {}).get("taints") or ():
        if taint.get("key") == key:
            value = taint.get("value") or ""
            return f"{value}:{taint.get('effect', '')}" if value else str(taint.get("effect", ""))
    return ""


def node_matches(row: NodeRow, what: str) -> bool:
    if not what:
        return True
    if what == "locked":
        return row.lock in ("locked", "locked_strict", "pending")
    if what == "unlocked":
        return row.lock in ("", "false")
    if what == "busy":
        return (row.state_flags != ["IDLE"] or row.lock not in ("", "false") or bool(row.pods)
                or bool(row.jobs) or row.cordoned)
    return what.upper() in row.state_flags


def nodes(scheduler: SchedulerView, *, state: str = "") -> NodeList:
    """Every Slurm node slurmrestd reports, joined to its slurmd Pod and Kubernetes Node, with
    the jobs and Pods of ours on it; also slurmd Pods whose Slurm node was not reported yet."""
    locks = _locks(scheduler)
    k8s_nodes = scheduler.node_informer.cache
    jobs_on: dict[str, list[int]] = {}
    for job in scheduler.jobs.values():
        if job.state in _ACTIVE_JOB_STATES and job.nodes:
            for name in expand_hostlist(job.nodes):
                jobs_on.setdefault(name, []).append(job.job_id)
    pods_on: dict[str, list[str]] = {}
    for rec in scheduler.state.pods.values():
        if rec.slurm_node and rec.phase not in _FINISHED_PHASES:
            pods_on.setdefault(rec.slurm_node, []).append(rec.key)
    names = sorted(set(scheduler.state.slurm_nodes) | set(locks))
    rows: list[NodeRow] = []
    for name in names:
        raw = scheduler.state.slurm_nodes.get(name) or {}
        k8s_name, lock = locks.get(name, ("", ""))
        k8s = k8s_nodes.get(k8s_name) if k8s_name else None
        flags = [str(f) for f in raw.get("state") or []]
        reason = str(raw.get("reason") or "")
        drain_reason = reason if "DRAIN" in flags else ""
        cpus, memory = _number(raw.get("cpus")), _number(raw.get("real_memory"))
        gpus = gpu_count(raw.get("gres"))
        row = NodeRow(
            slurm_node=name, k8s_node=k8s_name,
            slurm_state="+".join(flags) if flags else "UNKNOWN", state_flags=flags,
            lock=lock, taint=_taint(k8s, LOCK_KEY),
            cordoned=bool(((k8s or {}).get("spec") or {}).get("unschedulable")),
            reason=reason, drain_reason=drain_reason,
            drain_from_kubernetes=drain_reason.startswith("k8s:"),
            partitions=[str(p) for p in raw.get("partitions") or []],
            jobs=sorted(jobs_on.get(name, [])), pods=sorted(pods_on.get(name, [])),
            cpus=cpus, cpus_free=max(0, cpus - _number(raw.get("alloc_cpus"))),
            memory_mib=memory, memory_free_mib=max(0, memory - _number(raw.get("alloc_memory"))),
            gpus=gpus, gpus_free=max(0, gpus - gpu_count(raw.get("gres_used"))))
        if node_matches(row, state):
            rows.append(row)
    return NodeList(total=len(names), nodes=rows)


# -- policies ------------------------------------------------------------------------------------


def policy_info(engine: PolicyEngine) -> list[PolicyInfo]:
    out = []
    for policy in engine.policies:
        spec = policy.document.spec
        out.append(PolicyInfo(
            name=policy.name, source=str(policy.origin or ""),
            failure_policy=spec.failure_policy, actions=list(spec.validation_actions),
            match_conditions=[c.name for c in spec.match_conditions],
            variables=[v.name for v in spec.variables],
            validations=[RuleView(v.reason, v.message) if v.message else
                         RuleView(v.reason, v.message_expression or v.expression, computed=True)
                         for v in spec.validations],
            mappings=list(spec.mappings)))
    return out


def policies(scheduler: SchedulerView) -> PolicyView:
    status = scheduler.policies.status()
    engine = scheduler.policies.engine
    errors = [] if status.error is None else [
        IssueView(message=issue.message, source=str(issue.origin or ""),
                  policy=issue.policy or "", field=issue.field or "")
        for issue in status.error.issues]
    return PolicyView(
        generation=status.generation, policies=policy_info(engine),
        loaded_at=_utc(status.loaded_at), last_reload_ok=status.error is None, errors=errors,
        error_at=_utc(status.error_at) if status.error_at is not None else None)
