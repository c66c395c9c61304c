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
import contextlib
import datetime
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import kr8s.asyncio

from sunk import jobpoll, kube, metrics, ownership, placement, slurmtext, translate
from sunk.decide import JobView, PodView, Step, decide
from sunk.hookauth import HookKeys, HookRefused, job_owner
from sunk.policy.loader import PolicyStore
from sunk.settings import Settings
from sunk.slurm import Job, SlurmClient, SlurmError
from sunk.state import PodRecord, SchedulerState
from sunk.workqueue import WorkQueue

log = logging.getLogger("sunk.scheduler")

#: Seconds without an answer from Slurm (past the poll interval) after which it counts as down.
SLURM_SILENCE = 3.0
#: How often a Pod not yet bound gets a new job when Slurm lost its job or it failed to launch.
MAX_RESUBMITS = 3


async def forever(what: str, loop: Callable[[], Awaitable[None]]) -> None:
    """Run a background loop for the life of the process: a bug or an outage the loop did not
    expect is logged and the loop starts again (backing off), never ending the scheduler."""
    delay = 1.0
    while True:
        started = time.monotonic()
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; starting it again in %.0fs", what, delay)
        else:
            log.error("%s stopped; starting it again in %.0fs", what, delay)
        if time.monotonic() - started > 60:
            delay = 1.0
        await asyncio.sleep(delay)
        delay = min(30.0, delay * 2)


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
        self.keys = HookKeys(settings.hook_tokens)
        self.owned = ownership.Keys.with_prefix(settings.annotation_prefix)
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
        #: Pod uid -> annotations written onto it / Pods bound, until the watch shows them
        #: (as kube-scheduler's assume cache: a wake-up in between writes nothing twice).
        self._assumed_written: dict[str, dict[str, str | None]] = {}
        self._assumed_bound: set[str] = set()
        #: Pod uids already told that annotations on them were ignored (one Event each).
        self._disowned: set[str] = set()
        self._slurm_answered_at = time.monotonic()
        self._kube_probe_error = ""
        #: Pod uid -> its jobs that were lost or failed to launch, and were replaced.
        self._resubmits: dict[str, set[int]] = {}
        #: Jobs whose extra names a Pod but which the scheduler did not submit (logged once).
        self._impostors: set[int] = set()
        #: Pod uid -> the newest job id known before a submit whose answer was lost.
        self._uncertain_submits: dict[str, int] = {}
        #: (job id, pending reason) pairs already reported as stuck (one Event each).
        self._stuck_reported: set[tuple[int, str]] = set()

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
            tasks.create_task(forever("polling Slurm's nodes", self._poll_slurm_nodes))
            tasks.create_task(forever("probing the API server", self._probe_kube))
            if scheduling:
                tasks.create_task(forever("polling Slurm's jobs", self._poll_slurm))
                tasks.create_task(forever("collecting orphaned jobs", self._collect_garbage))
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
        """What the last call to slurmrestd says of it (for /readyz, the dashboard, metrics).
        Back from an outage: every Pod is looked at again now, not when its backoff ends."""
        recovered = error is None and not self.state.slurm_healthy
        if error is None:
            self._slurm_answered_at = time.monotonic()
        self.state.slurm_healthy, self.state.slurm_error = error is None, str(error or "")
        metrics.SLURM_UP.set(error is None)
        if recovered and self.ready.is_set():
            log.info("Slurm answers again; listing its jobs and looking at every Pod")
            self._fire(self._relist_jobs())
            self._requeue_all()

    def _requeue_all(self) -> None:
        for informer in self.pod_informers:
            for key in informer.cache:
                self.queue.add(key)

    def _fire(self, coro: Any) -> None:
        """Run ``coro`` in the background (an Event: never on the hot path)."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _learn(self, job: Job) -> translate.PodIdentity | None:
        """Record a job if it is ours; return the Pod it is for.

        Slurm keeps a FAILED record of every submission it refused; such a record (finished,
        never placed, unknown to us) is not a job of a Pod, and must not wake the Pod again."""
        who, _ = translate.parse_extra(job.extra)
        if who is None or who.scheduler != self.settings.scheduler_name:
            return None
        if job.admin_comment != translate.admin_comment(who):
            # Its extra names a Pod, but the scheduler did not submit it: a user's job that
            # copied a placeholder's extra must never pass for that Pod's job.
            if job.job_id not in self._impostors:
                self._impostors.add(job.job_id)
                log.warning("job %d claims to be Pod %s's (extra) but was not submitted by "
                            "this scheduler (admin_comment %r): ignored", job.job_id, who.key,
                            job.admin_comment[:80])
            return None
        if job.finished and not job.nodes and job.job_id not in self.jobs:
            return None
        before = self.jobs.get(job.job_id)
        earlier = translate.parse_extra(before.extra)[0] if before is not None else None
        if earlier is not None and earlier.uid != who.uid:
            # Slurm reuses a job id after it lost the job (a slurmctld that crashed before
            # saving its state): the id is now another Pod's, the old Pod's job is gone.
            log.warning("job %d is now %s's, no longer %s's: Slurm lost the earlier job",
                        job.job_id, who.key, earlier.key)
            if self.job_by_uid.get(earlier.uid) == job.job_id:
                del self.job_by_uid[earlier.uid]
            self.queue.add(earlier.key)
        self.jobs[job.job_id] = job
        newest = self.job_by_uid.get(who.uid)
        if newest is None or job.job_id >= newest or newest not in self.jobs:
            self.job_by_uid[who.uid] = job.job_id
        return who

    async def _relist_jobs(self) -> None:
        """After an outage of Slurm: every job again, in full. A slurmctld that crashed comes
        back with the state it last saved: jobs submitted just before are gone, and their ids
        are given to new jobs. What was lost is forgotten (its Pod is reconciled: submitted
        again if it was not bound yet), what moved to another Pod is learned anew."""
        try:
            listed = await self.slurm.all_jobs()
        except SlurmError as exc:
            log.warning("listing jobs after Slurm came back failed: %s", exc)
            return
        fresh = {job.job_id: job for job in listed}
        for job_id in [j for j in self.jobs if j not in fresh]:
            self._forget(job_id)
        for job in listed:
            if self._learn(job) is not None:
                self._wake(job)
        log.info("Slurm came back: %d jobs of ours", len(self.jobs))

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
                self._report_stuck(fresh)

    def _report_stuck(self, job: Job) -> None:
        """A job pending for a reason that means "not without a person" (held, an invalid
        account, a constraint no node meets): a Warning Event on its Pod, once per reason."""
        why = slurmtext.never_starts(job.reason) if job.state == "PENDING" else None
        if why is None or (job.job_id, job.reason) in self._stuck_reported:
            return
        self._stuck_reported.add((job.job_id, job.reason))
        found = self.pod_of_job(job.job_id)
        if found is None or (pod := found[1]) is None:
            return
        who = found[0]
        log.warning("pod %s: job %d pending (%s): %s", who.key, job.job_id, job.reason, why)
        self._fire(self._event(pod, self.state.pods.get(who.key), "SlurmJobStuck",
                               f"Slurm keeps job {job.job_id} pending ({job.reason}): {why}. "
                               "It will not start by itself.", warning=True))

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
                self._slurm_health(exc)
                log.warning("listing Slurm nodes failed: %s", exc)
            else:
                self._slurm_health(None)
                names = frozenset(n["name"] for n in nodes)
                if names != self._slurm_nodes:
                    self._slurm_nodes = names
                    self._slurm_nodes_generation += 1
                self.state.slurm_nodes = {n["name"]: n for n in nodes}
            self._note_kube_health()
            await asyncio.sleep(interval)

    def slurm_problem(self) -> str:
        """What is wrong with Slurm ("" if nothing): its last error, or a silence. A call to
        slurmrestd whose slurmctld is gone can hang for a while before it fails: no answer
        for :data:`SLURM_SILENCE` seconds past the poll interval counts as down."""
        if not self.state.slurm_healthy:
            return self.state.slurm_error or "no answer yet"
        silent = time.monotonic() - self._slurm_answered_at - self.settings.slurm_poll_interval
        if silent > SLURM_SILENCE:
            return f"no answer from slurmrestd for {silent:.0f}s"
        return ""

    def kube_problem(self) -> str:
        """What is wrong with the API server, as the watches see it ("" if nothing): for
        /readyz, the dashboard header and ``sunk_kube_up``."""
        informers = [*self.pod_informers, self.node_informer, self.slurmd_informer]
        problems = [f"{i.resource}: {i.last_error}" for i in informers if not i.healthy]
        if self._kube_probe_error:
            problems.append(f"a read failed: {self._kube_probe_error}")
        return "; ".join(problems)

    async def _probe_kube(self, interval: float = 1.0) -> None:
        """A small read every second: an API server that shuts down gracefully stops taking
        requests at once but keeps the open watches for a while, so the watches alone would
        call it healthy for too long."""
        while True:
            try:
                async with asyncio.timeout(2 * interval):
                    await kube.request(self.api, "GET", "nodes", params={"limit": "1"})
            except (kube.KubeError, TimeoutError) as exc:
                self._kube_probe_error = str(exc) or "no answer within 2s"
            else:
                self._kube_probe_error = ""
            self._note_kube_health()
            await asyncio.sleep(interval)

    def _note_kube_health(self) -> None:
        problem = self.kube_problem()
        recovered = not problem and not self.state.kube_healthy
        self.state.kube_healthy, self.state.kube_error = not problem, problem
        metrics.KUBE_UP.set(0 if problem else 1)
        if recovered and self.ready.is_set():
            log.info("the API server answers again; looking at every Pod")
            self._requeue_all()

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
        written = self._assumed_written.get(uid)
        annotations = pod["metadata"].get("annotations") or {}
        if kind == "DELETED" or (written is not None and all(
                annotations.get(k) == v for k, v in written.items())):
            self._assumed_written.pop(uid, None)
        if kind == "DELETED" or (pod.get("spec") or {}).get("nodeName"):
            self._assumed_bound.discard(uid)
        if kind == "DELETED":
            self._disowned.discard(uid)
            self._resubmits.pop(uid, None)
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
    # Each checks the call against what Slurm says of the job (the caller's credential is
    # checked by the hook API): a call that does not match is refused with the reason.
    def job_owner(self, job_id: int) -> str | None:
        """What the job's credential is bound to (its Pod), or None if it is not ours."""
        job = self.jobs.get(job_id)
        who = translate.parse_extra(job.extra)[0] if job else None
        if who is None or who.scheduler != self.settings.scheduler_name:
            return None
        return job_owner(who.scheduler, who.uid)

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

    @contextlib.asynccontextmanager
    async def _answering(self, what: str) -> AsyncIterator[None]:
        """An outage while answering a hook: the caller is told to retry (503), not failed."""
        try:
            yield
        except SlurmError as exc:
            raise HookRefused(503, f"{what}: Slurm did not answer: {exc}", retry_after=5) from exc
        except kube.KubeError as exc:
            raise HookRefused(503, f"{what}: the API server did not answer: {exc}",
                              retry_after=5) from exc

    async def _fresh_job(self, job_id: int) -> Job:
        """The job as Slurm has it now (hooks that act on Slurm's word read it first)."""
        async with self._answering(f"reading job {job_id}"):
            fresh = await self.slurm.job(job_id)
        if fresh is None:
            raise HookRefused(409, f"Slurm has no job {job_id}")
        self._learn(fresh)
        return fresh

    async def job_terminating(self, job_id: int, node: str) -> tuple[str, bool] | None:
        """The placeholder job got its termination signal: delete its Pod (with the Pod's own
        grace period). Returns the Pod's key and whether it is already gone."""
        found = self.pod_of_job(job_id)
        if found is None:
            return None
        who, pod = found
        cached = self.jobs[job_id]
        if cached.state == "PENDING" and (await self._fresh_job(job_id)).state == "PENDING":
            raise HookRefused(409, f"Slurm shows job {job_id} pending: no script of it runs, "
                                   "so nothing of it is ending")
        if pod is None:
            return who.key, True
        if not pod["metadata"].get("deletionTimestamp"):
            record = self.state.pods.get(who.key)
            async with self._answering(f"deleting Pod {who.key}"):
                await kube.delete_pod(self.api, pod)
            await self._event(pod, record, "SlurmJobTerminating",
                              f"Slurm is ending job {job_id} on {node}; deleting the Pod",
                              warning=True)
            metrics.PODS_DELETED.inc()
        return who.key, False

    async def job_started(self, job_id: int, node: str) -> tuple[str, bool] | None:
        """The placeholder script says its job started on ``node``, right after writing
        ": started" into the job's extra. Its word is checked against Slurm's (one read of the
        job): bound only if Slurm runs the job on that node and its extra says started. The
        Pod is then bound now, without waiting for the next poll."""
        found = self.pod_of_job(job_id)
        if found is None:
            return None
        who, pod = found
        fresh = await self._fresh_job(job_id)
        if fresh.state != "RUNNING":
            raise HookRefused(409, f"Slurm shows job {job_id} {fresh.state.lower()}, not "
                                   "running: its Pod is not bound")
        if node not in slurmtext.expand_hostlist(fresh.nodes):
            raise HookRefused(409, f"Slurm runs job {job_id} on {fresh.nodes}, not on {node}")
        if not translate.parse_extra(fresh.extra)[1]:
            raise HookRefused(409, f"job {job_id}'s extra does not say started: the "
                                   "placeholder writes it before it calls")
        self._wake(fresh)
        return who.key, pod is None

    async def drain_for_job(self, job_id: int, node: str) -> tuple[str, bool] | None:
        """The job reached KillWait with its Pod still there: drain its Slurm node, naming the
        Pod, so nothing else lands there until someone looks."""
        found = self.pod_of_job(job_id)
        if found is None:
            return None
        who, pod = found
        nodes = self.jobs[job_id].nodes or (await self._fresh_job(job_id)).nodes
        if node not in slurmtext.expand_hostlist(nodes):
            raise HookRefused(409, f"job {job_id} was given {nodes or 'no node'}, not {node}: "
                                   "only its own node can be drained for it")
        if pod is None:
            return who.key, True
        reason = (f"sunk: Pod {who.key} still terminating at KillWait (job {job_id}); "
                  "drained so nothing else lands here")
        async with self._answering(f"draining {node}"):
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

    async def _ownership(self, pod: kube.Obj) -> ownership.Ownership:
        """What the Pod's scheduler-owned annotations may be believed to say
        (:mod:`sunk.ownership`): its job is the one Slurm ties to its uid."""
        meta = pod["metadata"]
        uid = meta.get("uid", "")
        annotations = dict(meta.get("annotations") or {})
        annotations.update(self._assumed_written.get(uid, {}))  # written, not yet watched
        annotations = {k: v for k, v in annotations.items() if v is not None}
        owner_of: dict[int, str | None] = {}
        while True:
            owned = ownership.read(annotations, uid, self.owned,
                                   proven=self.job_by_uid.get(uid), owner_of=owner_of)
            if owned.check_job is None:
                return owned
            job = self.jobs.get(owned.check_job) or await self.slurm.job(owned.check_job)
            who = self._learn(job) if job is not None else None
            owner_of[owned.check_job] = (ownership.GONE if job is None else
                                         who.uid if who is not None else ownership.NOT_OURS)

    def _pod_view(self, pod: kube.Obj, owned: ownership.Ownership) -> PodView:
        """The Pod as decide() sees it: the informer's copy, with its job as proven by Slurm,
        and bound if this process bound it and the watch has not said so yet."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        return PodView(
            phase=(pod.get("status") or {}).get("phase", "Pending"),
            bound=bool(spec.get("nodeName")) or meta.get("uid", "") in self._assumed_bound,
            deleting=bool(meta.get("deletionTimestamp")),
            job_id=owned.job_id,
            rejected=bool(owned.rejected),
        )

    async def _job_view(self, job_id: int | None, uid: str) -> JobView | None:
        """The job as Slurm has it, if it is still the job of the Pod ``uid`` (None: gone).
        Slurm may have given the id to another Pod's job since (after losing this one)."""
        if job_id is None:
            return None
        job = self.jobs.get(job_id)
        if job is None:
            job = await self.slurm.job(job_id)
            if job is None or self._learn(job) is None:
                return None
        who, started = translate.parse_extra(job.extra)
        if who is None or who.uid != uid:
            return None
        return JobView(state=job.state, started=started, node=job.nodes)

    async def reconcile(self, key: str) -> None:
        if "#" in key:  # a deleted Pod's job: "ns/name#uid#job"
            _, uid, job_id = key.split("#")
            job = await self._job_view(int(job_id), uid)
            if decide(None, job) is Step.CANCEL_JOB:
                await self._cancel(int(job_id), key.split("#")[0], "its Pod was deleted")
            return
        pod = self._pod(key)
        if pod is None:
            return
        owned = await self._ownership(pod)
        if owned.ignored:
            await self._disown(pod, owned)
        view = self._pod_view(pod, owned)
        job = await self._job_view(view.job_id, pod["metadata"]["uid"])
        record = self._record(pod, view, job, owned.rejected)
        step = decide(view, job)
        if step is Step.SUBMIT and view.job_id is not None:
            what = f"job {view.job_id} " + (f"{job.state.lower()} before it started" if job
                                            else "was lost by Slurm before it ran")
            replaced = self._resubmits.setdefault(pod["metadata"]["uid"], set())
            if view.job_id not in replaced:  # counted once per lost job, not per retry
                if len(replaced) >= MAX_RESUBMITS:
                    await self._delete_pod(pod, record, job,
                                           why=f"{what}, the {MAX_RESUBMITS + 1}th lost job")
                    return
                replaced.add(view.job_id)
                await self._event(pod, record, "SlurmJobLost",
                                  f"{what}; submitting a new one (try {len(replaced)} of "
                                  f"{MAX_RESUBMITS})", warning=True)
        if step is Step.SUBMIT:
            await self._submit(pod, record)
            return
        if owned.write and view.job_id is not None:  # adopted, or a wrong job-id repaired
            await self._annotate(pod, dict(owned.write))
            record.note("adopted", f"job {view.job_id}")
        if step is Step.BIND and job is not None:
            await self._bind(pod, record, job)
        elif step is Step.CANCEL_JOB and view.job_id is not None:
            await self._cancel(view.job_id, key, f"its Pod is {view.phase.lower()}"
                               if not view.deleting else "its Pod is being deleted")
        elif step is Step.DELETE_POD:
            await self._delete_pod(pod, record, job)

    async def _disown(self, pod: kube.Obj, owned: ownership.Ownership) -> None:
        """Say once which annotations were ignored and why; they are overwritten by the next
        write (the job id on submit, or the rejection)."""
        uid = pod["metadata"]["uid"]
        if uid in self._disowned:
            return
        self._disowned.add(uid)
        metrics.ANNOTATIONS_IGNORED.inc()
        what = "; ".join(f"{k}: {why}" for k, why in owned.ignored.items())
        log.warning("pod %s: ignored scheduler-owned annotations: %s", kube.key(pod), what)
        await self._event(pod, self.state.pods.get(kube.key(pod)), "IgnoredAnnotations",
                          f"only the scheduler writes these, for this Pod alone: {what}. "
                          + ("The Pod is scheduled from scratch." if owned.job_id is None
                             else f"Its job is {owned.job_id}."), warning=True)

    def _record(self, pod: kube.Obj, view: PodView, job: JobView | None,
                rejected: str) -> PodRecord:
        meta = pod["metadata"]
        rec = self.state.record(meta["namespace"], meta["name"], meta["uid"],
                                _timestamp(meta.get("creationTimestamp")))
        rec.phase = "Terminating" if view.deleting else view.phase
        rec.job_id = view.job_id
        rec.k8s_node = (pod.get("spec") or {}).get("nodeName") or ""
        if view.rejected:
            rec.rejected = rejected
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
        self._fire(kube.event(
            self.api, pod, reason=reason, message=message,
            type_="Warning" if warning else "Normal", component=self.settings.scheduler_name))

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
        key = kube.key(pod)
        first_try = self.queue.failures(key) == 0
        if first_try:
            for unknown, hint in translate.unknown_annotations(
                    meta.get("annotations") or {}, self.settings.annotation_prefix):
                await self._event(pod, record, "UnknownAnnotation",
                                  f"{unknown} is not an annotation sunk reads; it is ignored"
                                  + (f" (did you mean {hint}?)" if hint else ""), warning=True)
        decision = self.policies.evaluate(pod, self._namespace(meta["namespace"]))
        if first_try:
            for warning in decision.warnings:
                await self._event(pod, record, warning.reason,
                                  f"{warning.policy}: {warning.message}", warning=True)
        if not decision.allowed:
            await self._reject(pod, record, decision.reason or "PolicyDenied", decision.message)
            return
        try:
            job = translate.job_description(pod, decision.mappings, self.snapshot(),
                                            self.translate_settings)
        except translate.Unschedulable as exc:
            await self._reject(pod, record, exc.reason, str(exc))
            return
        except (ValueError, KeyError, TypeError) as exc:
            await self._reject(pod, record, "InvalidPod", str(exc))
            return
        record.job_description = job  # shown on the dashboard: without the credential below
        credential = self.keys.job_credential(job_owner(self.settings.scheduler_name,
                                                        meta["uid"]))
        job = {**job, "environment": [*job["environment"], f"SUNK_JOB_TOKEN={credential}"]}
        try:
            job_id = await self._submit_once(meta["uid"], job)
        except SlurmError as exc:
            metrics.SUBMIT_ERRORS.inc()
            if exc.permanent:
                await self._reject(pod, record, "SlurmRefused",
                                   f"Slurm refused the job: {exc.slurm_message}")
                return
            tries = self.queue.failures(key)
            if tries & (tries - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure: not every retry
                await self._event(pod, record, "SubmitFailed",
                                  f"Slurm did not take the job (try {tries + 1}, retrying "
                                  f"with backoff): {exc.slurm_message}", warning=True)
            raise
        metrics.JOBS_SUBMITTED.inc()
        log.info("pod %s: submitted job %d", key, job_id)
        await self._annotate(pod, {self.owned.job_id: str(job_id),
                                   self.owned.pod_uid: meta["uid"], self.owned.rejected: None})
        record.note("JobSubmitted", f"Slurm job {job_id}")

    async def _submit_once(self, uid: str, job: dict[str, Any]) -> int:
        """Submit, unless an earlier try whose answer was lost (a timeout, an outage) did reach
        Slurm: jobs Slurm took since then are read, and one naming this Pod is adopted."""
        since = self._uncertain_submits.pop(uid, None)
        if since is not None:
            for job_id in sorted(j for j in await self.slurm.job_states() if j > since
                                 and j not in self.jobs):
                if (found := await self.slurm.job(job_id)) is not None:
                    self._learn(found)
            if (existing := self.job_by_uid.get(uid)) is not None and existing > since:
                log.info("pod uid %s: job %d from an earlier, unanswered submit adopted", uid,
                         existing)
                return existing
        newest = max(self.jobs, default=0)
        try:
            job_id = await self.slurm.submit(job)
        except SlurmError as exc:
            if not exc.permanent:  # it may have reached Slurm: look before submitting again
                self._uncertain_submits[uid] = newest
            raise
        self._learn(Job(job_id=job_id, name=job["name"], state="PENDING", extra=job["extra"],
                        nodes="", reason="", raw={}, admin_comment=job["admin_comment"]))
        self.job_by_uid[uid] = job_id  # the newest submission is the Pod's job
        return job_id

    async def _reject(self, pod: kube.Obj, record: PodRecord, reason: str, message: str) -> None:
        """A Pod that can never be scheduled as it is: an Event that says why, the mark, and
        no retry (the Pod must be recreated)."""
        metrics.PODS_REJECTED.inc()
        record.rejected = f"{reason}: {message}"
        await self._event(pod, record, reason, message, warning=True)
        await self._annotate(pod, {self.owned.rejected: reason, self.owned.job_id: None,
                                   self.owned.pod_uid: pod["metadata"]["uid"]})
        log.info("pod %s rejected: %s: %s", kube.key(pod), reason, message)

    async def _annotate(self, pod: kube.Obj, annotations: dict[str, str | None]) -> None:
        meta = pod["metadata"]
        if self._assumed_written.get(meta["uid"]) == annotations:
            return  # written already; the watch has not brought it back yet
        await kube.annotate(self.api, "pods", meta["namespace"], meta["name"], annotations)
        self._assumed_written[meta["uid"]] = annotations

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

    async def _delete_pod(self, pod: kube.Obj, record: PodRecord, job: JobView | None, *,
                          why: str = "") -> None:
        what = why or (f"job {record.job_id} {job.state.lower()}" if job else
                       f"job {record.job_id} no longer exists in Slurm")
        await self._event(pod, record, "SlurmJobEnded", f"{what}; deleting the Pod", warning=True)
        await kube.delete_pod(self.api, pod)
        metrics.PODS_DELETED.inc()
        log.info("pod %s: deleted: %s", kube.key(pod), what)
