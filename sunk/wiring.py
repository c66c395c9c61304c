"""The parts of a running sunk, built once and wired together (no logic of its own).

One cluster model is shared by everything; the Slurm poller and the executor write to it; the
scheduler, the syncer, the hook answers and the dashboard read it. The job table has one writer,
the Slurm poller: the executor, the syncer and the hook answers are given the poller to tell.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sunk import kube
from sunk.apply.executor import Executor
from sunk.apply.ports import KubeAPI
from sunk.hooks.answers import HookAnswers
from sunk.hooks.auth import HookKeys
from sunk.loops.scheduler import Scheduler
from sunk.loops.syncer import Syncer
from sunk.model.cluster import Cluster
from sunk.model.nodeindex import NodeIndex
from sunk.model.slurmwatch import SlurmWatch
from sunk.model.state import SchedulerState
from sunk.policy.loader import PolicyStore
from sunk.runtime.supervise import forever
from sunk.runtime.trends import TrendRecorder, record
from sunk.settings import Settings
from sunk.slurm.client import SlurmClient
from sunk.slurm.job import Job


class DashboardSource:
    """What the dashboard reads (``web.protocol.SchedulerView``): the cluster model, read-only,
    a Pod's Events, the one call to the API server the dashboard makes, and the scheduler's
    own throughput and latency over the last hour (:meth:`record_trends` records them)."""

    def __init__(self, cluster: Cluster, policies: PolicyStore, kube_api: KubeAPI,
                 trends: TrendRecorder | None = None) -> None:
        self.cluster = cluster
        self.policies = policies
        self.kube_api = kube_api
        self.trends = trends if trends is not None else TrendRecorder()

    async def record_trends(self) -> None:
        """Sample the metrics for :attr:`trends` every 10 s, as long as the process lives."""
        await forever("recording the dashboard's trends", lambda: record(self.trends))

    @property
    def state(self) -> SchedulerState:
        return self.cluster.state

    @property
    def settings(self) -> Settings:
        return self.cluster.settings

    @property
    def jobs(self) -> Mapping[int, Job]:
        return self.cluster.jobs.jobs

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.cluster.pod(f"{namespace}/{name}")

    def node(self, name: str) -> Mapping[str, Any] | None:
        return self.cluster.node(name)

    @property
    def node_index(self) -> NodeIndex:
        return self.cluster.index()

    def kube_problem(self) -> str:
        if not self.cluster.ready.is_set():
            return "caches not synced yet"
        return self.cluster.health.kube_problem()

    def node_requests(self, node: str) -> Mapping[str, int]:
        return self.cluster.usage.used(node)

    async def pod_events(self, namespace: str, name: str, uid: str
                         ) -> list[dict[str, Any]] | str:
        try:
            return await self.kube_api.pod_events(namespace, uid)
        except kube.KubeError as exc:
            return str(exc)


@dataclass
class Parts:
    cluster: Cluster
    watch: SlurmWatch
    executor: Executor
    keys: HookKeys
    scheduler: Scheduler
    hooks: HookAnswers
    syncer: Syncer | None
    dashboard: DashboardSource

    @property
    def ready(self) -> asyncio.Event:
        return self.cluster.ready


def connect_scheduler(scheduler: Scheduler) -> None:
    """The scheduler hears what wakes its Pods and gangs: their watch events, room freed on a
    Node, Slurm's jobs that changed or are stuck, the API server or Slurm back after an
    outage."""
    cluster, watch = scheduler.cluster, scheduler.watch
    cluster.pod_handlers.append(scheduler.on_pod)
    cluster.gang_handlers.append(scheduler.gang_changed)
    cluster.gang_index.pod_handlers.append(scheduler.on_pod)
    cluster.usage.freed = scheduler.room_freed
    watch.wake, watch.stuck = scheduler.wake, scheduler.job_stuck
    cluster.health.on_slurm_back.append(scheduler.slurm_back)
    cluster.health.on_kube_back.append(scheduler.kube_back)


def connect_syncer(syncer: Syncer) -> None:
    """The syncer hears every Pod's watch events (what a lock must clear) and the executor's
    lock changes (a waiting prolog may be answered)."""
    syncer.executor.on_lock_changed = syncer.lock_changed
    syncer.cluster.any_pod_handlers.append(syncer.on_pod)


def assemble(settings: Settings, api: kube.Client, slurm: SlurmClient,
             policies: PolicyStore) -> Parts:
    cluster = Cluster(settings, api)
    keys = HookKeys(settings.hook_tokens)
    watch = SlurmWatch(cluster, slurm)
    kube_api = KubeAPI(api, settings.scheduler_name)
    executor = Executor(cluster, kube_api, slurm,
                        credential=keys.credentials_of(settings.scheduler_name), jobs=watch)
    scheduler = Scheduler(cluster, watch, executor, policies)
    connect_scheduler(scheduler)
    hooks = HookAnswers(cluster, watch, executor, wake=scheduler.wake)
    syncer = Syncer(cluster, executor, slurm, watch) if "syncer" in settings.components else None
    if syncer is not None:
        connect_syncer(syncer)
    return Parts(cluster, watch, executor, keys, scheduler, hooks, syncer,
                 DashboardSource(cluster, policies, kube_api))
