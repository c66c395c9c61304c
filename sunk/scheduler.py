"""The scheduler: Pods that name us get a placeholder Slurm job, then the Node Slurm chose.

Level-triggered. Each Pod is reconciled by :func:`sunk.decide.decide` from two inputs, the Pod
as the API server has it and its job as Slurm has it, so the loop can stop and start anywhere:

- the Pod informer (list-then-watch) wakes a Pod when it changes;
- one shared Slurm poller reads every job's state in one cheap call, and a job's details only
  where they matter (:mod:`sunk.jobpoll`), and wakes the Pods whose jobs changed (no listing
  of every job per Pod, nor per poll);
- the placeholder job's ``started`` hook binds its Pod without waiting for a poll;
- a work queue hands each Pod to one worker at a time.

On start it lists every job once, and adopts the jobs it submitted earlier (each names its Pod's
uid in ``extra``): a scheduler killed between submitting and annotating submits nothing twice.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import logging
import time
from collections.abc import Mapping
from typing import Any

import kr8s.asyncio

from sunk import jobpoll, kube, metrics, placement, translate
from sunk.decide import JobView, PodView, Step, decide
from sunk.policy.loader import PolicyStore
from sunk.settings import Settings
from sunk.slurm import Job, SlurmClient, SlurmError
from sunk.state import PodRecord, SchedulerState
from sunk.workqueue import WorkQueue

log = logging.getLogger("sunk.scheduler")


def _timestamp(text: str | None) -> float:
    if not text:
        return time.time()
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Scheduler:
    def __init__(self, settings: Settings, api: kr8s.asyncio.Api, slurm: SlurmClient,
                 policies: PolicyStore, state: SchedulerState | None = None) -> None:
        self.settings = settings
        self.api = api
        self.slurm = slurm
        self.policies = policies
        self.state = state or SchedulerState()
        self.queue = WorkQueue()
        self.jobs: dict[int, Job] = {}
        #: Pod uid -> id of the newest job of ours for it (for adoption and cancellation).
        self.job_by_uid: dict[str, int] = {}
        self._slurm_nodes: frozenset[str] | None = None
        self._slurm_nodes_generation = 0
        self._slurm_to_k8s: tuple[int, dict[str, str]] | None = None
        self._snapshot: tuple[tuple[int, int, int], placement.Snapshot] | None = None
        self.job_id_key = settings.annotation("job-id")
        self.rejected_key = settings.annotation("rejected")
        self.translate_settings = translate.TranslateSettings(
            scheduler_name=settings.scheduler_name, placeholder_script=settings.placeholder_script,
            gpu_resource=settings.gpu_resource, gpu_model_label=settings.gpu_model_label,
            gpu_types=settings.gpu_types, kill_wait_seconds=settings.slurm_kill_wait)
        selector = f"spec.schedulerName={settings.scheduler_name}"
        namespaces = settings.namespaces()
        watched: list[str | None] = [None] if namespaces is None else list(namespaces)
        self.pod_informers = [
            kube.Informer(api, "pods", namespace=ns, field_selector=selector,
                          handler=self._on_pod)
            for ns in watched]
        self.node_informer = kube.Informer(api, "nodes")
        self.slurmd_informer = kube.Informer(
            api, "pods", namespace=settings.slurmd_namespace,
            label_selector=settings.slurmd_label_selector)
        self.ready = asyncio.Event()
        #: Pod uid -> set when that Pod object is gone (placeholder jobs wait on it).
        self._gone: dict[str, asyncio.Event] = {}
        self._background: set[asyncio.Task[None]] = set()
        #: Pod uid -> job id written onto it / Pods bound, until the watch shows it.
        self._assumed_job: dict[str, int] = {}
        self._assumed_bound: set[str] = set()

    # -- running -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Adopt existing jobs, start informers, pollers and workers; run until cancelled.
        Without the ``scheduler`` component only the shared caches run (for the syncer)."""
        scheduling = "scheduler" in self.settings.components
        if scheduling:
            await self._adopt_jobs()
        informers = [self.node_informer, self.slurmd_informer]
        if scheduling:
            informers += self.pod_informers
        async with asyncio.TaskGroup() as tasks:
            for informer in informers:
                tasks.create_task(informer.run())
            await asyncio.gather(*(i.synced.wait() for i in informers))
            tasks.create_task(self._poll_slurm_nodes())
            if scheduling:
                tasks.create_task(self._poll_slurm())
                tasks.create_task(self._collect_garbage())
                for _ in range(self.settings.workers):
                    tasks.create_task(self._work())
            self.ready.set()
            # Everything built so far (modules, caches, compiled policies) lives as long as the
            # process: keep the collector from walking it again on every full collection, a
            # pause that was measured at ~55 ms with the caches of 1,000 Pods.
            gc.freeze()
            log.info("%s ready: components %s, watching %s", self.settings.scheduler_name,
                     ", ".join(self.settings.components),
                     ", ".join(self.settings.namespaces() or ["all namespaces"]))

    async def _adopt_jobs(self) -> None:
        """One full job listing at start: learn every job of ours (the poll then reads only
        states)."""
        jobs = await self._slurm_retry("listing jobs", self.slurm.all_jobs)
        for job in jobs:
            self._learn(job)
        log.info("adopted %d jobs of ours from Slurm", len(self.jobs))

    async def _slurm_retry(self, what: str, call: Any) -> Any:
        delay = 0.5
        while True:
            try:
                result = await call()
                self._slurm_health(None)
                return result
            except SlurmError as exc:
                self._slurm_health(exc)
                log.warning("%s failed, retrying in %.1fs: %s", what, delay, exc)
                await asyncio.sleep(delay)
                delay = min(30.0, delay * 2)

    def _slurm_health(self, error: SlurmError | None) -> None:
        """What the last call to slurmrestd says of it (for /readyz, the dashboard, metrics)."""
        self.state.slurm_healthy, self.state.slurm_error = error is None, str(error or "")
        metrics.SLURM_UP.set(error is None)

    def _learn(self, job: Job) -> translate.PodIdentity | None:
        """Record a job if it is ours; return the Pod it is for.

        Slurm keeps a FAILED record of every submission it refused; such a record (finished,
        never placed, unknown to us) is not a job of a Pod, and must not wake the Pod again."""
        who, _ = translate.parse_extra(job.extra)
        if who is None or who.scheduler != self.settings.scheduler_name:
            return None
        if job.finished and not job.nodes and job.job_id not in self.jobs:
            return None
        self.jobs[job.job_id] = job
        newest = self.job_by_uid.get(who.uid)
        if newest is None or job.job_id >= newest:
            self.job_by_uid[who.uid] = job.job_id
        return who

    async def _poll_slurm(self) -> None:
        """The one Slurm poller: every job's state in one cheap call, a job's details only
        where they matter (:mod:`sunk.jobpoll`); jobs that changed wake their Pods."""
        while True:
            await asyncio.sleep(self.settings.slurm_poll_interval)
            asked = set(self.jobs)
            try:
                states = await self.slurm.job_states()
                self._slurm_health(None)
                await self._follow(states, asked)
            except SlurmError as exc:
                self._slurm_health(exc)
                log.warning("polling Slurm failed: %s", exc)

    async def _follow(self, states: Mapping[int, str], asked: set[int]) -> None:
        now = time.monotonic()
        followed = {job_id: jobpoll.Followed(job.state, translate.parse_extra(job.extra)[1],
                                             job.checked_at, job.reason)
                    for job_id, job in self.jobs.items()}
        plan = jobpoll.plan_poll(followed, states, now=now, asked=asked)
        for job_id, state in plan.changed.items():
            changed = self.jobs[job_id]
            changed.state, changed.checked_at = state, now
            if state != "PENDING":
                changed.reason = ""
            self._wake(changed)
        for job_id in plan.gone:
            self._forget(job_id)
        for job_id in plan.fetch:
            before = self.jobs.get(job_id)
            fresh = await self.slurm.job(job_id)
            if fresh is None:
                self._forget(job_id)
                continue
            if before is not None and translate.parse_extra(before.extra)[1] and not (
                    translate.parse_extra(fresh.extra)[1]):
                continue  # read before the started hook arrived: keep what the hook said
            self._learn(fresh)
            if before is None or (before.state, before.extra, before.nodes, before.reason) != (
                    fresh.state, fresh.extra, fresh.nodes, fresh.reason):
                self._wake(fresh)

    def _forget(self, job_id: int) -> None:
        """Slurm no longer knows the job (purged after MinJobAge, or lost): its Pod, if still
        there, is reconciled against a missing job."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return
        who, _ = translate.parse_extra(job.extra)
        if who is not None and self.job_by_uid.get(who.uid) == job_id:
            del self.job_by_uid[who.uid]
        self._wake(job)

    def _wake(self, job: Job) -> None:
        """Reconcile the Pod a job of ours is for."""
        who, _ = translate.parse_extra(job.extra)
        if who is not None:
            self.queue.add(who.key)

    async def _poll_slurm_nodes(self, interval: float = 2.0) -> None:
        """Slurm's nodes, now and then: which exist (for placement) and their state (for the
        dashboard). Cheap: one call for every node."""
        while True:
            try:
                nodes = await self.slurm.nodes()
            except SlurmError as exc:
                log.warning("listing Slurm nodes failed: %s", exc)
            else:
                names = frozenset(n["name"] for n in nodes)
                if names != self._slurm_nodes:
                    self._slurm_nodes = names
                    self._slurm_nodes_generation += 1
                self.state.slurm_nodes = {n["name"]: n for n in nodes}
            self._note_kube_health()
            await asyncio.sleep(interval)

    def _note_kube_health(self) -> None:
        """The API server's health, as the watches see it (for /readyz's neighbours: the
        dashboard header and ``sunk_kube_up``)."""
        informers = [*self.pod_informers, self.node_informer, self.slurmd_informer]
        errors = [f"{i.resource}: {i.last_error}" for i in informers if i.last_error]
        self.state.kube_healthy = not errors
        self.state.kube_error = "; ".join(errors)
        metrics.KUBE_UP.set(0 if errors else 1)

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self.reconcile(key)
            except Exception as exc:  # a bug or an outage must not stop the worker
                metrics.RECONCILE_ERRORS.inc()
                delay = self.queue.failed(key)
                log.warning("pod %s: %s (retrying in %.1fs)", key, exc, delay,
                            exc_info=not isinstance(exc, SlurmError | kube.KubeError))
                self.queue.add_after(key, delay)
            else:
                self.queue.forget(key)
            finally:
                self.queue.done(key)

    # -- events --------------------------------------------------------------------------------
    def _on_pod(self, kind: str, pod: kube.Obj) -> None:
        key = kube.key(pod)
        uid = pod["metadata"].get("uid", "")
        # What this process wrote is assumed only until the watch shows it (or the Pod goes).
        if kind == "DELETED" or self.job_id_key in (pod["metadata"].get("annotations") or {}):
            self._assumed_job.pop(uid, None)
        if kind == "DELETED" or (pod.get("spec") or {}).get("nodeName"):
            self._assumed_bound.discard(uid)
        if kind == "DELETED":
            # The Pod object is gone: release its job now (reconcile no longer sees the Pod).
            if (gone := self._gone.pop(uid, None)) is not None:
                gone.set()
            self.state.forget(key)
            if (job_id := self.job_by_uid.get(uid)) is not None:
                self.queue.add(f"{key}#{uid}#{job_id}")
            return
        self.queue.add(key)

    async def _collect_garbage(self, interval: float = 30.0) -> None:
        """Jobs of ours whose Pod no longer exists are cancelled (a missed DELETED event, or a
        Pod deleted while the scheduler was down). Bound Pods whose job is gone are handled by
        reconcile itself (decide: DELETE_POD)."""
        while True:  # first right away: orphans left while the scheduler was down go now
            live = {p["metadata"]["uid"] for inf in self.pod_informers for p in inf.cache.values()}
            for job_id, job in list(self.jobs.items()):
                who, _ = translate.parse_extra(job.extra)
                if who is None or job.finished or who.uid in live:
                    continue
                try:
                    await self._cancel(job_id, who.key, "orphaned: its Pod no longer exists")
                    metrics.ORPHANS_CANCELLED.inc()
                except SlurmError as exc:
                    log.warning("cancelling orphaned job %d failed: %s", job_id, exc)
            await asyncio.sleep(interval)

    # -- the hook API's questions ----------------------------------------------------------------
    def pod_of_job(self, job_id: int) -> tuple[translate.PodIdentity, kube.Obj | None] | None:
        """The Pod a job of ours is for, and that Pod if it still exists (None: gone).
        None if the job is not one of ours."""
        job = self.jobs.get(job_id)
        who = translate.parse_extra(job.extra)[0] if job else None
        if who is None or who.scheduler != self.settings.scheduler_name:
            return None
        pod = self._pod(who.key)
        if pod is not None and pod["metadata"].get("uid") != who.uid:
            pod = None  # a new Pod under the same name is not this job's Pod
        return who, pod

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None:
        """The placeholder job got its termination signal: delete its Pod (with the Pod's own
        grace period). Returns the Pod's key and whether it is already gone."""
        found = self.pod_of_job(job_id)
        if found is None:
            return None
        who, pod = found
        if pod is None:
            return who.key, True
        if not pod["metadata"].get("deletionTimestamp"):
            record = self.state.pods.get(who.key)
            await self._event(pod, record, "SlurmJobTerminating",
                              f"Slurm is ending job {job_id} on {node}; deleting the Pod",
                              warning=True)
            await kube.delete_pod(self.api, pod)
            metrics.PODS_DELETED.inc()
        return who.key, False

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None:
        """The placeholder script says its job started on ``node``, right after writing
        ": started" into the job's extra (which stays the source of truth, and the next poll
        confirms). The caller holds the hook token, so the word of a job we submitted is taken:
        its Pod is bound now, without a call to Slurm or a wait for the next poll."""
        job = self.jobs.get(job_id)
        who = translate.parse_extra(job.extra)[0] if job else None
        if job is None or who is None or job.finished:
            return None
        if not job.extra.endswith(translate.STARTED):
            job.extra += translate.STARTED
        job.state, job.nodes = "RUNNING", node
        self.queue.add(who.key)
        return who.key, self._pod(who.key) is None

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None:
        """The job reached KillWait with its Pod still there: drain its Slurm node, naming the
        Pod, so nothing else lands there until someone looks."""
        found = self.pod_of_job(job_id)
        if found is None:
            return None
        who, pod = found
        if pod is None:
            return who.key, True
        reason = (f"sunk: Pod {who.key} still terminating at KillWait (job {job_id}); "
                  "drained so nothing else lands here")
        await self.slurm.update_node(node, {"state": ["DRAIN"], "reason": reason})
        await self._event(pod, self.state.pods.get(who.key), "SlurmNodeDrained",
                          f"{node}: {reason}", warning=True)
        log.warning("drained Slurm node %s: %s", node, reason)
        return who.key, False

    async def wait_pod_gone(self, job_id: int, within: float) -> tuple[str, bool] | None:
        found = self.pod_of_job(job_id)
        if found is None:
            return None
        who, pod = found
        if pod is None:
            return who.key, True
        gone = self._gone.setdefault(who.uid, asyncio.Event())
        try:
            async with asyncio.timeout(within):
                await gone.wait()
        except TimeoutError:
            return who.key, False
        return who.key, True

    # -- the reconcile ---------------------------------------------------------------------------
    def _pod(self, key: str) -> kube.Obj | None:
        namespace = key.split("/", 1)[0]
        for informer in self.pod_informers:
            if informer.namespace in (None, namespace) and key in informer.cache:
                return informer.cache[key]
        return None

    def _pod_view(self, pod: kube.Obj) -> PodView:
        """The Pod as decide() sees it: the informer's copy, plus what this process wrote and
        the watch has not brought back yet (as kube-scheduler's assume cache does), so a
        wake-up in between does not annotate or bind a second time."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        job_id = annotations.get(self.job_id_key)
        uid = meta.get("uid", "")
        return PodView(
            phase=(pod.get("status") or {}).get("phase", "Pending"),
            bound=bool(spec.get("nodeName")) or uid in self._assumed_bound,
            deleting=bool(meta.get("deletionTimestamp")),
            job_id=int(job_id) if job_id and job_id.isdigit() else self._assumed_job.get(uid),
            rejected=self.rejected_key in annotations,
        )

    async def _job_view(self, job_id: int | None) -> JobView | None:
        if job_id is None:
            return None
        job = self.jobs.get(job_id)
        if job is None:
            job = await self.slurm.job(job_id)
            if job is None:
                return None
            self.jobs[job_id] = job
        _, started = translate.parse_extra(job.extra)
        return JobView(state=job.state, started=started, node=job.nodes)

    async def reconcile(self, key: str) -> None:
        if "#" in key:  # a deleted Pod's job: "ns/name#uid#job"
            _, _, job_id = key.split("#")
            job = await self._job_view(int(job_id))
            if decide(None, job) is Step.CANCEL_JOB:
                await self._cancel(int(job_id), key.split("#")[0], "its Pod was deleted")
            return
        pod = self._pod(key)
        if pod is None:
            return
        view = self._pod_view(pod)
        job = await self._job_view(view.job_id)
        record = self._record(pod, view, job)
        step = decide(view, job)
        if step is Step.SUBMIT:
            await self._submit(pod, record)
        elif step is Step.BIND and job is not None:
            await self._bind(pod, record, job)
        elif step is Step.CANCEL_JOB and view.job_id is not None:
            await self._cancel(view.job_id, key, f"its Pod is {view.phase.lower()}"
                               if not view.deleting else "its Pod is being deleted")
        elif step is Step.DELETE_POD:
            await self._delete_pod(pod, record, job)

    def _record(self, pod: kube.Obj, view: PodView, job: JobView | None) -> PodRecord:
        meta = pod["metadata"]
        rec = self.state.record(meta["namespace"], meta["name"], meta["uid"],
                                _timestamp(meta.get("creationTimestamp")))
        rec.phase = "Terminating" if view.deleting else view.phase
        rec.job_id = view.job_id
        rec.k8s_node = (pod.get("spec") or {}).get("nodeName") or ""
        if view.rejected:
            rec.rejected = (meta.get("annotations") or {}).get(self.rejected_key, "")
        if job is not None:
            if job.state != rec.job_state:
                rec.note(f"job {job.state.lower()}")
            rec.job_state, rec.slurm_node = job.state, job.node
            cached = self.jobs.get(view.job_id or -1)
            rec.pending_reason = cached.reason if cached and job.state == "PENDING" else ""
        return rec

    # -- steps -----------------------------------------------------------------------------------
    async def _event(self, pod: kube.Obj, record: PodRecord | None, reason: str, message: str,
                     warning: bool = False) -> None:
        """Record an Event on the Pod, off the hot path: binding never waits for it."""
        if record is not None:
            record.last_event = f"{reason}: {message}"
            record.note(reason, message)
        task = asyncio.create_task(kube.event(
            self.api, pod, reason=reason, message=message,
            type_="Warning" if warning else "Normal", component=self.settings.scheduler_name))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def slurm_to_k8s(self) -> dict[str, str]:
        """Slurm node name -> Kubernetes Node name, from the live slurmd Pods (computed again
        only when a slurmd Pod changed; callers must not modify it)."""
        generation = self.slurmd_informer.generation
        if self._slurm_to_k8s is not None and self._slurm_to_k8s[0] == generation:
            return self._slurm_to_k8s[1]
        mapping = {}
        for p in self.slurmd_informer.cache.values():
            spec = p.get("spec") or {}
            if spec.get("hostname") and spec.get("nodeName") and not (
                    p["metadata"].get("deletionTimestamp")):
                mapping[spec["hostname"]] = spec["nodeName"]
        self._slurm_to_k8s = (generation, mapping)
        return mapping

    def snapshot(self) -> placement.Snapshot:
        """The cluster as placement sees it; built again only when a Node, a slurmd Pod or
        the list of Slurm nodes changed (not for every Pod)."""
        version = (self.node_informer.generation, self.slurmd_informer.generation,
                   self._slurm_nodes_generation)
        if self._snapshot is not None and self._snapshot[0] == version:
            return self._snapshot[1]
        slurm_to_k8s = self.slurm_to_k8s()
        nodes = {
            name: placement.NodeInfo(
                name=name, labels=n["metadata"].get("labels") or {},
                taints=tuple((n.get("spec") or {}).get("taints") or ()),
                unschedulable=bool((n.get("spec") or {}).get("unschedulable")))
            for name, n in self.node_informer.cache.items()}
        snapshot = placement.Snapshot(slurm_to_k8s=slurm_to_k8s, nodes=nodes,
                                      slurm_nodes=self._slurm_nodes)
        self._snapshot = (version, snapshot)
        return snapshot

    def _namespace(self, name: str) -> Mapping[str, Any] | None:
        return None  # namespaceObject: filled once the scheduler watches Namespaces

    async def _submit(self, pod: kube.Obj, record: PodRecord) -> None:
        meta = pod["metadata"]
        existing = self.job_by_uid.get(meta["uid"])
        if existing is not None and (earlier := self.jobs.get(existing)) and not earlier.finished:
            await self._annotate(pod, {self.job_id_key: str(existing)})
            self._assumed_job[meta["uid"]] = existing
            record.note("adopted", f"job {existing}")
            log.info("pod %s: adopted job %d", kube.key(pod), existing)
            return
        decision = self.policies.evaluate(pod, self._namespace(meta["namespace"]))
        for warning in decision.warnings:
            await self._event(pod, record, warning.reason, f"{warning.policy}: {warning.message}",
                              warning=True)
        if not decision.allowed:
            reason = decision.reason or "PolicyDenied"
            metrics.PODS_REJECTED.inc()
            record.rejected = f"{reason}: {decision.message}"
            await self._event(pod, record, reason, decision.message, warning=True)
            await self._annotate(pod, {self.rejected_key: reason})
            log.info("pod %s rejected: %s: %s", kube.key(pod), reason, decision.message)
            return
        try:
            job = translate.job_description(pod, decision.mappings, self.snapshot(),
                                            self.translate_settings)
        except (ValueError, KeyError, TypeError) as exc:
            record.rejected = f"InvalidPod: {exc}"
            await self._event(pod, record, "InvalidPod", str(exc), warning=True)
            await self._annotate(pod, {self.rejected_key: "InvalidPod"})
            return
        record.job_description = job
        try:
            job_id = await self.slurm.submit(job)
        except SlurmError as exc:
            metrics.SUBMIT_ERRORS.inc()
            tries = self.queue.failures(kube.key(pod))
            if tries & (tries - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure: not every retry
                await self._event(pod, record, "SubmitFailed",
                                  f"Slurm did not take the job (try {tries + 1}, retrying "
                                  f"with backoff): {exc}", warning=True)
            raise
        self._learn(Job(job_id=job_id, name=job["name"], state="PENDING", extra=job["extra"],
                        nodes="", reason="", raw={}))
        metrics.JOBS_SUBMITTED.inc()
        log.info("pod %s: submitted job %d", kube.key(pod), job_id)
        await self._annotate(pod, {self.job_id_key: str(job_id)})
        self._assumed_job[meta["uid"]] = job_id
        record.note("JobSubmitted", f"Slurm job {job_id}")

    async def _annotate(self, pod: kube.Obj, annotations: dict[str, str | None]) -> None:
        meta = pod["metadata"]
        await kube.annotate(self.api, "pods", meta["namespace"], meta["name"], annotations)

    async def _bind(self, pod: kube.Obj, record: PodRecord, job: JobView) -> None:
        k8s_node = self.snapshot().slurm_to_k8s.get(job.node)
        if k8s_node is None:
            await self._event(pod, record, "NoNodeForSlurmNode",
                              f"no slurmd Pod has hostname {job.node}; waiting", warning=True)
            raise LookupError(f"Slurm node {job.node} has no slurmd Pod")
        await kube.bind(self.api, pod, k8s_node)
        self._assumed_bound.add(pod["metadata"]["uid"])
        record.bound_at = time.time()
        record.k8s_node = k8s_node
        metrics.PODS_BOUND.inc()
        if record.time_to_bound is not None:
            metrics.BIND_LATENCY.observe(record.time_to_bound)
        log.info("pod %s: bound to %s (Slurm node %s)", kube.key(pod), k8s_node, job.node)
        await self._event(pod, record, "Scheduled",
                          f"Successfully assigned {kube.key(pod)} to {k8s_node} "
                          f"(Slurm node {job.node}, job {record.job_id})")

    async def _cancel(self, job_id: int, key: str, why: str) -> None:
        await self.slurm.cancel(job_id)
        metrics.JOBS_CANCELLED.inc()
        log.info("pod %s: cancelled job %d: %s", key, job_id, why)

    async def _delete_pod(self, pod: kube.Obj, record: PodRecord, job: JobView | None) -> None:
        what = f"job {record.job_id} {job.state.lower()}" if job else \
            f"job {record.job_id} no longer exists in Slurm"
        await self._event(pod, record, "SlurmJobEnded", f"{what}; deleting the Pod", warning=True)
        await kube.delete_pod(self.api, pod)
        metrics.PODS_DELETED.inc()
        log.info("pod %s: deleted: %s", kube.key(pod), what)
