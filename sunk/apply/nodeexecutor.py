"""Carries out a node's plan (:mod:`sunk.plans.nodeplan`): the lock taint, evictions, the lock state
on the slurmd Pod, Slurm drains, and Slurm's node state and size shown on the Kubernetes side.

The node half of the executor (:mod:`sunk.apply.executor`), through the same two ports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from sunk import kube, objects
from sunk.apply.background import Background
from sunk.apply.ports import KubePort, SlurmPort
from sunk.model.cluster import Cluster
from sunk.plans import actions as do
from sunk.plans.fit import Capacity
from sunk.plans.locking import LOCK_KEY, LOCK_TAINT_SPEC, LockState
from sunk.plans.nodeplan import NodeFacts
from sunk.runtime import metrics

log = logging.getLogger("sunk.apply.executor")

class NodeExecutor:
    def __init__(self, cluster: Cluster, kube_port: KubePort, slurm: SlurmPort, *,
                 background: Background) -> None:
        self.cluster = cluster
        self.kube = kube_port
        self.slurm = slurm
        self.fire = background.fire
        self.settings = cluster.settings
        #: (Pod key, Slurm node) pairs already told their eviction was refused (once a lock).
        self._evict_refused: set[tuple[str, str]] = set()
        #: Called with a Slurm node whose lock state changed (hook calls wait on it).
        self.on_lock_changed: Callable[[str], None] = lambda node: None

    async def apply(self, facts: NodeFacts, node: kube.Obj, slurmd: kube.Obj,
                    actions: Iterable[do.NodeAction], *,
                    pod_of: Callable[[str], kube.Obj | None]) -> None:
        """Apply one node's plan in order. ``pod_of``: a Pod by key (for Events)."""
        for action in actions:
            match action:
                case do.SetLockTaint(present):
                    await self._set_lock_taint(node, present)
                case do.Evict(pod_key):
                    await self._evict(pod_key, facts.slurm_node, pod_of)
                case do.SetLockState(before, after, waiting_for):
                    await self._set_lock_state(facts, node, slurmd, before, after, waiting_for)
                case do.DrainSlurmNode(reason):
                    await self.slurm.update_node(facts.slurm_node,
                                                 {"state": ["DRAIN"], "reason": reason})
                    log.info("drained Slurm node %s: %s", facts.slurm_node, reason)
                case do.ResumeSlurmNode(why):
                    await self.slurm.update_node(facts.slurm_node, {"state": ["RESUME"]})
                    log.info("resumed Slurm node %s: %s", facts.slurm_node, why)
                case do.ShowSlurmState():
                    await self._show_slurm_state(facts, node, slurmd, action)
                case do.ShowCapacity(mismatch, text):
                    self._show_capacity(facts, node, mismatch, text)

    async def _annotate(self, obj: kube.Obj, kind: str, annotations: Any) -> None:
        """``annotations`` written on ``obj``, the slurmd Pod (``pods``) or its Node (``nodes``)."""
        meta = (objects.node(obj) if kind == "nodes" else objects.pod(obj)).metadata
        version = await self.kube.annotate(kind, meta.namespace or None, meta.name, annotations)
        self.cluster.assumed.wrote_annotations(meta.uid, annotations, version,
                                               watched=self.cluster.watched(kind, obj))

    def node_event(self, node: kube.Obj, reason: str, message: str, *,
                   warning: bool = False) -> None:
        self.fire(self.kube.event(node, kind="Node", reason=reason, message=message,
                                  warning=warning))

    async def _set_lock_taint(self, node: kube.Obj, present: bool) -> None:
        typed = objects.node(node)
        taints = [t for t in typed.spec.taints if t.get("key") != LOCK_KEY]
        if present:
            taints.append(dict(LOCK_TAINT_SPEC))
        version = await self.kube.set_taints(node, taints)
        self.cluster.assumed.set_taint(typed.metadata.uid, LOCK_KEY, present,
                                       version, watched=self.cluster.watched("nodes", node))

    async def _set_lock_state(self, facts: NodeFacts, node: kube.Obj, slurmd: kube.Obj,
                              before: LockState, after: LockState,
                              waiting_for: tuple[str, ...]) -> None:
        await self._annotate(slurmd, "pods", {LOCK_KEY: after.value})
        metrics.LOCK_TRANSITIONS.labels(state=after.value).inc()
        detail = f"waiting for {', '.join(waiting_for)}" if waiting_for else ""
        log.info("node %s (%s): lock %s -> %s %s", facts.k8s_node, facts.slurm_node,
                 before.value, after.value, detail)
        self.node_event(node, "NodeLock", f"lock {before.value} -> {after.value} for Slurm "
                                          f"node {facts.slurm_node} {detail}".strip())
        if not after.locked:
            self._evict_refused = {x for x in self._evict_refused if x[1] != facts.slurm_node}
        self.on_lock_changed(facts.slurm_node)

    async def _evict(self, key: str, slurm_node: str,
                     pod_of: Callable[[str], kube.Obj | None]) -> None:
        namespace, name = key.split("/", 1)
        try:
            if not await self.kube.evict(namespace, name):
                return  # gone already
        except kube.KubeError as exc:
            metrics.EVICTIONS.labels(result="refused").inc()
            if (key, slurm_node) in self._evict_refused:  # report once per lock
                return
            self._evict_refused.add((key, slurm_node))
            why = "a PodDisruptionBudget forbids it" if exc.status == 429 else str(exc)
            log.warning("cannot evict pod %s to lock Slurm node %s: %s", key, slurm_node, why)
            if (pod := pod_of(key)) is not None:
                self.fire(self.kube.event(
                    pod, kind="Pod", reason="EvictionRefused", warning=True,
                    message=f"evicting it to lock Slurm node {slurm_node} failed: {why}; "
                            "retrying"))
            return
        metrics.EVICTIONS.labels(result="evicted").inc()
        log.info("evicted pod %s to lock Slurm node %s", key, slurm_node)

    def _show_capacity(self, facts: NodeFacts, node: kube.Obj,
                       mismatch: tuple[Capacity, ...], text: str) -> None:
        before = self.cluster.state.capacity.get(facts.slurm_node, "")
        differ = {c.resource: c.slurm - c.kubernetes for c in mismatch}
        for resource in ("cpu", "memory", self.settings.gpu_resource):
            metrics.NODE_CAPACITY_MISMATCH.labels(node=facts.slurm_node, resource=resource).set(
                differ.get(resource, 0))
        if text:
            self.cluster.state.capacity[facts.slurm_node] = text
            log.warning("Slurm node %s and Node %s disagree: %s", facts.slurm_node,
                        facts.k8s_node, text)
        else:
            self.cluster.state.capacity.pop(facts.slurm_node, None)
        over = any(c.over for c in mismatch)
        self.node_event(node, "SlurmNodeSizeMismatch" if text else "SlurmNodeSizeAgrees",
                        f"Slurm node {facts.slurm_node}: {text}" + (
                            "; Slurm may place jobs whose Pods the kubelet refuses (sunk "
                            "excludes the Node from those jobs)" if over else "")
                        if text else f"Slurm node {facts.slurm_node} and the Node agree again"
                        + (f" (were: {before})" if before else ""), warning=over)

    async def _show_slurm_state(self, facts: NodeFacts, node: kube.Obj, slurmd: kube.Obj,
                                show: do.ShowSlurmState) -> None:
        if show.on_pod:
            await self._annotate(slurmd, "pods", show.annotations)
        if show.on_node:
            await self._annotate(node, "nodes", show.annotations)
            self.node_event(node, f"SlurmNode{show.shown.capitalize() or 'Ready'}",
                            f"Slurm node {facts.slurm_node}: {show.shown or 'no longer drained'}"
                            + (f" ({show.reason})" if show.shown and show.reason else ""),
                            warning=bool(show.shown))
