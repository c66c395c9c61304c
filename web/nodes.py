"""Slurm nodes joined to their slurmd Pod and Kubernetes Node -> the Nodes page and its JSON.

Pure functions over the scheduler's Slurm polls and informer caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sunk.plans.fit import allocatable
from sunk.plans.locking import LOCK_KEY, LockState
from sunk.slurm.text import expand_hostlist, gpu_count
from sunk.slurm.text import number as _number
from web.pods import FINISHED_PHASES
from web.protocol import SchedulerView
from web.viewmodels import NodeList, NodeRow

#: Slurm job states in which the job holds its node.
_ACTIVE_JOB_STATES: Final = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})


def locks(scheduler: SchedulerView) -> dict[str, tuple[str, str]]:
    """Slurm node name -> (Kubernetes Node, lock annotation of its slurmd Pod), for every Slurm
    node with a live slurmd Pod (the scheduler's node index)."""
    index = scheduler.node_index
    return {name: (index.to_k8s.get(name, ""), str(
                ((pod.get("metadata") or {}).get("annotations") or {}).get(LOCK_KEY, "false")))
            for name, pod in index.slurmd.items()}


def _taint(node: Mapping[str, Any] | None, key: str) -> str:
    for taint in ((node or {}).get("spec") or {}).get("taints") or ():
        if taint.get("key") == key:
            value = taint.get("value") or ""
            return f"{value}:{taint.get('effect', '')}" if value else str(taint.get("effect", ""))
    return ""


def node_matches(row: NodeRow, what: str) -> bool:
    if not what:
        return True
    lock = LockState.parse(row.lock)
    if what == "locked":
        return lock is not LockState.FALSE
    if what == "unlocked":
        return lock is LockState.FALSE
    if what == "busy":
        return (row.state_flags != ["IDLE"] or lock is not LockState.FALSE or bool(row.pods)
                or bool(row.jobs) or row.cordoned)
    return what.upper() in row.state_flags


def nodes(scheduler: SchedulerView, *, state: str = "") -> NodeList:
    """Every Slurm node slurmrestd reports, joined to its slurmd Pod and Kubernetes Node, with
    the jobs and Pods of ours on it; also slurmd Pods whose Slurm node was not reported yet."""
    by_node = locks(scheduler)
    jobs_on: dict[str, list[int]] = {}
    for job in scheduler.jobs.values():
        if job.state in _ACTIVE_JOB_STATES and job.nodes:
            for name in expand_hostlist(job.nodes):
                jobs_on.setdefault(name, []).append(job.job_id)
    pods_on: dict[str, list[str]] = {}
    for rec in scheduler.state.pods.values():
        if rec.slurm_node and rec.phase not in FINISHED_PHASES:
            pods_on.setdefault(rec.slurm_node, []).append(rec.key)
    names = sorted(set(scheduler.state.slurm_nodes) | set(by_node))
    rows: list[NodeRow] = []
    for name in names:
        raw = scheduler.state.slurm_nodes.get(name) or {}
        k8s_name, lock = by_node.get(name, ("", ""))
        k8s = scheduler.node(k8s_name) if k8s_name else None
        flags = [str(f) for f in raw.get("state") or []]
        reason = str(raw.get("reason") or "")
        drain_reason = reason if "DRAIN" in flags else ""
        cpus, memory = _number(raw.get("cpus")), _number(raw.get("real_memory"))
        gpus = gpu_count(raw.get("gres"))
        alloc = allocatable(k8s) if k8s is not None else {}
        requested = scheduler.node_requests(k8s_name) if k8s_name else {}
        gpu = scheduler.settings.gpu_resource
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
            gpus=gpus, gpus_free=max(0, gpus - gpu_count(raw.get("gres_used"))),
            k8s_cpus=alloc.get("cpu", 0) / 1000,
            k8s_cpus_requested=requested.get("cpu", 0) / 1000,
            k8s_memory_mib=int(alloc.get("memory", 0) / 2**20),
            k8s_memory_requested_mib=int(requested.get("memory", 0) / 2**20),
            k8s_gpus=int(alloc.get(gpu, 0)), k8s_gpus_requested=int(requested.get(gpu, 0)),
            size_mismatch=scheduler.state.capacity.get(name, ""),
            not_counted=scheduler.state.not_counted.get(name, ""))
        if node_matches(row, state):
            rows.append(row)
    return NodeList(total=len(names), nodes=rows)
