"""Connection health and counts -> the header of every page, and ``/api/v1/summary``."""

from __future__ import annotations

from sunk.plans.locking import LockState
from web.gangs import gang_state, waits
from web.nodes import locks
from web.pods import pod_state
from web.protocol import SchedulerView
from web.viewmodels import POD_STATES, Health, Summary, utc


def kubernetes_health(scheduler: SchedulerView) -> Health:
    """Healthy when every watch has listed once and none reports an error since."""
    if problem := scheduler.state.kube_error or scheduler.kube_problem():
        return Health("Kubernetes API", False, problem)
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
    by_node = locks(scheduler)
    for name, raw in scheduler.state.slurm_nodes.items():
        flags = raw.get("state") or []
        nodes["total"] += 1
        nodes["drain"] += "DRAIN" in flags
        nodes["down"] += "DOWN" in flags
        nodes["locked"] += LockState.parse(by_node.get(name, ("", ""))[1]).locked
    gangs = scheduler.state.gangs
    waiting = sum(waits(gang_state(rec)) for rec in gangs.values())
    status = scheduler.policies.status()
    return Summary(
        scheduler_name=scheduler.settings.scheduler_name, now=utc(now),
        started_at=utc(scheduler.state.started),
        kubernetes=kubernetes_health(scheduler), slurm=slurm_health(scheduler),
        pods=pods, nodes=nodes, gangs={"total": len(gangs), "waiting": waiting},
        active_jobs=sum(not job.finished for job in scheduler.jobs.values()),
        policy_generation=status.generation, policy_reload_failed=status.error is not None)
