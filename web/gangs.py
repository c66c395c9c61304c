"""Gangs in the scheduler's state -> the Gangs page, a gang's own page and their JSON.

A gang is a group of Pods that becomes one multi-node Slurm job, all or nothing
(``sunk.plans.gang``).
Pure functions over the scheduler's gang records (``SchedulerState.gangs``, which
``sunk.loops.gangreconcile`` keeps) and its Slurm jobs: a page view costs no call to anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from sunk.model.state import GangRecord
from sunk.slurm.job import Job, account_and_qos
from web.pods import slurm_job
from web.protocol import SchedulerView
from web.viewmodels import (
    GangDetail,
    GangList,
    GangMemberView,
    GangRow,
    GangState,
    TransitionView,
    utc,
)


def gang_state(rec: GangRecord) -> GangState:
    if rec.problem:
        return "rejected"
    if rec.waiting:
        return "waiting"
    if rec.members and all(m.phase == "Running" for m in rec.members):
        return "running"
    return "bound"


def waits(state: GangState) -> bool:
    """What an operator looks at first: a gang that waits, or can never run."""
    return state in ("waiting", "rejected")


def _gang_row(rec: GangRecord, jobs: Mapping[int, Job]) -> GangRow:
    members = []
    for m in sorted(rec.members, key=lambda m: (m.rank, m.key)):
        namespace, _, name = m.key.partition("/")
        members.append(GangMemberView(namespace=namespace, name=name, rank=m.rank,
                                      slurm_node=m.slurm_node, k8s_node=m.k8s_node,
                                      phase=m.phase, component=m.component))
    last = rec.history[-1] if rec.history else None
    # the gang's job description is not kept: only Slurm's record of the job says
    account, qos = account_and_qos(jobs.get(rec.job_id) if rec.job_id is not None else None)
    return GangRow(
        namespace=rec.namespace, name=rec.name, state=gang_state(rec), size=rec.size,
        members=members, bound=sum(bool(m.k8s_node) for m in members), job_id=rec.job_id,
        job_state=rec.job_state, waiting=rec.waiting, problem=rec.problem,
        last_transition=f"{last.what}: {last.detail}" if last and last.detail else
        (last.what if last else ""), account=account, qos=qos,
        components=len({m.component for m in members if m.component is not None}))


def gangs(scheduler: SchedulerView) -> GangList:
    """Every gang: those that wait (or can never run) first, then by namespace and name (a
    stable order: rows do not jump between refreshes unless a gang starts or stops waiting)."""
    rows = [_gang_row(rec, scheduler.jobs) for rec in scheduler.state.gangs.values()]
    rows.sort(key=lambda g: (not waits(g.state), g.namespace, g.name))
    return GangList(total=len(rows), waiting=sum(waits(g.state) for g in rows), gangs=rows)


def gang_detail(scheduler: SchedulerView, namespace: str, name: str) -> GangDetail | None:
    rec = scheduler.state.gangs.get(f"{namespace}/{name}")
    if rec is None:
        return None
    job = scheduler.jobs.get(rec.job_id) if rec.job_id is not None else None
    return GangDetail(
        gang=_gang_row(rec, scheduler.jobs), slurm_job=slurm_job(job),
        history=[TransitionView(utc(t.at), t.what, t.detail) for t in reversed(rec.history)])

