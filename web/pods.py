"""Pods in the scheduler's state -> the Pods page, a Pod's own page and their JSON (a gang
member's row names its gang: :mod:`web.gangs`).

Pure functions over what the scheduler holds in memory (its Pod records, informer caches and
Slurm jobs): a page view costs no call to the API server or to slurmrestd. A Pod's Events are
the exception; :mod:`web.app` fetches them and passes them in.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Final

from sunk.model.state import PodRecord
from sunk.slurm.job import SHOWN_FIELDS, Job, account_and_qos, shown_fields
from web.protocol import SchedulerView
from web.viewmodels import (
    DEFAULT_LIMIT,
    EventView,
    PodDetail,
    PodList,
    PodRow,
    PodState,
    TransitionView,
    utc,
)

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: Fields of Slurm's own job record worth showing next to what sunk submitted (the job keeps
#: only these).
SLURM_JOB_FIELDS: Final = SHOWN_FIELDS
_TIME_FIELDS: Final = frozenset({"submit_time", "start_time", "end_time"})


def pod_state(rec: PodRecord) -> PodState:
    """One word an operator filters by; finer detail (job state, reason) is in its own column."""
    if rec.phase == "Terminating":
        return "terminating"
    if rec.phase in FINISHED_PHASES:
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


def pod_object(scheduler: SchedulerView, namespace: str, name: str) -> Mapping[str, Any] | None:
    return scheduler.pod(namespace, name)


#: (gang key, Pod key) -> the Pod's rank in that gang.
GangRanks = Mapping[tuple[str, str], int]


def gang_ranks(scheduler: SchedulerView) -> GangRanks:
    return {(key, m.key): m.rank for key, rec in scheduler.state.gangs.items()
            for m in rec.members}


def gang_of(scheduler: SchedulerView, pod: str, ranks: GangRanks) -> tuple[str, int | None]:
    """The key of the gang Pod ``pod`` is a member of and its rank there; ("", None) for a
    Pod scheduled alone, or whose gang the scheduler no longer holds."""
    gang = scheduler.state.gang_of.get(pod, "")
    if gang not in scheduler.state.gangs:
        return "", None
    return gang, ranks.get((gang, pod))


def _pod_row(scheduler: SchedulerView, rec: PodRecord, now: float, ranks: GangRanks
             ) -> PodRow:
    to_bound = rec.time_to_bound
    if to_bound is None and rec.k8s_node:
        to_bound = scheduled_after(pod_object(scheduler, rec.namespace, rec.name), rec.created)
    last = rec.history[-1] if rec.history else None
    gang, rank = gang_of(scheduler, rec.key, ranks)
    job = scheduler.jobs.get(rec.job_id) if rec.job_id is not None else None
    account, qos = account_and_qos(job, rec.job_description)
    return PodRow(
        namespace=rec.namespace, name=rec.name, state=pod_state(rec), phase=rec.phase,
        job_id=rec.job_id, job_state=rec.job_state, pending_reason=rec.pending_reason,
        slurm_node=rec.slurm_node, k8s_node=rec.k8s_node, created_at=utc(rec.created),
        age_seconds=max(0.0, now - rec.created), time_to_bound_seconds=to_bound,
        last_event=rec.last_event,
        last_transition=f"{last.what}: {last.detail}" if last and last.detail else
        (last.what if last else ""),
        rejected=rec.rejected, gang=gang, gang_rank=rank, account=account, qos=qos,
        waiting="" if rec.k8s_node else rec.waiting,
        expected_start=utc(rec.expected_start) if rec.expected_start and not rec.k8s_node
        else None)


def pods(scheduler: SchedulerView, now: float, *, namespace: str = "", state: str = "",
         query: str = "", offset: int = 0, limit: int = DEFAULT_LIMIT) -> PodList:
    """Pods sorted by namespace and name (a stable order: rows do not jump between refreshes),
    filtered by namespace, state and a substring of the name; of those, the ``limit`` from the
    ``offset``-th on (0: the first). Every match is counted, but rows are built only for the
    page: its cost grows with ``limit``, not with how many Pods match."""
    records = scheduler.state.pods
    namespaces = scheduler.state.namespaces()
    query = query.strip().lower()
    rows: list[PodRow] = []
    matching = 0
    end = offset + limit
    ranks = gang_ranks(scheduler)
    keys = scheduler.state.pod_keys()
    if not (namespace or query or state):  # every Pod matches: only the page's are looked at
        rows = [_pod_row(scheduler, records[key], now, ranks) for key in keys[offset:end]]
        return PodList(total=len(records), matching=len(records), offset=offset, limit=limit,
                       namespaces=namespaces, pods=rows)
    for key in keys:
        rec = records[key]
        if namespace and rec.namespace != namespace:
            continue
        if query and query not in rec.name.lower():
            continue
        if state and pod_state(rec) != state:
            continue
        if offset <= matching < end:
            rows.append(_pod_row(scheduler, rec, now, ranks))
        matching += 1
    return PodList(total=len(records), matching=matching, offset=offset, limit=limit,
                   namespaces=namespaces, pods=rows)


def slurm_job(job: Job | None) -> dict[str, Any] | None:
    """The fields of Slurm's job record an operator asks about, flattened."""
    if job is None:
        return None
    raw = job.raw
    if not raw:
        return {"job_id": job.job_id, "job_state": job.state, "state_reason": job.reason,
                "nodes": job.nodes}
    out = shown_fields(raw)  # flat already when read from Slurm; any other record too
    for key in _TIME_FIELDS & out.keys():
        if isinstance(out[key], int):
            out[key] = utc(out[key]).isoformat() if out[key] else None
    return {key: value for key, value in out.items() if value is not None}


def pod_detail(scheduler: SchedulerView, namespace: str, name: str, now: float, *,
               events: Iterable[EventView] = (), events_error: str = "") -> PodDetail | None:
    rec = scheduler.state.pods.get(f"{namespace}/{name}")
    if rec is None:
        return None
    meta = (pod_object(scheduler, namespace, name) or {}).get("metadata") or {}
    job = scheduler.jobs.get(rec.job_id) if rec.job_id is not None else None
    return PodDetail(
        pod=_pod_row(scheduler, rec, now, gang_ranks(scheduler)), uid=rec.uid,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        job_description=rec.job_description, slurm_job=slurm_job(job),
        history=[TransitionView(utc(t.at), t.what, t.detail) for t in reversed(rec.history)],
        events=list(events), events_error=events_error)


def event_view(event: Mapping[str, Any]) -> EventView:
    """A core/v1 Event (either the old or the events.k8s.io-style timestamps)."""
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get(
        "firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp")
    seen = _timestamp(stamp)
    source = event.get("source") or {}
    return EventView(
        type=str(event.get("type") or ""), reason=str(event.get("reason") or ""),
        message=str(event.get("message") or ""), count=int(event.get("count") or 1),
        last_seen=None if seen is None else utc(seen),
        source=str(source.get("component") or event.get("reportingComponent") or ""))
