"""Carries out what the plans decided (:mod:`sunk.plans.actions`), through the two ports.

The one place where sunk writes: to the API server (annotations, bindings, deletions, Events,
taints, evictions) and to Slurm (submissions, cancellations, node drains). Each write is
recorded in the assume cache, the dashboard's records and the metrics. A Pod's and a gang's
plans are applied here (a gang's through :mod:`sunk.apply.gangs`), with three parts of the
executor's own:

- :mod:`sunk.apply.annotations`: a Pod's annotations, in order; a new job's id in the
  background (assumed at once, retried until written), after a moment in which a job that
  starts has its id carried by the Pod's binding instead, one write instead of two;
- :mod:`sunk.apply.submissions`: a job into Slurm once, even when an answer was lost;
- :mod:`sunk.apply.binding`: a Pod onto its Node, room checked, and what follows a binding.

A node's actions are handed to :mod:`sunk.apply.nodeexecutor`. Events are sent in the
background: a bind never waits for one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from sunk import kube, objects
from sunk.apply.annotations import AnnotationWriter
from sunk.apply.background import Background, PodEvents
from sunk.apply.binding import Binder
from sunk.apply.claims import ClaimAllocator, ClaimsNotAllocated
from sunk.apply.gangs import GangExecutor
from sunk.apply.nodeexecutor import NodeExecutor
from sunk.apply.ports import KubePort, SlurmPort
from sunk.apply.submissions import JobRecorder, Submitter
from sunk.apply.waiting import WaitingWriter
from sunk.model.assume import CancelsSent
from sunk.model.cluster import Cluster
from sunk.model.devices import device_mapping
from sunk.model.podmemory import PodMemory, PodMemoryView
from sunk.model.state import PodRecord
from sunk.plans import actions as do
from sunk.plans import ownership, waiting
from sunk.plans.nodeplan import NodeFacts
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError

log = logging.getLogger("sunk.apply.executor")


class Executor:
    """Carries out a Pod's, a gang's and a node's plans: the one place sunk writes from."""

    def __init__(self, cluster: Cluster, kube_port: KubePort, slurm: SlurmPort, *,
                 credential: Callable[[str], str], jobs: JobRecorder) -> None:
        """``credential``: a Pod's (or gang's) uid -> the credential its job shows the hook
        API. ``jobs``: the job table's one writer, told of what the executor submits."""
        self.cluster = cluster
        self.kube = kube_port
        self.slurm = slurm
        self.settings = cluster.settings
        self.owned = ownership.Keys.with_prefix(self.settings.annotation_prefix)
        self._memory = PodMemory()  # written here and by the parts below only
        self.background = Background()
        self._background = self.background.tasks  # what a test waits for
        self.events = PodEvents(kube_port, self.background)
        self.waiting = WaitingWriter(cluster, kube_port, self._memory, self.background)
        self.annotator = AnnotationWriter(cluster, kube_port, self.background,
                                          ride_along=self.waiting)
        self.submitter = Submitter(cluster, slurm, credential=credential,
                                   jobs=jobs)
        self.binder = Binder(cluster, kube_port, self.annotator, self._memory, self.events,
                             owned=self.owned, claims=ClaimAllocator(
                                 cluster, kube_port, slurm, device_mapping(self.settings)))
        self.nodes = NodeExecutor(cluster, kube_port, slurm, background=self.background)
        self.gangs = GangExecutor(self, self._memory)
        #: The cancels sent lately: a job is not cancelled twice while the first is in hand.
        self._cancels = CancelsSent()

    @property
    def memory(self) -> PodMemoryView:
        """What the executor remembers of Pods and gangs, read-only."""
        return self._memory

    def forget_pod(self, uid: str) -> None:
        """The Pod ``uid`` is gone: nothing of it is remembered any more."""
        self._memory.forget(uid)

    def forget_gang(self, gang_id: str) -> None:
        """The gang has no Pod and no live job left."""
        self._memory.forget_gang(gang_id)

    def forget_cancels(self) -> None:
        """Slurm was away: a cancel sent before may be lost; the next one asked is sent."""
        self._cancels.forget()

    def fire(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background (Events: never on the hot path)."""
        self.background.fire(coro)

    # -- a Pod ----------------------------------------------------------------------------------
    async def apply_pod(self, pod: kube.Obj, record: PodRecord,
                        actions: Iterable[do.PodAction], *, tries: int = 0
                        ) -> do.RetryLater | None:
        """Apply one Pod's plan in order, up to a wait, which is handed back (the room a
        ``Reserve`` finds gone is one). ``tries``: failed reconciles of it so far."""
        meta = objects.pod(pod).metadata
        uid = meta.uid
        for action in actions:
            match action:
                case do.PodEvent(reason, message, warning):
                    self.pod_event(pod, record, reason, message, warning=warning)
                case do.ReportIgnored(message):
                    self._memory.told_ignored.add(uid)
                    metrics.ANNOTATIONS_IGNORED.inc()
                    log.warning("pod %s: ignored scheduler-owned annotations: %s",
                                meta.key, message)
                    self.pod_event(pod, record, "IgnoredAnnotations", message, warning=True)
                case do.Replace(lost_job):
                    self._memory.replaced.setdefault(uid, set()).add(lost_job)
                case do.Refit(job_id, why):
                    self._memory.refitted.setdefault(uid, set()).add(job_id)
                    metrics.REFITS.inc()
                    await self.cancel(job_id, meta.key, why)
                case do.ReportNotCounted():
                    self._report_not_counted(action)
                case do.Annotate(annotations, note):
                    await self.annotator.write(pod, annotations)
                    if note:
                        record.note("adopted", note)
                case do.Submit(description):
                    await self._submit(pod, record, dict(description), tries=tries)
                case do.Reject(reason, message):
                    await self._reject(pod, record, reason, message)
                case do.Reserve(k8s_node):
                    if (no_room := self.binder.reserve(pod, k8s_node)) is not None:
                        return no_room
                case do.Bind(k8s_node, slurm_node, job_id):
                    try:
                        await self.binder.bind(pod, record, k8s_node, slurm_node, job_id)
                    except ClaimsNotAllocated as exc:  # not bound: looked at again soon
                        return do.RetryLater(str(exc))
                case do.CancelJob(job_id, why):
                    await self.cancel(job_id, meta.key, why)
                case do.DeletePod(why, reason):
                    await self._delete_pod(pod, record, why, reason)
                case do.RetryLater(show=show):
                    if show is not None:
                        self.waiting.show(pod, show)
                    return action
        return None

    def _report_not_counted(self, report: do.ReportNotCounted) -> None:
        """Pods Slurm does not count take the room where Slurm ran a job: said on the Node
        and on each of those Pods once for as long as the same Pods do (a refused binding
        repeats with every job Slurm runs there), and kept for the dashboard and the metric."""
        pods = ", ".join(report.pods)
        text = (f"Slurm ran job {report.job_id} on {report.slurm_node}, but Pods Slurm does "
                f"not count take the room on Node {report.k8s_node}: {pods}")
        metrics.child(metrics.NODE_PODS_NOT_COUNTED, report.k8s_node).set(len(report.pods))
        self.cluster.state.not_counted[report.slurm_node] = text
        if self._memory.told_not_counted.get(report.k8s_node) == report.pods:
            return
        self._memory.told_not_counted[report.k8s_node] = report.pods
        log.warning("node %s: %s", report.k8s_node, text)
        node = self.cluster.node(report.k8s_node)
        if node is not None:
            self.nodes.node_event(node, "PodsNotCountedBySlurm", f"{text}. The job was "
                                  "cancelled; Slurm will keep placing jobs here until those Pods "
                                  "go or Slurm's node definition leaves room for them.",
                                  warning=True)
        for key in report.pods:
            pod = self.cluster.any_pod(key)
            if pod is not None:
                self.pod_event(pod, self.cluster.state.pods.get(key), "NotCountedBySlurm",
                               f"this Pod takes room on Node {report.k8s_node} that Slurm does "
                               f"not know is taken: Slurm ran job {report.job_id} there and "
                               "its Pod could not be bound", warning=True)

    def pod_event(self, pod: kube.Obj, record: PodRecord | None, reason: str, message: str, *,
                  warning: bool = False) -> None:
        self.events.send(pod, record, reason, message, warning=warning)

    async def _submit(self, pod: kube.Obj, record: PodRecord, job: dict[str, Any], *,
                      tries: int) -> None:
        meta = objects.pod(pod).metadata
        record.job_description = job  # shown on the dashboard: the submitter adds the credential
        try:
            job_id = await self.submitter.submit(meta.uid, job)
        except SlurmError as exc:
            if exc.permanent:
                await self._reject(pod, record, "SlurmRefused",
                                   f"Slurm refused the job: {exc.slurm_message}")
                return
            why = (f"Slurm did not take the job (try {tries + 1}, retrying with backoff): "
                   f"{exc.slurm_message}")
            if tries & (tries - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure: not every retry
                self.pod_event(pod, record, "SubmitFailed", why, warning=True)
            self.waiting.show(pod, waiting.scheduler_error(why))
            raise
        log.info("pod %s: submitted job %d", meta.key, job_id)
        record.job_id = job_id  # the dashboard's line: the echo of the job id may not be looked at
        self.write_job_id_soon(pod, job_id)
        record.note("JobSubmitted", f"Slurm job {job_id}")

    def write_job_id_soon(self, pod: kube.Obj, job_id: int) -> None:
        """A new job's id onto its Pod (a gang member's alike): believed at once, written after
        :data:`~sunk.apply.annotations.JOB_ID_WAIT` unless the Pod's binding carries it."""
        self.annotator.write_soon(pod, {self.owned.job_id: str(job_id),
                                        self.owned.pod_uid: objects.pod(pod).metadata.uid,
                                        self.owned.rejected: None}, wait=True)

    async def _reject(self, pod: kube.Obj, record: PodRecord, reason: str, message: str) -> None:
        metrics.PODS_REJECTED.inc()
        record.rejected = f"{reason}: {message}"
        meta = objects.pod(pod).metadata
        self.pod_event(pod, record, reason, message, warning=True)
        self.waiting.show(pod, (waiting.scheduler_error if reason == "SlurmRefused"
                                else waiting.unschedulable)(f"{reason}: {message}"),
                          final=True)  # a refused Pod is not looked at again
        await self.annotator.write(pod, {self.owned.rejected: reason, self.owned.job_id: None,
                                         self.owned.pod_uid: meta.uid})
        log.info("pod %s rejected: %s: %s", meta.key, reason, message)

    async def cancel(self, job_id: int, key: str, why: str) -> bool:
        """Cancel ``job_id``, unless its cancel was sent moments ago or is on its way (False):
        a Pod being deleted, then gone, asks twice before Slurm's poll shows the job ended,
        often while the first is still on its way. A cancel that fails is not remembered: its
        caller is retried (and the orphan sweep finds a job whose Pod is gone)."""
        if self._cancels.pending(job_id, time.monotonic()):
            log.debug("pod %s: job %d: cancel sent already (%s)", key, job_id, why)
            return False
        self._cancels.sent(job_id, time.monotonic())
        try:
            await self.slurm.cancel(job_id)
        except BaseException:
            self._cancels.failed(job_id)
            raise
        metrics.JOBS_CANCELLED.inc()
        log.info("pod %s: cancelled job %d: %s", key, job_id, why)
        return True

    async def _delete_pod(self, pod: kube.Obj, record: PodRecord, why: str,
                          reason: str = "SlurmJobEnded") -> None:
        self.pod_event(pod, record, reason, f"{why}; deleting the Pod", warning=True)
        await self.kube.delete_pod(pod)
        metrics.PODS_DELETED.inc()
        log.info("pod %s: deleted: %s", kube.key(pod), why)

    def record(self, pod: kube.Obj) -> PodRecord:
        """The Pod's line on the dashboard."""
        meta = objects.pod(pod).metadata
        return self.cluster.state.record(meta.namespace, meta.name, meta.uid, kube.created(pod))

    # -- a node (sunk.apply.nodeexecutor) ---------------------------------------------------------
    async def apply_node(self, facts: NodeFacts, node: kube.Obj, slurmd: kube.Obj,
                         actions: Iterable[do.NodeAction], *,
                         pod_of: Callable[[str], kube.Obj | None]) -> None:
        """Apply one node's plan in order. ``pod_of``: a Pod by key (for Events)."""
        await self.nodes.apply(facts, node, slurmd, actions, pod_of=pod_of)

    @property
    def on_lock_changed(self) -> Callable[[str], None]:
        """Called with a Slurm node whose lock state changed (hook calls wait on it)."""
        return self.nodes.on_lock_changed

    @on_lock_changed.setter
    def on_lock_changed(self, call: Callable[[str], None]) -> None:
        self.nodes.on_lock_changed = call
