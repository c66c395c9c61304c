"""Writes why a Pod waits onto it: its ``PodScheduled`` condition and nominated Node; and a
gang's state onto its PodGroup's status.

A courtesy, as an Event is: written in the background, never on a Pod's hot path; a failed
write is logged and forgotten, so the next look at the Pod writes it again. Where the Pod gets
a write anyway (its job id, two seconds after the submission), the condition rides along
(:meth:`WaitingWriter.ride_along`): most Pods that wait cost no write of their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from sunk import kube, objects
from sunk.apply.background import Background
from sunk.apply.ports import KubePort
from sunk.model.cluster import Cluster
from sunk.model.podmemory import PodMemory
from sunk.model.state import GangRecord
from sunk.plans import gang, waiting
from sunk.plans.decide import FAILED_LAUNCH_HOLDS
from sunk.plans.waiting import Shown, Waiting
from sunk.runtime import metrics
from sunk.slurm.job import Job
from sunk.slurm.text import expand_hostlist

log = logging.getLogger("sunk.apply.waiting")


def job_waiting(cluster: Cluster, job: Job, wall: float) -> tuple[Waiting, list[str]] | None:
    """What the Pods of ``job`` show until it starts, and the Kubernetes Nodes Slurm's
    backfill plans it on (a gang member's is its rank's); None once started or ended, or held
    after a failed launch (the plans' case). A reason not read yet reads as Slurm's own word
    for it, ``None``."""
    owner = job.owner
    if owner is None or job.finished or job.started or job.reason in FAILED_LAUNCH_HOLDS:
        return None
    if job.state != "PENDING":  # allocated: its prolog runs, then the placeholder starts
        return waiting.starting(job.job_id, job.nodes, cluster.index().to_k8s), []
    start = waiting.expected_start(job.raw, wall)
    planned = job.raw.get("scheduled_nodes")
    nodes: list[str] = []
    if isinstance(planned, str) and planned:
        to_k8s = cluster.index().to_k8s
        nodes = [to_k8s[name] for name in expand_hostlist(planned) if name in to_k8s]
    return waiting.in_slurm(job.job_id, job.reason or "None", start, nodes,
                            gang=owner.name if owner.gang else ""), nodes


class WaitingWriter:
    def __init__(self, cluster: Cluster, kube_port: KubePort, memory: PodMemory,
                 background: Background) -> None:
        self.cluster = cluster
        self.kube = kube_port
        self.memory = memory
        self.background = background
        #: A gang's PodGroup write in flight, by gang key: the next waits for it, so the
        #: newest lands last (a False written just before a True must not land after it).
        self._podgroup_writes: dict[str, asyncio.Task[None]] = {}

    def show(self, pod: kube.Obj, want: Waiting, *, final: bool = False) -> bool:
        """Write ``want`` on the Pod if it says something new and the Pod was not written in
        the last 10 s (:func:`~sunk.plans.waiting.to_write`). False: it must wait (a later
        look writes it); True: written, or shown already. ``final``: no later look comes (a
        refusal): written now, however recently the Pod was."""
        now = time.monotonic()
        uid = objects.pod(pod).metadata.uid
        wait = waiting.to_write(self.memory.shown.get(uid), want, now, time.time())
        if wait is None:
            return True
        if wait > 0 and not final:
            return False
        shown = self._shown(pod, want, now)
        self.background.fire(self._write(pod, uid, shown))
        return True

    def ride_along(self, pod: kube.Obj) -> tuple[Mapping[str, Any], str] | None:
        """For a write the Pod gets anyway: the condition and nominated Node it should show
        now, taken as shown; None if it shows that already or its job does not wait."""
        uid = objects.pod(pod).metadata.uid
        job = self.cluster.jobs.get(self.cluster.jobs.by_uid.get(uid, 0))
        found = job_waiting(self.cluster, job, time.time()) if job is not None else None
        now = time.monotonic()
        if found is None or waiting.to_write(self.memory.shown.get(uid), found[0], now,
                                             time.time()) is None:
            return None
        shown = self._shown(pod, found[0], now)
        metrics.child(metrics.CONDITIONS_WRITTEN, shown.waiting.reason).inc()
        return waiting.condition(shown.waiting, shown.since), shown.waiting.nominated

    def not_carried(self, pod: kube.Obj) -> None:
        """What :meth:`ride_along` gave was not written: the next look writes it."""
        self.memory.shown.pop(objects.pod(pod).metadata.uid, None)

    def show_podgroup(self, group: kube.Obj, record: GangRecord, status: Mapping[str, Any], *,
                      version: str = gang.PODGROUP_VERSION, strategic: bool = False) -> None:
        """Write a PodGroup's status (:mod:`sunk.plans.podgroup`, or a Kubernetes PodGroup's
        condition, :mod:`sunk.plans.workload`) unless it was the last written for the gang
        (the watch may not have brought that write back yet); times are not compared."""
        said = {"uid": objects.custom(group).metadata.uid, **_without_times(status)}
        if record.podgroup_status == said:  # the same object told the same
            return
        record.podgroup_status = said
        before = self._podgroup_writes.get(record.key)
        task = asyncio.create_task(self._write_podgroup(before, group, record, said, status,
                                                        version, strategic))
        self._podgroup_writes[record.key] = task
        task.add_done_callback(lambda done: self._forget_write(record.key, done))
        self.background.keep(task)

    def _forget_write(self, gang_key: str, done: asyncio.Task[None]) -> None:
        if self._podgroup_writes.get(gang_key) is done:
            del self._podgroup_writes[gang_key]

    async def _write_podgroup(self, before: asyncio.Task[None] | None, group: kube.Obj,
                              record: GangRecord, said: dict[str, Any],
                              status: Mapping[str, Any], version: str, strategic: bool) -> None:
        if before is not None:
            await asyncio.wait([before])  # its outcome is its own
        try:
            await self.kube.patch_status("podgroups", version, group, status,
                                         strategic=strategic)
        except kube.KubeError as exc:
            if record.podgroup_status is said:  # written again at the gang's next look
                record.podgroup_status = None
            log.info("podgroup %s: could not write its status: %s",
                     objects.custom(group).metadata.key, exc)

    def _shown(self, pod: kube.Obj, want: Waiting, now: float) -> Shown:
        meta = objects.pod(pod).metadata
        before = self.memory.shown.get(meta.uid)
        shown = Shown(want, at=now, since=before.since if before is not None else time.time())
        self.memory.shown[meta.uid] = shown
        if (record := self.cluster.state.pods.get(meta.key)) is not None:  # the dashboard's
            record.waiting, record.expected_start = want.message, want.expected_start
        return shown

    async def _write(self, pod: kube.Obj, uid: str, shown: Shown) -> None:
        try:
            await self.kube.show_waiting(pod, waiting.condition(shown.waiting, shown.since),
                                         shown.waiting.nominated)
            metrics.child(metrics.CONDITIONS_WRITTEN, shown.waiting.reason).inc()
        except kube.KubeError as exc:
            if self.memory.shown.get(uid) is shown:  # written again by the next look
                del self.memory.shown[uid]
            log.info("pod %s: could not write why it waits: %s",
                     objects.pod(pod).metadata.key, exc)


def _without_times(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` without the times in it, which differ from one look to the next."""
    said = {k: v for k, v in status.items() if k != "scheduleStartTime"}
    if isinstance(conditions := said.get("conditions"), list):
        said["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                              for c in conditions]
    return said
