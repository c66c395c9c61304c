"""Carries out what the plans decided (:mod:`sunk.plans.actions`), through the two ports.

The one place where sunk writes: to the API server (annotations, bindings, deletions, Events,
taints, evictions) and to Slurm (submissions, cancellations, node drains); a node's actions
are in :mod:`sunk.apply.nodeexecutor`, which the executor hands them to. Each write is
recorded in the assume cache, the dashboard's records and the metrics. Events are sent in the
background, and so is the job id written after a submission (assumed at once, retried until
written): a bind never waits for either. The job id waits a moment first: a job that starts
within it has its id carried by the Pod's binding, one write instead of two.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk import kube
from sunk.apply.nodeexecutor import NodeExecutor
from sunk.apply.ports import KubePort, SlurmPort
from sunk.model.cluster import Cluster
from sunk.model.state import PodRecord
from sunk.plans import actions as do
from sunk.plans import ownership
from sunk.plans.nodeplan import NodeFacts
from sunk.runtime import metrics
from sunk.slurm.client import SlurmError
from sunk.slurm.job import Job, PodIdentity, account_and_qos

log = logging.getLogger("sunk.apply.executor")

#: The first wait before a background write of annotations is tried again (doubling to 30 s).
ANNOTATE_RETRY = 0.5

#: How long a new job's id waits before it is written on its Pod by a write of its own. Most
#: jobs that start at all start within it (below capacity, submit to started was 1.2 s at most
#: in the open-loop runs): their Pod's binding carries the id, and the API server takes one
#: write per Pod, not two. A job pending longer has its id on the Pod after this.
JOB_ID_WAIT = 2.0


@dataclass(eq=False)
class DelayedWrite:
    """Annotations waiting out :data:`JOB_ID_WAIT` from their submission; a binding that
    comes first takes them."""

    annotations: dict[str, str | None]
    #: No earlier write of the Pod is still going on: a binding may carry these (one that
    #: did while an older value was in flight could be overwritten by it).
    alone: bool = False
    #: A binding carries them: not written on their own.
    taken: bool = False
    #: Done when :data:`JOB_ID_WAIT` has passed, or :meth:`hurry` was called. A future and a
    #: timer: a wait under ``asyncio.timeout`` ends by cancelling its task, which cost each
    #: Pod of the saturated run more than the rest of the delay.
    due: asyncio.Future[None] = field(init=False)
    _timer: asyncio.TimerHandle = field(init=False)

    def __post_init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.due = loop.create_future()
        self._timer = loop.call_later(JOB_ID_WAIT, self.hurry)

    def hurry(self) -> None:
        """Write them now (a newer write of the Pod waits behind this one, or it was bound)."""
        self._timer.cancel()
        if not self.due.done():
            self.due.set_result(None)


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


class RetryLater(LookupError):
    """Nothing can be done for this object yet: the worker backs off and looks again.
    ``room``: it waits for room on a Node (a Pod leaving a Node wakes it early)."""

    def __init__(self, why: str, *, room: bool = False) -> None:
        super().__init__(why)
        self.room = room


@dataclass
class PodMemory:
    """What the scheduler remembers of a Pod between reconciles (dropped when it goes)."""

    #: Pod uid -> its jobs that were lost or failed to launch, and were replaced.
    replaced: dict[str, set[int]] = field(default_factory=dict)
    #: Pod uids already told that annotations on them were ignored (one Event each).
    told_ignored: set[str] = field(default_factory=set)
    #: Pod uid -> the newest job id known before a submit whose answer was lost.
    uncertain_submits: dict[str, int] = field(default_factory=dict)
    #: Pod uid -> its jobs cancelled because their Node had no room for it.
    refitted: dict[str, set[int]] = field(default_factory=dict)
    #: Gang id -> its jobs sunk cancelled because the gang changed before they started.
    withdrawn: dict[str, set[int]] = field(default_factory=dict)
    #: Gang id -> its jobs sunk has asked Slurm to cancel (once: Slurm takes a moment).
    gang_cancelled: dict[str, set[int]] = field(default_factory=dict)
    #: Pod uid -> the (reason, message) of gang Events told it (a gang's reconcile repeats).
    told_gang: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    #: Gang id -> (its job, when that job was first seen started, monotonic seconds).
    gang_started: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: Node -> the Pods Slurm does not count last reported on it (told once while the same).
    told_not_counted: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def forget(self, uid: str) -> None:
        self.refitted.pop(uid, None)
        self.replaced.pop(uid, None)
        self.told_ignored.discard(uid)
        self.uncertain_submits.pop(uid, None)
        self.told_gang.pop(uid, None)

    def forget_gang(self, gang_id: str) -> None:
        """The gang has no Pod and no live job left."""
        for kept in (self.replaced, self.withdrawn, self.gang_cancelled, self.gang_started):
            kept.pop(gang_id, None)


class Executor:
    def __init__(self, cluster: Cluster, kube_port: KubePort, slurm: SlurmPort, *,
                 credential: Callable[[str], str], learn: Callable[[Job], object]) -> None:
        self.cluster = cluster
        self.kube = kube_port
        self.slurm = slurm
        #: A Pod's (or gang's) uid -> the credential its job shows the hook API.
        self.credential = credential
        self.learn = learn
        self.settings = cluster.settings
        self.owned = ownership.Keys.with_prefix(self.settings.annotation_prefix)
        self.memory = PodMemory()
        self._background: set[asyncio.Task[None]] = set()
        #: Pod uid -> the newest write of its annotations still going on in the background.
        self._annotating: dict[str, asyncio.Task[None]] = {}
        #: Pod uid -> its job id waiting out JOB_ID_WAIT (a binding may carry it).
        self._delayed: dict[str, DelayedWrite] = {}
        #: Background writes sent at once, at most: a burst of submissions cannot open a
        #: connection per Pod.
        self._sending = asyncio.Semaphore(self.settings.workers)
        self.nodes = NodeExecutor(cluster, kube_port, slurm, fire=self.fire)

    def fire(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background (Events: never on the hot path)."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- a Pod ----------------------------------------------------------------------------------
    async def apply_pod(self, pod: kube.Obj, record: PodRecord,
                        actions: Iterable[do.PodAction], *, tries: int = 0) -> None:
        """Apply one Pod's plan in order. ``tries``: failed reconciles of it so far."""
        uid = pod["metadata"]["uid"]
        for action in actions:
            match action:
                case do.PodEvent(reason, message, warning):
                    self.pod_event(pod, record, reason, message, warning=warning)
                case do.ReportIgnored(message):
                    self.memory.told_ignored.add(uid)
                    metrics.ANNOTATIONS_IGNORED.inc()
                    log.warning("pod %s: ignored scheduler-owned annotations: %s",
                                kube.key(pod), message)
                    self.pod_event(pod, record, "IgnoredAnnotations", message, warning=True)
                case do.Replace(lost_job):
                    self.memory.replaced.setdefault(uid, set()).add(lost_job)
                case do.Refit(job_id, why):
                    self.memory.refitted.setdefault(uid, set()).add(job_id)
                    metrics.REFITS.inc()
                    await self.cancel(job_id, kube.key(pod), why)
                case do.ReportNotCounted():
                    self._report_not_counted(action)
                case do.Annotate(annotations, note):
                    await self.annotate_pod(pod, annotations)
                    if note:
                        record.note("adopted", note)
                case do.Submit(description):
                    await self._submit(pod, record, dict(description), tries=tries)
                case do.Reject(reason, message):
                    await self._reject(pod, record, reason, message)
                case do.Bind(k8s_node, slurm_node, job_id):
                    await self._bind(pod, record, k8s_node, slurm_node, job_id)
                case do.CancelJob(job_id, why):
                    await self.cancel(job_id, kube.key(pod), why)
                case do.DeletePod(why, reason):
                    await self._delete_pod(pod, record, why, reason)
                case do.RetryLater(why, room):
                    raise RetryLater(why, room=room)

    def _report_not_counted(self, report: do.ReportNotCounted) -> None:
        """Pods Slurm does not count take the room where Slurm ran a job: said on the Node
        and on each of those Pods once for as long as the same Pods do (a refused binding
        repeats with every job Slurm runs there), and kept for the dashboard and the metric."""
        pods = ", ".join(report.pods)
        text = (f"Slurm ran job {report.job_id} on {report.slurm_node}, but Pods Slurm does "
                f"not count take the room on Node {report.k8s_node}: {pods}")
        metrics.child(metrics.NODE_PODS_NOT_COUNTED, report.k8s_node).set(len(report.pods))
        self.cluster.state.not_counted[report.slurm_node] = text
        if self.memory.told_not_counted.get(report.k8s_node) == report.pods:
            return
        self.memory.told_not_counted[report.k8s_node] = report.pods
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
        if record is not None:
            record.last_event = f"{reason}: {message}"
            record.note(reason, message)
        self.fire(self.kube.event(pod, kind="Pod", reason=reason, message=message,
                                  warning=warning))

    async def annotate_pod(self, pod: kube.Obj, annotations: Any) -> None:
        meta = pod["metadata"]
        if (writing := self._annotating.get(meta["uid"])) is not None:
            self._hurry(meta["uid"])
            await asyncio.wait([writing])  # a Pod's writes land in the order they were made
        if self.cluster.assumed.still_assumed(meta["uid"], annotations):
            return  # written already; the watch has not brought it back yet
        version = await self.kube.annotate("pods", meta["namespace"], meta["name"], annotations)
        self.cluster.assumed.wrote_annotations(meta["uid"], annotations, version,
                                               watched=self.cluster.watched("pods", pod))

    async def _submit(self, pod: kube.Obj, record: PodRecord, job: dict[str, Any], *,
                      tries: int) -> None:
        meta = pod["metadata"]
        record.job_description = job  # shown on the dashboard: without the credential below
        credential = self.credential(meta["uid"])
        job = {**job, "environment": [*job["environment"], f"SUNK_JOB_TOKEN={credential}"]}
        try:
            job_id = await self._submit_once(meta["uid"], job)
        except SlurmError as exc:
            metrics.SUBMIT_ERRORS.inc()
            if exc.permanent:
                await self._reject(pod, record, "SlurmRefused",
                                   f"Slurm refused the job: {exc.slurm_message}")
                return
            if tries & (tries - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure: not every retry
                self.pod_event(pod, record, "SubmitFailed",
                               f"Slurm did not take the job (try {tries + 1}, retrying "
                               f"with backoff): {exc.slurm_message}", warning=True)
            raise
        metrics.JOBS_SUBMITTED.inc()
        log.info("pod %s: submitted job %d", kube.key(pod), job_id)
        record.job_id = job_id  # the dashboard's line: the echo of the job id may not be looked at
        written = {self.owned.job_id: str(job_id), self.owned.pod_uid: meta["uid"],
                   self.owned.rejected: None}
        self.annotate_soon(pod, written, wait=True)
        record.note("JobSubmitted", f"Slurm job {job_id}")

    def annotate_soon(self, pod: kube.Obj, annotations: Mapping[str, str | None], *,
                      wait: bool = False) -> None:
        """Write ``annotations`` in the background, believed written from now on. For the job
        id after a submission: one worker handles a Pod at a time, so the Pod's binding waited
        behind this write, which an API server in a burst took seconds to answer while the job
        had started. Tried again until written, or the Pod is
        gone; a Pod's writes land in the order they were made. ``wait``: not before
        :data:`JOB_ID_WAIT`, unless hurried; a binding before then carries them."""
        uid = pod["metadata"]["uid"]
        self.cluster.assumed.assume_annotations(uid, annotations)
        self._hurry(uid)  # an older value waiting: replaced by this one, it writes nothing
        after = self._annotating.get(uid)
        delayed: DelayedWrite | None = None
        if wait:
            delayed = self._delayed[uid] = DelayedWrite(
                dict(annotations), alone=after is None or after.done())
        task = asyncio.create_task(self._write_annotations(
            pod, dict(annotations), after=after, delayed=delayed))
        self._annotating[uid] = task
        self._background.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._background.discard(finished)
            if self._annotating.get(uid) is finished:
                del self._annotating[uid]

        task.add_done_callback(done)

    def _hurry(self, uid: str) -> None:
        if (delayed := self._delayed.get(uid)) is not None:
            delayed.hurry()

    def _carried_by_binding(self, pod: kube.Obj) -> dict[str, str | None]:
        """The Pod's delayed job id, taken for its binding to carry (empty: none, or one a
        binding cannot carry: a binding sets annotations, it cannot remove one)."""
        meta = pod["metadata"]
        delayed = self._delayed.get(meta["uid"])
        if delayed is None:
            return {}
        delayed.hurry()  # bound now: nothing more to wait for
        present = [meta.get("annotations") or {},  # as the reconcile read it, and as watched
                   ((self.cluster.watched("pods", pod) or {}).get("metadata") or {}).get(
                       "annotations") or {}]
        if not delayed.alone or any(value is None and any(key in p for p in present)
                                    for key, value in delayed.annotations.items()):
            return {}  # written on its own, at once
        self._drop_delayed(meta["uid"], delayed)
        delayed.taken = True
        return delayed.annotations

    def _drop_delayed(self, uid: str, delayed: DelayedWrite) -> None:
        if self._delayed.get(uid) is delayed:
            del self._delayed[uid]

    async def _write_annotations(self, pod: kube.Obj, annotations: dict[str, str | None], *,
                                 after: asyncio.Task[None] | None,
                                 delayed: DelayedWrite | None = None) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if after is not None:
            await asyncio.wait([after])
        try:
            if delayed is not None:
                delayed.alone = True
                await delayed.due
            delay = ANNOTATE_RETRY
            while self.cluster.assumed.still_assumed(uid, annotations):
                try:
                    async with self._sending:
                        # a binding may take them until they go out, even while they wait
                        # for a slot (a burst: the case this is for)
                        if delayed is not None:
                            if delayed.taken:
                                return  # the binding carried them (or, failing, wrote them)
                            self._drop_delayed(uid, delayed)
                        if not self.cluster.assumed.still_assumed(uid, annotations):
                            return  # replaced, or the Pod gone, while waiting for the slot
                        version = await self.kube.annotate("pods", meta["namespace"],
                                                           meta["name"], annotations)
                except Exception as exc:  # whatever failed, the job id must not stay unwritten
                    if isinstance(exc, kube.KubeError) and exc.status == 404:
                        return  # the Pod is gone: its DELETED event forgets what was assumed
                    log.warning("pod %s: writing %s failed: %s (again in %.1fs)",
                                kube.key(pod), ", ".join(annotations), exc, delay,
                                exc_info=not isinstance(exc, kube.KubeError))
                    await asyncio.sleep(delay)
                    delay = min(30.0, 2 * delay)
                    continue
                if self._annotating.get(uid) is asyncio.current_task():
                    self.cluster.assumed.wrote_annotations(
                        uid, annotations, version, watched=self.cluster.watched("pods", pod))
                # else a newer write is assumed over this one: its version, not ours, ends it
                return
        finally:
            if delayed is not None:
                self._drop_delayed(uid, delayed)

    # -- a gang (sunk.plans.gangplan) --------------------------------------------------------------
    async def apply_gang(self, gang_id: str, pods: dict[str, kube.Obj],
                         steps: Iterable[tuple[str | None, do.PodAction]]) -> None:
        """Apply a gang's plan in order; its binds go last, all at once."""
        binds: list[tuple[kube.Obj, do.Bind]] = []
        later: do.RetryLater | None = None
        for target, action in steps:
            if target is None:
                match action:
                    case do.Replace(lost_job, counted):
                        into = self.memory.replaced if counted else self.memory.withdrawn
                        into.setdefault(gang_id, set()).add(lost_job)
                    case do.CancelJob(job_id, why):
                        await self.cancel(job_id, f"gang {gang_id[:8]}", why)
                        self.memory.gang_cancelled.setdefault(gang_id, set()).add(job_id)
                    case do.RetryLater():
                        later = action
                continue
            pod = pods[target]
            if isinstance(action, do.Bind):
                binds.append((pod, action))
                continue
            if isinstance(action, do.PodEvent):
                told = self.memory.told_gang.setdefault(pod["metadata"]["uid"], set())
                if (action.reason, action.message) in told:
                    continue
                told.add((action.reason, action.message))
            await self.apply_pod(pod, self.record(pod), (action,))
        # The members' Scheduled Events are sent once every binding has been answered: sent
        # as each member was bound, they competed with the last bindings for the API server.
        events: list[Callable[[], None]] = []
        results = await asyncio.gather(
            *(self._bind(pod, self.record(pod), b.k8s_node, b.slurm_node, b.job_id,
                         b.annotations, events=events) for pod, b in binds),
            return_exceptions=True)
        for send in events:
            send()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if later is not None:
            raise RetryLater(later.why, room=later.room)

    def record(self, pod: kube.Obj) -> PodRecord:
        """The Pod's line on the dashboard."""
        meta = pod["metadata"]
        return self.cluster.state.record(meta["namespace"], meta["name"], meta["uid"],
                                         kube.created(pod))

    async def submit_gang(self, gang: PodIdentity, members: list[kube.Obj],
                          job: dict[str, Any]) -> int:
        """Submit a gang's job; its id goes onto every member as a Pod's does (believed at
        once, written after :data:`JOB_ID_WAIT` unless the member's binding carries it)."""
        credential = self.credential(gang.uid)
        job = {**job, "environment": [*job["environment"], f"SUNK_JOB_TOKEN={credential}"]}
        try:
            job_id = await self._submit_once(gang.uid, job)
        except SlurmError:
            metrics.SUBMIT_ERRORS.inc()
            raise
        metrics.JOBS_SUBMITTED.inc()
        log.info("gang %s: submitted job %d for %d Pods", gang.key, job_id, len(members))
        for pod in members:
            self.annotate_soon(pod, {self.owned.job_id: str(job_id),
                                     self.owned.pod_uid: pod["metadata"]["uid"],
                                     self.owned.rejected: None}, wait=True)
        return job_id

    async def _submit_once(self, uid: str, job: dict[str, Any]) -> int:
        """Submit, unless an earlier try whose answer was lost (a timeout, an outage) did reach
        Slurm: jobs Slurm took since then are read, and one naming this Pod is adopted."""
        jobs = self.cluster.jobs
        since = self.memory.uncertain_submits.get(uid)
        if since is not None:  # kept until the lookup has succeeded: never submit blind
            for job_id in sorted(j for j in await self.slurm.job_states() if j > since
                                 and j not in jobs.jobs):
                if (found := await self.slurm.job(job_id)) is not None:
                    self.learn(found)
            del self.memory.uncertain_submits[uid]
            if (existing := jobs.by_uid.get(uid)) is not None and existing > since:
                log.info("pod uid %s: job %d from an earlier, unanswered submit adopted", uid,
                         existing)
                return existing
        newest = jobs.newest_id()
        sent = time.monotonic()
        try:
            job_id = await self.slurm.submit(job)
        except SlurmError as exc:
            if not exc.permanent:  # it may have reached Slurm: look before submitting again
                self.memory.uncertain_submits[uid] = newest
            raise
        # learned as any job read from Slurm (a Pod whose lost job had this id is woken) ...
        self.learn(Job(job_id=job_id, name=job["name"], state="PENDING", extra=job["extra"],
                       nodes="", reason="", raw={}, admin_comment=job["admin_comment"]))
        jobs.by_uid[uid] = job_id  # ... and the newest submission is the Pod's job
        jobs.submitted_at[job_id] = sent
        return job_id

    async def _reject(self, pod: kube.Obj, record: PodRecord, reason: str, message: str) -> None:
        metrics.PODS_REJECTED.inc()
        record.rejected = f"{reason}: {message}"
        self.pod_event(pod, record, reason, message, warning=True)
        await self.annotate_pod(pod, {self.owned.rejected: reason, self.owned.job_id: None,
                                      self.owned.pod_uid: pod["metadata"]["uid"]})
        log.info("pod %s rejected: %s: %s", kube.key(pod), reason, message)

    async def _bind(self, pod: kube.Obj, record: PodRecord, k8s_node: str, slurm_node: str,
                    job_id: int, annotations: Mapping[str, str] | None = None, *,
                    events: list[Callable[[], None]] | None = None) -> None:
        """Bind; its Scheduled Event is sent at once, or left in ``events`` for the caller."""
        # Checked and counted with no await between: two Pods bound at once to one Node
        # cannot both take its last room.
        if lacking := self.cluster.room(pod, k8s_node):
            raise RetryLater(f"Node {k8s_node} has no room any more: {'; '.join(lacking)}",
                             room=True)
        self.cluster.usage.assume_bound(pod, k8s_node)
        carried = self._carried_by_binding(pod)
        written = {**carried, **(annotations or {})}
        if self.owned.job_id in written:  # (a gang's) with the uid it is for, whatever goes first
            written.setdefault(self.owned.pod_uid, pod["metadata"]["uid"])
        try:
            await self.kube.bind(pod, k8s_node, {
                key: value for key, value in written.items() if value is not None})
        except BaseException as exc:
            self.cluster.usage.binding_failed(pod)  # not bound: hold nothing there
            if carried and isinstance(exc, Exception) and self.cluster.assumed.still_assumed(
                    pod["metadata"]["uid"], carried):  # (not when shutting down: cancelled)
                self.annotate_soon(pod, carried)  # not carried after all: written on its own
            raise
        watched = self.cluster.watched("pods", pod)
        self.cluster.assumed.bound(pod["metadata"]["uid"], watched=watched)
        if written:
            self.cluster.assumed.wrote_annotations(pod["metadata"]["uid"], written,
                                                   watched=watched)
        record.bound_at = time.time()
        record.k8s_node = k8s_node
        if self.cluster.state.not_counted.pop(slurm_node, None) is not None:
            metrics.child(metrics.NODE_PODS_NOT_COUNTED, k8s_node).set(0)
            self.memory.told_not_counted.pop(k8s_node, None)
        metrics.PODS_BOUND.inc()
        if record.time_to_bound is not None:
            metrics.BIND_LATENCY.observe(record.time_to_bound)
        log.info("pod %s: bound to %s (Slurm node %s)%s", kube.key(pod), k8s_node, slurm_node,
                 self._timings(job_id))
        job = self.cluster.jobs.get(job_id)
        account, qos = account_and_qos(job)
        if not (account and qos):  # the job as submitted, unpacked only when Slurm's is silent
            account, qos = account_and_qos(job, record.job_description)
        send = functools.partial(self.pod_event, pod, record, "Scheduled", scheduled_message(
            kube.key(pod), k8s_node, slurm_node, job_id, account=account, qos=qos))
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

    async def cancel(self, job_id: int, key: str, why: str) -> None:
        await self.slurm.cancel(job_id)
        metrics.JOBS_CANCELLED.inc()
        log.info("pod %s: cancelled job %d: %s", key, job_id, why)

    async def _delete_pod(self, pod: kube.Obj, record: PodRecord, why: str,
                          reason: str = "SlurmJobEnded") -> None:
        self.pod_event(pod, record, reason, f"{why}; deleting the Pod", warning=True)
        await self.kube.delete_pod(pod)
        metrics.PODS_DELETED.inc()
        log.info("pod %s: deleted: %s", kube.key(pod), why)

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
