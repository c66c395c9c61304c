"""The scheduler: Pods that name us get a placeholder Slurm job, then the Node Slurm chose.

Level-triggered. Each Pod is reconciled from two inputs, the Pod as the API server has it and
its job as Slurm has it (both in the cluster model, :mod:`sunk.model.cluster`), so the loop can stop
and start anywhere:

- the Pod informer wakes a Pod when it changes; the Slurm poller (:mod:`sunk.model.slurmwatch`)
  wakes the Pods whose jobs changed; the placeholder's ``started`` hook wakes its Pod at once;
- a work queue hands each Pod to one worker at a time;
- a reconcile gathers plain facts (:mod:`sunk.loops.podfacts`), :mod:`sunk.plans.podplan`
  turns them into actions, and the executor (:mod:`sunk.apply.executor`) carries them out;
- jobs whose Pod is gone are cancelled (:mod:`sunk.loops.orphans`).

On start it lists every job once and adopts the jobs it submitted earlier (each names its Pod's
uid in ``extra`` and carries the scheduler's stamp): a scheduler killed between submitting and
annotating submits nothing twice.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Sequence
from typing import assert_never

from sunk import kube, objects
from sunk.apply.executor import Executor
from sunk.loops import orphans
from sunk.loops.gangreconcile import GangReconciler
from sunk.loops.podfacts import PodFactReader
from sunk.loops.settled import SettledPods
from sunk.loops.waiting import WaitingReporter
from sunk.loops.workqueue import WorkQueue
from sunk.model.cluster import Cluster
from sunk.model.devices import device_mapping
from sunk.model.slurmwatch import SlurmWatch
from sunk.model.state import PodRecord
from sunk.plans import actions as do
from sunk.plans import ownership, podplan
from sunk.plans.decide import JobView
from sunk.plans.keys import GangKey, PodKey, QueueKey, ReleaseJob
from sunk.plans.translate import TranslateSettings
from sunk.policy.loader import PolicyStore
from sunk.runtime import metrics
from sunk.runtime.supervise import forever
from sunk.slurm.client import SlurmError
from sunk.slurm.job import Job, PodIdentity

log = logging.getLogger("sunk.loops.scheduler")


class Scheduler:
    def __init__(self, cluster: Cluster, watch: SlurmWatch, executor: Executor,
                 policies: PolicyStore) -> None:
        self.cluster, self.watch, self.executor, self.policies = cluster, watch, executor, policies
        self.settings = settings = cluster.settings
        self.queue: WorkQueue[QueueKey] = WorkQueue(
            observe_wait=metrics.child(metrics.QUEUE_WAIT, "pods").observe)
        self.owned = ownership.Keys.with_prefix(settings.annotation_prefix)
        self.pod_facts = PodFactReader(cluster, watch, executor, self.owned)
        self.translate_settings = TranslateSettings(
            scheduler_name=settings.scheduler_name, placeholder_script=settings.placeholder_script,
            gpu_resource=settings.gpu_resource, gpu_model_label=settings.gpu_model_label,
            gpu_types=settings.gpu_types, kill_wait_seconds=settings.slurm_kill_wait,
            devices=device_mapping(settings))
        self.gangs = GangReconciler(cluster, watch, executor, policies, self.translate_settings)
        #: Says on each Pod whose job waits in Slurm's queue why, and until when.
        self.waiting = WaitingReporter(cluster, executor)
        #: Pods waiting for room on some Node: woken when a Pod leaves a Node.
        self._waiting_for_room: set[QueueKey] = set()
        self._orphans_wake = asyncio.Event()  # Slurm answers again: look for orphans now
        #: What each Pod's last successful reconcile left: its echoes are not reconciled.
        self.settled = SettledPods(cluster, self.owned)

    # -- running -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Adopt existing jobs, then follow Slurm and reconcile Pods until cancelled. Without
        the ``scheduler`` component only the cluster model runs (for the syncer)."""
        if self.cluster.scheduling:
            await self.watch.adopt()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.cluster.run())
            await self.cluster.ready.wait()
            tasks.create_task(forever("polling Slurm's nodes", self.watch.poll_nodes))
            if self.cluster.scheduling:
                tasks.create_task(forever("polling Slurm's jobs", self.watch.poll_jobs))
                tasks.create_task(forever("collecting orphaned jobs", lambda: orphans.collect(
                    self.cluster, self.executor, wake=self._orphans_wake)))
                tasks.create_task(self.waiting.run())
                for _ in range(self.settings.workers):
                    tasks.create_task(self._work())
            # Everything built so far (modules, caches, compiled policies) lives as long as the
            # process: keep the collector from walking it again on every full collection, a
            # pause that was measured at ~55 ms with the caches of 1,000 Pods.
            gc.freeze()
            log.info("%s ready: components %s, watching %s", self.settings.scheduler_name,
                     ", ".join(self.settings.components),
                     ", ".join(self.settings.namespaces() or ["all namespaces"]))

    def wake(self, who: PodIdentity) -> None:
        """Reconcile the Pod a job of ours is for, unless the job only went from one waiting
        state to another since the Pod was settled: then only its dashboard line changes."""
        if who.gang:
            self.queue.add(GangKey(who.namespace, who.name))
            return
        key = PodKey(who.namespace, who.name)
        job_id, job = self.pod_facts.job_cached(who.uid)
        if job is not None and self.settled.only_waits(key, who.uid, job_id, job) and (
                record := self.cluster.state.pods.get(str(key))) is not None:
            self._show_job(record, job)
            return
        self.queue.add(key)

    def gang_changed(self, key: str) -> None:
        """A gang's batch Job or PodGroup changed (``namespace/source:name``)."""
        self.queue.add(GangKey.parse(key))

    def _requeue_all(self) -> None:
        for pod in self.cluster.pods():
            self.queue.add(PodKey.of(pod))

    def slurm_back(self) -> None:
        if self.cluster.ready.is_set() and self.cluster.scheduling:
            log.info("Slurm answers again; listing its jobs and looking at every Pod")
            self.executor.forget_cancels()  # a slurmctld that crashed may have lost them
            self.executor.fire(self.watch.relist())
            self._requeue_all()
            self._orphans_wake.set()  # jobs whose Pod went meanwhile: cancelled now

    def kube_back(self) -> None:
        if self.cluster.ready.is_set():
            log.info("looking at every Pod again: the API server was away")
            self._requeue_all()

    def job_stuck(self, job: Job, who: PodIdentity, why: str) -> None:
        """A job pending for a reason that needs a person: a Warning Event on its Pod (on
        every member of a gang)."""
        pods = self.cluster.gang_members(who) if who.gang else [
            p for p in [self.cluster.pod_of(who)] if p is not None]
        for pod in pods:
            self.executor.pod_event(pod, self.cluster.state.pods.get(kube.key(pod)),
                                    "SlurmJobStuck",
                                    f"Slurm keeps job {job.job_id} pending ({job.reason}): "
                                    f"{why}. It will not start by itself.", warning=True)

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            if isinstance(key, PodKey):  # an event while it runs is never taken for an echo
                self.settled.forget(key)
            try:
                later = await self.reconcile(key)
            except Exception as exc:  # a bug or an outage must not stop the worker
                metrics.RECONCILE_ERRORS.inc()
                delay = self.queue.failed(key)
                ours = not isinstance(exc, SlurmError | kube.KubeError)
                log.warning("%s %s: %s (retrying in %.1fs)", _kind(key), key, exc, delay,
                            exc_info=ours)
                if ours:
                    self._internal_error(key, exc, delay)
                self.queue.add_after(key, delay)
            else:
                self._later(key, later)
            finally:
                self.queue.done(key)

    def _later(self, key: QueueKey, later: do.RetryLater | None) -> None:
        """What a reconcile that ran through asked: nothing more; a look after ``after``
        seconds (a timeout is due); or a wait, backed off as a failure is (and woken early
        by room freed on a Node if it waits for room)."""
        if later is None or later.after is not None:
            self.queue.forget(key)
            if later is not None and later.after is not None:
                self.queue.add_after(key, later.after)
            return
        if later.room:
            self._waiting_for_room.add(key)
        metrics.RECONCILE_ERRORS.inc()
        delay = self.queue.failed(key)
        log.warning("%s %s: %s (retrying in %.1fs)", _kind(key), key, later.why, delay)
        self.queue.add_after(key, delay)

    def _internal_error(self, key: QueueKey, exc: Exception, delay: float) -> None:
        """A fault of sunk's while handling a Pod: counted, and told to the Pod (on the 1st,
        2nd, 4th, 8th ... failure in a row) as ours, not the Pod's: it is retried, never
        rejected."""
        metrics.INTERNAL_ERRORS.inc()
        failures = self.queue.failures(key)
        # a deleted Pod's job: no Pod to tell; a gang's: told on its members by its reconcile
        pod = self.cluster.pod(str(key)) if isinstance(key, PodKey) else None
        if pod is None or failures & (failures - 1):
            return
        self.executor.pod_event(
            pod, self.cluster.state.pods.get(kube.key(pod)), "InternalError",
            f"sunk failed while scheduling this Pod ({type(exc).__name__}: {exc}); the fault "
            f"is sunk's, not the Pod's: retrying in {delay:.0f}s (failure {failures}). The "
            "scheduler's log has the traceback.", warning=True)

    def room_freed(self, node: str) -> None:
        """A Pod left ``node``: the Pods waiting for room look again now, not after their
        backoff."""
        waiting, self._waiting_for_room = self._waiting_for_room, set()
        for key in waiting:
            self.queue.add(key)

    def on_pod(self, kind: str, pod: kube.Obj) -> None:
        key = PodKey.of(pod)
        if (gang_key := self.cluster.gang_of(pod)) is not None:
            self.queue.add(GangKey.parse(gang_key))  # a member changed: its gang looks again
        if kind == "DELETED":
            uid = objects.pod(pod).metadata.uid
            self.executor.forget_pod(uid)
            self.settled.forget(key)
            # The Pod object is gone: release its job now (reconcile no longer sees the Pod).
            if (job_id := self.cluster.jobs.by_uid.get(uid)) is not None:
                self.queue.add(ReleaseJob(key, uid, job_id))
            return
        if gang_key is None and self.settled.is_echo(key, pod) and (
                record := self.cluster.state.pods.get(str(key))) is not None:
            _show_pod(record, pod)
            return
        self.queue.add(key)

    # -- the reconcile: facts, plan, apply -------------------------------------------------------
    async def reconcile(self, key: QueueKey) -> do.RetryLater | None:
        """One look at a Pod, a gang or a deleted Pod's job; a wait if it must look again."""
        match key:
            case GangKey():
                return await self.gangs.reconcile(key, first_try=self.queue.failures(key) == 0)
            case ReleaseJob(pod, uid, job_id):
                await self._release(pod, uid, job_id)
                return None
            case PodKey():
                return await self._reconcile_pod(key)
            case _:
                assert_never(key)

    async def _release(self, pod: PodKey, uid: str, job_id: int) -> None:
        """The job of a Pod whose object is gone: cancelled unless it ended."""
        job = await self.pod_facts.job_view(job_id, uid)
        for action in podplan.plan_deleted(job_id, job):
            await self.executor.cancel(action.job_id, str(pod), action.why)

    async def _reconcile_pod(self, key: PodKey) -> do.RetryLater | None:
        pod = self.cluster.pod(str(key))
        if pod is None:
            return None
        gang_key = self.cluster.gang_of(pod)
        if gang_key is not None and self.gangs.claim(pod) is not None:
            self.queue.add(GangKey.parse(gang_key))  # a gang's member: its gang decides
            return None
        tries = self.queue.failures(key)
        facts = await self.pod_facts.gather(pod, tries=tries)
        record = self._record(pod, facts)
        plan = podplan.plan_pod(facts)
        steps: list[do.PodAction] = [*plan.actions]
        if plan.submit:  # what a submission needs is read only when there is one to make
            steps += await self._plan_submission(pod, first_try=tries == 0)
        if later := await self.executor.apply_pod(pod, record, steps, tries=tries):
            return later
        if gang_key is None:  # done: the watch's echo of what it wrote needs no second look
            self.settled.keep(key, pod, *self.pod_facts.job_cached(objects.pod(pod).metadata.uid))
        return None

    async def _plan_submission(self, pod: kube.Obj, *, first_try: bool
                               ) -> Sequence[do.PodAction]:
        """A new job's part of the plan: the policies' decision on the whole Pod and its
        Namespace, then :func:`podplan.plan_submission` (or a wait while any is missing)."""
        if (why := self.policies.not_in_force()) is not None:
            return [podplan.await_policies(why)]
        meta = objects.pod(pod).metadata
        namespace = self.cluster.namespace(meta.namespace)
        if namespace is None:  # its watch is behind the Pod's: policies may read it
            return [do.RetryLater(f"namespace {meta.namespace} not seen yet")]
        whole = await self.cluster.whole_pod(pod)
        if whole is None:  # gone, or replaced by a Pod of that name: its events follow
            return [do.RetryLater(f"pod {meta.key} is gone or was replaced")]
        decision = self.policies.evaluate(whole, namespace)
        return podplan.plan_submission(pod, decision, self.cluster.snapshot(),
                                       self.translate_settings, first_try=first_try,
                                       annotation_prefix=self.settings.annotation_prefix,
                                       claims=self.cluster.devices.claims_of(pod))

    def _record(self, pod: kube.Obj, facts: podplan.PodFacts) -> PodRecord:
        """The Pod's line on the dashboard, brought up to date."""
        meta, view = objects.pod(pod).metadata, facts.view
        rec = self.cluster.state.record(meta.namespace, meta.name, meta.uid, kube.created(pod))
        _show_pod(rec, pod)
        rec.job_id = view.job_id
        if view.rejected:
            rec.rejected = facts.owned.rejected
        if facts.job is not None:
            self._show_job(rec, facts.job)
        return rec

    @staticmethod
    def _show_job(rec: PodRecord, job: JobView) -> None:
        if job.state != rec.job_state:
            rec.note(f"job {job.state.lower()}")
        rec.job_state, rec.slurm_node, rec.pending_reason = job.state, job.node, job.reason


def _show_pod(rec: PodRecord, pod: kube.Obj) -> None:
    """The dashboard line's fields that come from the Pod itself."""
    typed = objects.pod(pod)
    rec.phase = "Terminating" if typed.metadata.terminating else typed.status.phase
    rec.k8s_node = typed.spec.node_name


def _kind(key: QueueKey) -> str:
    """What a queue key names, for the log."""
    return {PodKey: "pod", GangKey: "gang", ReleaseJob: "job of deleted pod"}[type(key)]
