"""A Pod bound to its Node: the room checked and counted, the annotations its binding carries,
and what a binding leaves behind (the assume cache, the Pod's dashboard line, the metrics, the
log's timings, and the ``Scheduled`` Event)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping

from sunk import kube, objects
from sunk.apply.annotations import AnnotationWriter
from sunk.apply.background import PodEvents
from sunk.apply.claims import ClaimAllocator
from sunk.apply.ports import KubePort
from sunk.model.cluster import Cluster
from sunk.model.podmemory import PodMemory
from sunk.model.state import PodRecord
from sunk.plans import actions as do
from sunk.plans import ownership
from sunk.runtime import metrics
from sunk.slurm.job import account_and_qos

log = logging.getLogger("sunk.apply.executor")

def scheduled_message(pod_key: str, k8s_node: str, slurm_node: str, job_id: int, *,
                      account: str = "", qos: str = "") -> str:
    """The ``Scheduled`` Event's message (what ``kubectl describe pod`` shows): the Node, and
    the Slurm node, job, account and QOS behind it; an account or QOS not known is left out."""
    job = [f"Slurm node {slurm_node}", f"job {job_id}"]
    if account:
        job.append(f"account {account}")
    if qos:
        job.append(f"QOS {qos}")
    return f"Successfully assigned {pod_key} to {k8s_node} ({', '.join(job)})"


class Binder:
    """Binds Pods for the executor, a Pod's binding and a gang member's alike."""

    def __init__(self, cluster: Cluster, kube_port: KubePort, annotator: AnnotationWriter,
                 memory: PodMemory, events: PodEvents, *, owned: ownership.Keys,
                 claims: ClaimAllocator | None = None) -> None:
        self.cluster = cluster
        #: Allocates a Pod's ResourceClaims from its job's GPUs before it is bound.
        self.claims = claims
        self.kube = kube_port
        self.annotator = annotator
        self.memory = memory
        self.owned = owned
        self.events = events

    def reserve(self, pod: kube.Obj, k8s_node: str) -> do.RetryLater | None:
        """The Pod's room on ``k8s_node`` (:class:`sunk.plans.actions.Reserve`): checked and
        counted with no await between, so two Pods bound at once to one Node cannot both take
        its last room. A wait for room if it has none any more."""
        if lacking := self.cluster.room(pod, k8s_node):
            return do.RetryLater(f"Node {k8s_node} has no room any more: {'; '.join(lacking)}",
                                 room=True)
        self.cluster.usage.assume_bound(pod, k8s_node)
        return None

    async def bind(self, pod: kube.Obj, record: PodRecord, k8s_node: str, slurm_node: str,
                   job_id: int, annotations: Mapping[str, str] | None = None, *,
                   events: list[Callable[[], None]] | None = None) -> None:
        """Bind a Pod whose room is reserved (:meth:`reserve`); a failed binding releases it.
        Its Scheduled Event is sent at once, or left in ``events`` for the caller."""
        meta = objects.pod(pod).metadata
        carried = self.annotator.carried_by_binding(pod)
        written = {**carried, **(annotations or {})}
        if self.owned.job_id in written:  # (a gang's) with the uid it is for, whatever goes first
            written.setdefault(self.owned.pod_uid, meta.uid)
        try:
            if self.claims is not None:
                await self.claims.allocate(pod, k8s_node, slurm_node, job_id)
            await self.kube.bind(pod, k8s_node, {
                key: value for key, value in written.items() if value is not None})
        except BaseException as exc:
            self.cluster.usage.binding_failed(pod)  # not bound: the reservation is released
            if carried and isinstance(exc, Exception) and self.cluster.assumed.still_assumed(
                    meta.uid, carried):  # (not when shutting down: cancelled)
                self.annotator.write_soon(pod, carried)  # not carried after all: on its own
            raise
        watched = self.cluster.watched("pods", pod)
        self.cluster.assumed.bound(meta.uid, watched=watched)
        if written:
            self.cluster.assumed.wrote_annotations(meta.uid, written, watched=watched)
        record.bound_at = time.time()
        record.k8s_node = k8s_node
        if self.cluster.state.not_counted.pop(slurm_node, None) is not None:
            metrics.child(metrics.NODE_PODS_NOT_COUNTED, k8s_node).set(0)
            self.memory.told_not_counted.pop(k8s_node, None)
        metrics.PODS_BOUND.inc()
        if record.time_to_bound is not None:
            metrics.child(metrics.BIND_LATENCY, meta.namespace).observe(record.time_to_bound)
        log.info("pod %s: bound to %s (Slurm node %s)%s", meta.key, k8s_node, slurm_node,
                 self._timings(job_id))
        job = self.cluster.jobs.get(job_id)
        account, qos = account_and_qos(job)
        if not (account and qos):  # the job as submitted, unpacked only when Slurm's is silent
            account, qos = account_and_qos(job, record.job_description)
        send = functools.partial(self.events.send, pod, record, "Scheduled", scheduled_message(
            meta.key, k8s_node, slurm_node, job_id, account=account, qos=qos))
        if events is None:
            send()
        else:
            events.append(send)

    def _timings(self, job_id: int) -> str:
        """How long the job took to start and the binding to follow, for the log (what the
        benchmarks read: sunk's own delay, apart from Slurm's)."""
        jobs, now = self.cluster.jobs, time.monotonic()
        started, submitted = jobs.started_at.get(job_id), jobs.submitted_at.get(job_id)
        if started is None:
            return ""
        took = f" {now - started:.3f}s after job {job_id} started"
        if submitted is not None:
            took += f" ({started - submitted:.3f}s after its submission)"
        return took
