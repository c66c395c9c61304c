"""The syncer: node locks for Slurm jobs, and node state kept in step both ways.

Each node's reconcile gathers plain facts from the cluster model, :mod:`sunk.plans.nodeplan` turns
them into actions (taint, evictions, the lock state on the slurmd Pod, drains), and the executor
carries them out. The prolog's lock request (:meth:`Syncer.request_lock`) waits here until the
node is locked, once checked against Slurm (:mod:`sunk.loops.lockrequest`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from sunk import kube, objects
from sunk.apply.executor import Executor
from sunk.hooks.inflight import waiting
from sunk.loops.lockrequest import LockRequest, LockRequestCheck
from sunk.loops.workqueue import WorkQueue
from sunk.model.cluster import Cluster
from sunk.model.slurmwatch import SlurmWatch
from sunk.plans import fit, locking, nodeplan
from sunk.plans.locking import LOCK_KEY, LockState
from sunk.runtime import metrics
from sunk.runtime.supervise import forever
from sunk.slurm.client import SlurmClient, SlurmError
from sunk.slurm.job import member_id
from sunk.slurm.text import expand_hostlist

log = logging.getLogger("sunk.loops.syncer")


class Syncer:
    def __init__(self, cluster: Cluster, executor: Executor, slurm: SlurmClient,
                 watch: SlurmWatch) -> None:
        self.cluster = cluster
        self.executor = executor
        self.slurm = slurm
        #: The job table's one writer, told of lock requests and their answers.
        self.watch = watch
        self.settings = settings = cluster.settings
        self.requests: dict[str, LockRequest] = {}
        self.queue: WorkQueue[str] = WorkQueue(
            observe_wait=metrics.child(metrics.QUEUE_WAIT, "nodes").observe)
        self._changed: dict[str, asyncio.Event] = {}
        #: Slurm node -> when its last reconcile began (a prolog waits for one after its call).
        self._looked_at: dict[str, float] = {}
        #: Slurm node -> :meth:`_fingerprint` at its last reconcile.
        self._seen: dict[str, tuple[object, ...]] = {}
        #: Checks each lock request against Slurm (:mod:`sunk.loops.lockrequest`).
        self.lock_check = LockRequestCheck(cluster, slurm, watch)
        #: Pod uid -> ((resourceVersion, placed by sunk), what locking needs of it).
        self._pods_seen: dict[str, tuple[tuple[str, bool], locking.PodOnNode]] = {}
        self.state_key = settings.annotation("slurm-state")
        self.reason_key = settings.annotation("slurm-reason")
        self.slurmd_selector = cluster.slurmd_selector

    # -- running -----------------------------------------------------------------------------
    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            await self.cluster.ready.wait()
            for _ in range(4):
                tasks.create_task(self._work())
            tasks.create_task(forever("sweeping nodes", self._sweep))

    async def _sweep(self, interval: float = 2.0) -> None:
        """Every few seconds, every node that may need something: locks follow Slurm's node
        state (jobs start and end), and drains and cordons are kept in step."""
        while True:
            for slurm_node, k8s_node in self.cluster.index().to_k8s.items():
                request = self.requests.get(slurm_node)
                if self._needs_look(slurm_node, k8s_node) and (
                        (request is not None and request.answered_at is None)
                        or self._lock_state(slurm_node) is LockState.PENDING  # evictions
                        or self._seen.get(slurm_node) != self._fingerprint(slurm_node,
                                                                           k8s_node)):
                    self.queue.add(slurm_node)
            await asyncio.sleep(interval)

    def _fingerprint(self, slurm_node: str, k8s_node: str) -> tuple[object, ...]:
        """What a node's plan is made from, as versions, and whether a lock request still
        keeps the lock (the one thing that changes with time alone): unchanged since its last
        look, the sweep does not look again (a busy node otherwise is, every sweep, for
        nothing), unless a lock asked for is not answered yet."""
        info = self.cluster.state.slurm_nodes.get(slurm_node, {})
        node = self.cluster.node(k8s_node) or {}
        slurmd = self.cluster.index().slurmd.get(slurm_node) or {}
        pods = tuple(sorted((p.metadata.key, p.metadata.resource_version)
                            for p in map(objects.pod, self.cluster.pods_on(k8s_node))))
        request = self.requests.get(slurm_node)
        # a request keeps the lock for a while after its answer: when it stops, look again
        kept = request is not None and request.keeps_lock(time.monotonic())
        return (kept, tuple(info.get("state") or ()), str(info.get("reason")),
                str(info.get("cpus")), str(info.get("real_memory")), str(info.get("gres")),
                objects.node(node).metadata.resource_version,
                objects.pod(slurmd).metadata.resource_version, pods)

    def _needs_look(self, slurm_node: str, k8s_node: str) -> bool:
        """Cheap test on the caches, so a sweep of many idle nodes costs nothing."""
        info = self.cluster.state.slurm_nodes.get(slurm_node, {})
        node = self.cluster.node(k8s_node) or {}
        typed = objects.node(node)
        return (slurm_node in self.requests
                or locking.slurm_node_busy(info)
                or self._lock_state(slurm_node) is not LockState.FALSE
                or typed.spec.unschedulable
                or bool(set(info.get("state") or []) & {"DRAIN", "DOWN"})
                or self.state_key in typed.metadata.annotations
                or self.cluster.assumed.has_taint(node, LOCK_KEY)
                or fit.describe(self._mismatch(slurm_node, k8s_node, info))
                != self.cluster.state.capacity.get(slurm_node, ""))

    def _mismatch(self, slurm_node: str, k8s_node: str,
                  info: Mapping[str, Any]) -> tuple[fit.Capacity, ...]:
        node = self.cluster.node(k8s_node)
        if node is None or not info:
            return ()
        return fit.capacity_mismatch(info, self.cluster.allocatable(node),
                                     self.cluster.usage.reserved_on(k8s_node),
                                     gpu_resource=self.settings.gpu_resource)

    async def _work(self) -> None:
        while True:
            node = await self.queue.get()
            try:
                await self.reconcile(node)
            except Exception as exc:  # an outage must not stop the worker
                log.warning("node %s: %s", node, exc,
                            exc_info=not isinstance(exc, SlurmError | kube.KubeError))
            finally:
                self.queue.done(node)

    def on_pod(self, kind: str, pod: kube.Obj) -> None:
        """A Pod on a Node still being locked changed (an evicted Pod went): look at that node
        again now. A node locked already is not: a Pod that changes there is seen by the next
        sweep (its fingerprint changed), and a busy node is not looked at for every event of
        the Pods Slurm places on it."""
        typed = objects.pod(pod)
        if kind == "DELETED":
            self._pods_seen.pop(typed.metadata.uid, None)
        node_name = typed.spec.node_name
        if not node_name or not self.requests:  # most Pod events: no lock is being taken
            return
        for slurm_node in self.cluster.index().from_k8s.get(node_name, ()):
            request = self.requests.get(slurm_node)
            if request is not None and (request.answered_at is None
                                        or self._lock_state(slurm_node) is LockState.PENDING):
                self.queue.add(slurm_node)

    def _pod_on_node(self, pod: kube.Obj) -> locking.PodOnNode:
        """:func:`locking.pod_on_node`, made once per version of the Pod: a node's look reads
        every Pod on it, and a busy node is looked at for every job that starts there."""
        meta = objects.pod(pod).metadata
        placed = self._placed_by_sunk(pod)
        version = (meta.resource_version, placed)
        seen = self._pods_seen.get(uid := meta.uid)
        if seen is not None and seen[0] == version:
            return seen[1]
        made = locking.pod_on_node(pod, placed_by_sunk=placed,
                                   slurmd_selector=self.slurmd_selector)
        if uid and version[0]:
            self._pods_seen[uid] = (version, made)
        return made

    def lock_changed(self, slurm_node: str) -> None:
        if (changed := self._changed.get(slurm_node)) is not None:
            changed.set()

    # -- the prolog's question ---------------------------------------------------------------
    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None:
        """Lock ``node`` for ``job_id`` and wait up to ``within`` seconds for it to be locked.
        None: the node is not one we know (no slurmd Pod has it as hostname)."""
        if node not in self.cluster.index().to_k8s:
            return None
        request = self.requests.get(node)
        if request is None or request.job_id != job_id or request.strict != strict:
            # Checked against Slurm once per job and node: another job's request on the same
            # node in between (jobs start side by side) is no reason to read this one again.
            if node not in expand_hostlist(self.cluster.jobs.allocated.get(job_id, "")):
                await self.lock_check.check(node, job_id)
            request = LockRequest(job_id, strict)
            self.requests[node] = request
        asked = request.at = time.monotonic()
        self.watch.prolog_waiting(job_id)
        changed = self._changed.setdefault(node, asyncio.Event())
        self.queue.add(node)
        deadline = time.monotonic() + within
        while True:
            state = self._lock_state(node)
            # Only a look at the node taken since this call counts: the state may still be
            # the previous job's lock, from before Pods that arrived since.
            looked = self._looked_at.get(node, -1.0) >= asked
            if looked and (state is LockState.LOCKED_STRICT
                           or (state is LockState.LOCKED and not strict)):
                request.answered_at = time.monotonic()
                self.watch.lock_answered(job_id, request.answered_at)  # its script starts now
                return state
            left = deadline - time.monotonic()
            if left <= 0:
                return state
            changed.clear()
            try:
                with waiting():  # not counted against the hook API's bound meanwhile
                    async with asyncio.timeout(left):
                        await changed.wait()
            except TimeoutError:
                return self._lock_state(node)

    # -- reconcile one node ------------------------------------------------------------------
    def _lock_state(self, slurm_node: str) -> LockState:
        slurmd = self.cluster.index().slurmd.get(slurm_node)
        if slurmd is None:
            return LockState.FALSE
        return LockState.parse(self.cluster.assumed.annotations(slurmd).get(LOCK_KEY))

    def _placed_by_sunk(self, pod: kube.Obj) -> bool:
        """Slurm accounts for this Pod: a job of ours names its uid. Without the scheduler
        component (no job table here), the scheduler's annotations, if written for this very
        Pod (the chart's admission policy lets only the scheduler write them)."""
        meta = objects.pod(pod).metadata
        uid = meta.uid
        if self.cluster.scheduling:
            return self.cluster.jobs.placed(uid, member_id(uid))
        annotations = meta.annotations
        owned = self.executor.owned
        return annotations.get(owned.pod_uid) == uid and owned.job_id in annotations

    def facts(self, slurm_node: str) -> nodeplan.NodeFacts | None:
        """What the node's plan needs, from the caches (None: not one to act on yet)."""
        index = self.cluster.index()
        k8s_node = index.to_k8s.get(slurm_node)
        slurmd = index.slurmd.get(slurm_node)
        node = self.cluster.node(k8s_node or "")
        slurm_info = self.cluster.state.slurm_nodes.get(slurm_node)
        if k8s_node is None or slurmd is None or node is None or slurm_info is None:
            return None  # not polled from Slurm yet: an idle-looking node must not lose its lock
        now = time.monotonic()
        request = self.requests.get(slurm_node)
        if request is not None and not request.keeps_lock(now) and not (
                locking.slurm_node_busy(slurm_info)):
            del self.requests[slurm_node]
            request = None
        pod_shows = self.cluster.assumed.annotations(slurmd)
        drained_for = nodeplan.kill_wait_drain_pod(slurm_info)
        return nodeplan.NodeFacts(
            slurm_node=slurm_node, k8s_node=k8s_node, slurm_info=slurm_info,
            lock=LockState.parse(pod_shows.get(LOCK_KEY)),
            tainted=self.cluster.assumed.has_taint(node, LOCK_KEY),
            cordoned=objects.node(node).spec.unschedulable,
            requested=request is not None and request.keeps_lock(now),
            strict=request.strict if request is not None else None,
            pods=tuple(self._pod_on_node(p) for p in self.cluster.pods_on(k8s_node)),
            state_key=self.state_key, reason_key=self.reason_key,
            pod_shows=pod_shows, node_shows=self.cluster.assumed.annotations(node),
            mismatch=self._mismatch(slurm_node, k8s_node, slurm_info),
            capacity_shown=self.cluster.state.capacity.get(slurm_node, ""),
            drained_pod_gone=drained_for is not None and self.cluster.any_pod(drained_for) is None)

    async def reconcile(self, slurm_node: str) -> None:
        began = time.monotonic()
        facts = self.facts(slurm_node)
        if facts is None:
            return
        # what this look saw, kept only once it has been acted on: a look whose writes failed
        # (the API server away) is made again, though nothing it saw has changed since
        seen = self._fingerprint(slurm_node, facts.k8s_node)
        index = self.cluster.index()
        node = self.cluster.node(facts.k8s_node)
        slurmd = index.slurmd[slurm_node]
        assert node is not None
        await self.executor.apply_node(facts, node, slurmd, nodeplan.plan_node(facts),
                                       pod_of=self.cluster.any_pod)
        self._seen[slurm_node] = seen
        self._looked_at[slurm_node] = began
        self.lock_changed(slurm_node)  # a waiting prolog may answer now

