"""The syncer: node locks for Slurm jobs, and node state kept in step both ways (I/O side).

Decisions are in :mod:`sunk.locking`; this module reads the caches, applies a plan (taint,
evictions, the slurmd Pod's annotation) and answers the prolog's hook call.

Node state, both ways:

- a Slurm drain or down state, and its reason, is shown on the Kubernetes side (annotations on
  the slurmd Pod and the Node, and an Event on the Node when it changes);
- a Kubernetes cordon drains the Slurm node with a reason prefixed ``k8s:``; uncordoning lifts
  only such drains, never one an admin set in Slurm.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sunk import kube, locking, metrics, slurmtext
from sunk.hookauth import HookRefused
from sunk.locking import LOCK_KEY, LOCK_TAINT_SPEC, LockState
from sunk.slurm import SlurmError
from sunk.workqueue import WorkQueue

if TYPE_CHECKING:
    from sunk.scheduler import Scheduler

log = logging.getLogger("sunk.syncer")

K8S_DRAIN_PREFIX = "k8s:"
#: How long an unanswered lock request keeps the lock wanted without the prolog asking again.
REQUEST_TTL = 60.0
#: How long an answered request keeps the lock wanted, while Slurm's node state catches up.
ANSWERED_GRACE = 10.0


@dataclass
class LockRequest:
    job_id: int
    strict: bool
    at: float = field(default_factory=time.monotonic)
    answered_at: float | None = None

    def keeps_lock(self, now: float) -> bool:
        if self.answered_at is not None:
            return now - self.answered_at < ANSWERED_GRACE
        return now - self.at < REQUEST_TTL


def _selector(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


class Syncer:
    def __init__(self, scheduler: Scheduler) -> None:
        self.sched = scheduler
        self.api = scheduler.api
        self.settings = scheduler.settings
        self.pods = kube.Informer(self.api, "pods", handler=self._on_pod)
        self.requests: dict[str, LockRequest] = {}
        #: The Pods on each Node, kept by the Pod handler (a lock looks at one Node's Pods;
        #: scanning every Pod in the cluster for them cost 5% of the scheduler's CPU).
        self._on_node: dict[str, dict[str, kube.Obj]] = {}
        self._node_of: dict[str, str] = {}
        self.queue = WorkQueue()
        self._changed: dict[str, asyncio.Event] = {}
        self._evict_refused: set[tuple[str, str]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.slurm_state_key = self.settings.annotation("slurm-state")
        self.slurm_reason_key = self.settings.annotation("slurm-reason")
        self.slurmd_selector = _selector(self.settings.slurmd_label_selector)

    # -- running -----------------------------------------------------------------------------
    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.pods.run())
            await self.pods.synced.wait()
            await self.sched.ready.wait()
            for _ in range(4):
                tasks.create_task(self._work())
            tasks.create_task(self._sweep())

    async def _sweep(self, interval: float = 2.0) -> None:
        """Every few seconds, every node that may need something: locks follow Slurm's node
        state (jobs start and end), and drains and cordons are kept in step."""
        while True:
            for slurm_node, k8s_node in self.sched.slurm_to_k8s().items():
                if self._needs_look(slurm_node, k8s_node):
                    self.queue.add(slurm_node)
            await asyncio.sleep(interval)

    def _needs_look(self, slurm_node: str, k8s_node: str) -> bool:
        """Cheap test on the caches, so a sweep of many idle nodes costs nothing."""
        info = self.sched.state.slurm_nodes.get(slurm_node, {})
        node = self.sched.node_informer.cache.get(k8s_node) or {}
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        states = set(info.get("state") or [])
        return (slurm_node in self.requests
                or locking.slurm_node_busy(info)
                or self._lock_state(slurm_node) is not LockState.FALSE
                or bool((node.get("spec") or {}).get("unschedulable"))
                or bool(states & {"DRAIN", "DOWN"})
                or self.slurm_state_key in annotations
                or any(t.get("key") == LOCK_KEY for t in (node.get("spec") or {}).get("taints")
                       or []))

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

    def _on_pod(self, kind: str, pod: kube.Obj) -> None:
        """Keep the index of Pods by Node; a Pod on a locking Node changed (an evicted Pod
        went): look at that node again."""
        key = kube.key(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if (was := self._node_of.pop(key, None)) is not None:
            on_node = self._on_node[was]
            on_node.pop(key, None)
            if not on_node:
                del self._on_node[was]
        if node_name and kind != "DELETED":
            self._on_node.setdefault(node_name, {})[key] = pod
            self._node_of[key] = node_name
        if not node_name or not self.requests:  # most Pod events: no lock is being taken
            return
        for slurm_node, k8s in self.sched.slurm_to_k8s().items():
            if k8s == node_name and slurm_node in self.requests:
                self.queue.add(slurm_node)

    # -- the prolog's question ---------------------------------------------------------------
    async def request_lock(self, node: str, job_id: int, strict: bool,
                           within: float) -> LockState | None:
        """Lock ``node`` for ``job_id`` and wait up to ``within`` seconds for it to be locked.
        None: the node is not one we know (no slurmd Pod has it as hostname)."""
        if node not in self.sched.slurm_to_k8s():
            return None
        request = self.requests.get(node)
        if request is None or request.job_id != job_id or request.strict != strict:
            await self._check_lock_request(node, job_id)
            request = LockRequest(job_id, strict)
            self.requests[node] = request
        request.at = time.monotonic()
        changed = self._changed.setdefault(node, asyncio.Event())
        self.queue.add(node)
        deadline = time.monotonic() + within
        while True:
            state = self._lock_state(node)
            if state is LockState.LOCKED_STRICT or (state is LockState.LOCKED and not strict):
                request.answered_at = time.monotonic()
                return state
            left = deadline - time.monotonic()
            if left <= 0:
                return state
            changed.clear()
            try:
                async with asyncio.timeout(left):
                    await changed.wait()
            except TimeoutError:
                return self._lock_state(node)

    async def _check_lock_request(self, node: str, job_id: int) -> None:
        """A lock is taken only for a job Slurm is starting on that node (its prolog runs):
        a stray call naming a pending job, an ended one or another node is refused."""
        try:
            job = await self.sched.slurm.job(job_id)
        except SlurmError as exc:
            raise HookRefused(503, f"reading job {job_id} from Slurm: {exc}",
                              retry_after=5) from exc
        if job is None:  # lost by a slurmctld that crashed: it will not run; nothing to lock
            raise HookRefused(410, f"Slurm has no job {job_id}: no lock for it")
        if job.state == "PENDING" or job.finished:
            raise HookRefused(409, f"Slurm shows job {job_id} {job.state.lower()}: only a job "
                                   "that is starting locks a node")
        if node not in slurmtext.expand_hostlist(job.nodes):
            raise HookRefused(409, f"job {job_id} was given {job.nodes or 'no node'}, not "
                                   f"{node}: no lock for it there")

    # -- reconcile one node ------------------------------------------------------------------
    def _slurmd_pod(self, slurm_node: str) -> kube.Obj | None:
        for pod in self.sched.slurmd_informer.cache.values():
            if (pod.get("spec") or {}).get("hostname") == slurm_node:
                return pod
        return None

    def _lock_state(self, slurm_node: str) -> LockState:
        pod = self._slurmd_pod(slurm_node)
        annotations = (pod or {}).get("metadata", {}).get("annotations") or {}
        return LockState.parse(annotations.get(LOCK_KEY))

    def _placed_by_sunk(self, pod: kube.Obj) -> bool:
        """Slurm accounts for this Pod: a job of ours names its uid. Without the scheduler
        component (no job table here), the scheduler's annotations, if written for this very
        Pod (the chart's admission policy lets only the scheduler write them)."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if "scheduler" in self.settings.components:
            return uid in self.sched.job_by_uid
        annotations = meta.get("annotations") or {}
        return (annotations.get(self.sched.owned.pod_uid) == uid
                and self.sched.owned.job_id in annotations)

    def pods_on(self, k8s_node: str) -> list[kube.Obj]:
        return list(self._on_node.get(k8s_node, {}).values())

    async def reconcile(self, slurm_node: str) -> None:
        k8s_node = self.sched.slurm_to_k8s().get(slurm_node)
        slurmd = self._slurmd_pod(slurm_node)
        node = self.sched.node_informer.cache.get(k8s_node or "")
        if k8s_node is None or slurmd is None or node is None:
            return
        slurm_info = self.sched.state.slurm_nodes.get(slurm_node)
        if slurm_info is None:
            return  # not polled from Slurm yet: an idle-looking node must not lose its lock
        await self._lock(slurm_node, k8s_node, node, slurmd, slurm_info)
        await self._sync_drain(slurm_node, node, slurmd, slurm_info)

    async def _lock(self, slurm_node: str, k8s_node: str, node: kube.Obj, slurmd: kube.Obj,
                    slurm_info: dict[str, Any]) -> None:
        now = time.monotonic()
        request = self.requests.get(slurm_node)
        if request is not None and not request.keeps_lock(now) and not (
                locking.slurm_node_busy(slurm_info)):
            del self.requests[slurm_node]
            request = None
        wanted = locking.slurm_node_busy(slurm_info) or (
            request is not None and request.keeps_lock(now))
        pods = [locking.pod_on_node(p, placed_by_sunk=self._placed_by_sunk(p),
                                    slurmd_selector=self.slurmd_selector)
                for p in self.pods_on(k8s_node)]
        current = self._lock_state(slurm_node)
        step = locking.plan(wanted=wanted, strict=request.strict if request else (
            current is LockState.LOCKED_STRICT), pods=pods)
        await self._set_taint(node, step.taint)
        for key in step.evict:
            await self._evict(key, slurm_node)
        if step.state is not current:
            await kube.annotate(self.api, "pods", slurmd["metadata"]["namespace"],
                                slurmd["metadata"]["name"], {LOCK_KEY: step.state.value})
            slurmd.setdefault("metadata", {}).setdefault("annotations", {})[LOCK_KEY] = (
                step.state.value)
            metrics.LOCK_TRANSITIONS.labels(state=step.state.value).inc()
            detail = f"waiting for {', '.join(step.waiting_for)}" if step.waiting_for else ""
            log.info("node %s (%s): lock %s -> %s %s", k8s_node, slurm_node, current.value,
                     step.state.value, detail)
            self._event(node, kind="Node", reason="NodeLock",
                        message=f"lock {current.value} -> {step.state.value} for Slurm node "
                                f"{slurm_node} {detail}".strip())
            if not step.state.locked:
                self._evict_refused = {x for x in self._evict_refused if x[1] != slurm_node}
            if (changed := self._changed.get(slurm_node)) is not None:
                changed.set()

    def _event(self, obj: kube.Obj, *, kind: str, reason: str, message: str,
               warning: bool = False) -> None:
        """An Event, off the lock's critical path."""
        task = asyncio.create_task(kube.event(
            self.api, obj, kind=kind, reason=reason, message=message,
            type_="Warning" if warning else "Normal", component=self.settings.scheduler_name))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _set_taint(self, node: kube.Obj, present: bool) -> None:
        taints = list((node.get("spec") or {}).get("taints") or [])
        has = any(t.get("key") == LOCK_KEY for t in taints)
        if has == present:
            return
        taints = [t for t in taints if t.get("key") != LOCK_KEY]
        if present:
            taints.append(dict(LOCK_TAINT_SPEC))
        meta = node["metadata"]
        # resourceVersion makes this a compare-and-swap: a concurrent taint change is not lost.
        await kube.request(self.api, "PATCH", f"nodes/{meta['name']}",
                           json={"metadata": {"resourceVersion": meta["resourceVersion"]},
                                 "spec": {"taints": taints}},
                           headers={"Content-Type": "application/merge-patch+json"})
        node.setdefault("spec", {})["taints"] = taints

    async def _evict(self, key: str, slurm_node: str) -> None:
        namespace, name = key.split("/", 1)
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace}}
        try:
            await kube.request(self.api, "POST", f"pods/{name}/eviction", namespace=namespace,
                               json=body)
            metrics.EVICTIONS.labels(result="evicted").inc()
            log.info("evicted pod %s to lock Slurm node %s", key, slurm_node)
        except kube.KubeError as exc:
            if exc.status == 404:
                return
            metrics.EVICTIONS.labels(result="refused").inc()
            if (key, slurm_node) not in self._evict_refused:  # report once per lock
                self._evict_refused.add((key, slurm_node))
                pod = self.pods.cache.get(key)
                why = ("a PodDisruptionBudget forbids it" if exc.status == 429 else str(exc))
                log.warning("cannot evict pod %s to lock Slurm node %s: %s", key, slurm_node,
                            why)
                if pod is not None:
                    self._event(pod, kind="Pod", reason="EvictionRefused", warning=True,
                                message=f"evicting it to lock Slurm node {slurm_node} failed: "
                                        f"{why}; retrying")

    async def _sync_drain(self, slurm_node: str, node: kube.Obj, slurmd: kube.Obj,
                          slurm_info: dict[str, Any]) -> None:
        if not slurm_info:
            return
        states = set(slurm_info.get("state") or [])
        reason = slurm_info.get("reason") or ""
        drained = "DRAIN" in states
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        name = node["metadata"]["name"]
        if cordoned and not drained:
            why = f"{K8S_DRAIN_PREFIX} Kubernetes Node {name} is cordoned"
            await self.sched.slurm.update_node(slurm_node, {"state": ["DRAIN"], "reason": why})
            log.info("drained Slurm node %s: %s", slurm_node, why)
            return
        if not cordoned and drained and reason.startswith(K8S_DRAIN_PREFIX):
            await self.sched.slurm.update_node(slurm_node, {"state": ["RESUME"]})
            log.info("resumed Slurm node %s: Node %s is no longer cordoned", slurm_node, name)
            return
        shown = "down" if "DOWN" in states else "drain" if drained else ""
        wanted = {self.slurm_state_key: shown or None,
                  self.slurm_reason_key: (reason or None) if shown else None}
        for obj, kind in ((slurmd, "pods"), (node, "nodes")):
            have = (obj.get("metadata") or {}).get("annotations") or {}
            if all(have.get(k) == v for k, v in wanted.items()):
                continue
            meta = obj["metadata"]
            await kube.annotate(self.api, kind, meta.get("namespace"), meta["name"], wanted)
            meta.setdefault("annotations", {}).update(
                {k: v for k, v in wanted.items() if v is not None})
            for k, v in wanted.items():
                if v is None:
                    meta["annotations"].pop(k, None)
            if kind == "nodes":
                self._event(node, kind="Node", reason=f"SlurmNode{shown.capitalize() or 'Ready'}",
                            message=f"Slurm node {slurm_node}: {shown or 'no longer drained'}"
                                    + (f" ({reason})" if shown and reason else ""),
                            warning=bool(shown))
