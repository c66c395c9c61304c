"""What is bound to each Node, and the room that leaves it in Kubernetes' view
(:mod:`sunk.plans.fit`).

Every Pod by the Node it is bound to (a node lock looks at one Node's Pods), the requests they
hold there (:class:`sunk.plans.fit.NodeUsage`), each Node's allocatable parsed once, and the Pods
whose room Slurm does not know is taken. A Pod is never bound over a Node's allocatable.
"""

from __future__ import annotations

from collections.abc import Mapping

from sunk import kube, objects
from sunk.model.jobtable import JobsView
from sunk.plans import fit, locking
from sunk.slurm.job import member_id


class NodeRoom:
    def __init__(self, scheduler_name: str, slurmd_selector: Mapping[str, str], jobs: JobsView,
                 nodes: kube.Informer) -> None:
        self.scheduler_name = scheduler_name
        self.slurmd_selector = slurmd_selector
        self.jobs = jobs
        #: The Nodes' informer: a Node's allocatable.
        self._nodes = nodes
        self.usage = fit.NodeUsage(staying=self.stays_beside_slurm, reserved=self.reserved)
        #: Node name -> the Pods bound to it, by key; Pod key -> its Node.
        self._on_node: dict[str, dict[str, kube.Obj]] = {}
        self._node_of: dict[str, str] = {}
        #: Node name -> its allocatable as written and as parsed (Nodes change often, their
        #: allocatable seldom: each lock taint is a Node event).
        self._allocatable: dict[str, tuple[tuple[tuple[str, str], ...], fit.Resources]] = {}

    def observe(self, kind: str, pod: kube.Obj) -> None:
        """A watch event of any Pod: file it under the Node it is bound to, and count it."""
        p = objects.pod(pod)
        key, node_name = p.metadata.key, p.spec.node_name
        if (was := self._node_of.pop(key, None)) is not None:
            on_node = self._on_node[was]
            on_node.pop(key, None)
            if not on_node:
                del self._on_node[was]
        if node_name and kind != "DELETED":
            self._on_node.setdefault(node_name, {})[key] = pod
            self._node_of[key] = node_name
        self.usage.observe(kind, pod)

    def pods_on(self, node: str) -> list[kube.Obj]:
        return list(self._on_node.get(node, {}).values())

    def is_slurmd(self, pod: kube.Obj) -> bool:
        labels = objects.pod(pod).metadata.labels
        return bool(self.slurmd_selector) and all(
            labels.get(k) == v for k, v in self.slurmd_selector.items())

    def stays_beside_slurm(self, pod: kube.Obj) -> bool:
        """Left in place by a node lock, so it counts against a Slurm job's Pod. A Pod naming
        this scheduler counts as placed by sunk here (a conservative count: the lock itself
        asks Slurm, :meth:`sunk.loops.syncer.Syncer._placed_by_sunk`)."""
        placed = objects.pod(pod).spec.scheduler_name == self.scheduler_name
        return locking.pod_on_node(pod, placed_by_sunk=placed,
                                   slurmd_selector=self.slurmd_selector).stays

    def reserved(self, pod: kube.Obj) -> bool:
        """What Slurm's node definition must leave room for: the slurmd Pod, DaemonSet Pods."""
        owners = objects.pod(pod).metadata.owner_references
        return self.is_slurmd(pod) or any(o.kind == "DaemonSet" for o in owners)

    def not_counted_by_slurm(self, node: str) -> list[str]:
        """The Pods on Node ``node`` whose room Slurm does not know is taken
        (:mod:`sunk.plans.fit`): a Pod counts as Slurm's while a job of ours that names it
        (alone, or as a gang member) has not ended."""
        def counted(pod: kube.Obj) -> bool:
            uid = objects.pod(pod).metadata.uid
            job_id = self.jobs.by_uid.get(uid, self.jobs.member_of.get(member_id(uid)))
            job = self.jobs.get(job_id) if job_id is not None else None
            return job is not None and not job.finished

        return fit.not_counted_by_slurm(self.pods_on(node), staying=self.stays_beside_slurm,
                                        reserved=self.reserved, counted=counted)

    def room(self, pod: kube.Obj, node: str) -> list[str]:
        """What Node ``node`` lacks for ``pod`` in Kubernetes' view ([] if it fits)."""
        obj = self._nodes.cache.get(node)
        if obj is None:
            return [f"no Node {node}"]
        return fit.shortfall(fit.pod_requests(pod), self.allocatable(obj), self.usage.used(node))

    def allocatable(self, node: kube.Obj) -> fit.Resources:
        """The Node's allocatable, parsed once for as long as it stays the same."""
        n = objects.node(node)
        raw = tuple(sorted(n.status.allocatable.items()))
        name = n.metadata.name
        cached = self._allocatable.get(name)
        if cached is None or cached[0] != raw:
            cached = (raw, fit.allocatable(node))
            self._allocatable[name] = cached
        return cached[1]
