"""The cluster model: what sunk knows of Kubernetes and Slurm, built once and shared.

One instance holds the informers (the Pods that name this scheduler, every Pod with the Node
it is bound to, Nodes, slurmd Pods, Namespaces), the index from a Slurm node to its slurmd Pod
and Kubernetes Node, Slurm's node and job tables, the placement snapshot, the assume cache and
the dashboard's records. Parts of it have modules of their own: what is bound to each Node and
the room it leaves (:mod:`sunk.model.noderoom`), the Pods by gang (:mod:`sunk.model.gangindex`)
and the whole Pods kept for their policies (:mod:`sunk.model.wholepod`).

Who writes what (docs/how-it-works.md has the whole table):

=========================================  ===================================================
the Kubernetes objects, gang index, room    the watches (:meth:`_on_pod`, :meth:`_on_any_pod`,
on each Node, whole Pods                    ...); a binding's room: the executor's ``Reserve``
Slurm's jobs (:attr:`jobs`)                 the Slurm poller alone; read-only
                                            (:class:`~sunk.model.jobtable.JobsView`) to the rest
Slurm's nodes                               the Slurm poller (:meth:`set_slurm_nodes`)
the assume cache                            the executor (what it wrote), the watches (seen)
the health of both sides                    :class:`~sunk.model.health.Health`
the dashboard's records (:attr:`state`)     the loops (what they read) and the executor (what
                                            it did)
=========================================  ===================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any

from sunk import kube, objects
from sunk.model.assume import AssumeCache
from sunk.model.devices import Devices
from sunk.model.gangindex import GangIndex
from sunk.model.health import Health
from sunk.model.jobtable import JobsView, JobTable
from sunk.model.nodeindex import NodeIndex
from sunk.model.noderoom import NodeRoom
from sunk.model.state import SchedulerState
from sunk.model.wholepod import WholePods
from sunk.plans import exclusions, fit, gang, placement
from sunk.runtime import metrics
from sunk.runtime.supervise import forever
from sunk.settings import Settings
from sunk.slurm.job import PodIdentity

log = logging.getLogger("sunk.model.cluster")

PodHandler = Callable[[str, kube.Obj], None]


def label_terms(text: str) -> dict[str, str]:
    """A label selector's ``key=value`` terms (the slurmd Pods')."""
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


class Cluster:
    def __init__(self, settings: Settings, api: kube.Client,
                 state: SchedulerState | None = None) -> None:
        self.settings = settings
        self.api = api
        self.state = state or SchedulerState()
        self._jobs = JobTable(settings.scheduler_name)
        self.assumed = AssumeCache()
        metrics.ASSUMED_WRITES.set_function(self.assumed.waiting)
        self.scheduling = "scheduler" in settings.components
        self.slurmd_selector = label_terms(settings.slurmd_label_selector)
        #: Called for every change of a Pod that names this scheduler.
        self.pod_handlers: list[PodHandler] = []
        #: Called for every change of any Pod (the syncer's locks).
        self.any_pod_handlers: list[PodHandler] = []
        self._watch_kubernetes(settings, api)
        #: Nodes whose placement facts changed, and each kind of Pod's excluded Slurm nodes
        #: brought up to date from them (not every Node looked at for every submission).
        self.node_changes = fit.NodeChanges()
        self.exclusions = exclusions.Exclusions(self.node_changes)
        self.node_room = NodeRoom(settings.scheduler_name, self.slurmd_selector, self._jobs,
                                  self.node_informer)
        self.usage = self.node_room.usage
        self.usage.changed = self.node_changes
        self.health = Health(self.state, poll_interval=settings.slurm_poll_interval,
                             informers=self.informers)
        self.ready = asyncio.Event()
        #: Slurm's node names (for placement), and a generation that grows when they change.
        self.slurm_node_names: frozenset[str] | None = None
        self._slurm_nodes_generation = 0
        self._index: tuple[int, NodeIndex] | None = None
        self._snapshot: tuple[tuple[int, int, int], placement.Snapshot] | None = None
        #: Pod uid -> set when that Pod object is gone (placeholder jobs wait on it).
        self._gone: dict[str, asyncio.Event] = {}

    def _watch_kubernetes(self, settings: Settings, api: kube.Client) -> None:
        """The informers, each calling its handler here (run by :meth:`run`)."""
        #: The whole Pods kept for their policies (the Pod cache keeps them trimmed).
        self.whole_pods = WholePods(api, settings, scheduling=self.scheduling)
        #: Every Pod (for what is bound to each Node: fit checks and node locks).
        #: It keeps Pods trimmed to what sunk reads (sunk.kube.trim): it holds every Pod.
        self.all_pods = kube.Informer(api, "pods", handler=self._on_any_pod,
                                      trim=self.whole_pods.keep, decoded=objects.PODS)
        #: The Pods that name this scheduler, per namespace watched: taken from every Pod's
        #: watch, not a watch of their own (one decoded copy of each Pod, not two).
        namespaces = settings.namespaces()
        watched: list[str | None] = [None] if namespaces is None else list(namespaces)
        self.pod_informers = [
            kube.Subset(self.all_pods, functools.partial(self._names_us, ns), namespace=ns,
                        handler=self._on_pod)
            for ns in watched]
        self.node_informer = kube.Informer(api, "nodes", handler=self._on_node_event,
                                           decoded=objects.NODES)
        self.slurmd_informer = kube.Informer(
            api, "pods", namespace=settings.slurmd_namespace,
            label_selector=settings.slurmd_label_selector, handler=self._on_other,
            decoded=objects.PODS)
        self.namespace_informer = kube.Informer(api, "namespaces")
        #: The Pods by gang, and the batch Jobs and PodGroups a gang's size comes from.
        self.gang_index = GangIndex(api, settings.annotation_prefix, settings.scheduler_name)
        #: Called with a gang's key when its Job or PodGroup changes.
        self.gang_handlers = self.gang_index.handlers
        self.devices = Devices(api, settings, self.all_pods)  # ResourceClaims, GPUs

    def informers(self) -> list[kube.Informer]:
        """The informers that run: the scheduled Pods' and Namespaces' only with the scheduler
        component."""
        shared = [self.node_informer, self.slurmd_informer, self.all_pods]
        if self.scheduling:
            shared += [self.namespace_informer, self.gang_index.job_informer]
        return shared

    def optional_runs(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """What runs unwaited for: the gang sources whose CRD or API may not be there."""
        return [*self.gang_index.optional_runs(self.settings),
                *self.devices.runs(self.settings)] if self.scheduling else []

    async def run(self) -> None:
        """Run the informers until cancelled; :attr:`ready` once every cache is synced."""
        async with asyncio.TaskGroup() as tasks:
            for run in [*(i.run for i in self.informers()), *self.optional_runs()]:
                tasks.create_task(run())
            await asyncio.gather(*(i.synced.wait() for i in self.informers()))
            tasks.create_task(forever("probing the API server",
                                      lambda: self.health.probe_kube(self.api)))
            self.ready.set()

    # -- Slurm's jobs ----------------------------------------------------------------------------
    @property
    def jobs(self) -> JobsView:
        """The job table, read-only: its one writer is the Slurm poller, whom the other parts
        tell what changed (:mod:`sunk.model.jobtable` says who tells what)."""
        return self._jobs

    @property
    def job_table(self) -> JobTable:
        """The job table, writable: for its one writer, the Slurm poller, alone (and tests;
        ``tests/unit/layout/test_job_table_writer.py`` holds the product to it)."""
        return self._jobs

    # -- Pods that name this scheduler ---------------------------------------------------------
    def pod(self, key: str) -> kube.Obj | None:
        namespace = key.split("/", 1)[0]
        for informer in self.pod_informers:
            if informer.namespace in (None, namespace) and key in informer.cache:
                return informer.cache[key]
        return None

    def pods(self) -> Iterator[kube.Obj]:
        for informer in self.pod_informers:
            yield from informer.cache.values()

    def pod_of(self, who: PodIdentity) -> kube.Obj | None:
        """The Pod a job is for, if that very Pod (its uid) still exists."""
        pod = self.pod(who.key)
        return pod if pod is not None and objects.pod(pod).metadata.uid == who.uid else None

    async def whole_pod(self, pod: kube.Obj) -> kube.Obj | None:
        """``pod`` with every field (the cache's copy is trimmed), for its policies; None if
        the API server no longer has this Pod (:meth:`sunk.model.wholepod.WholePods.read`)."""
        return await self.whole_pods.read(pod)

    def _on_pod(self, kind: str, pod: kube.Obj) -> None:
        self.assumed.observe(kind, pod)
        self.gang_index.observe(kind, pod)
        if kind == "DELETED":
            uid = objects.pod(pod).metadata.uid
            if (gone := self._gone.pop(uid, None)) is not None:
                gone.set()
            self.state.forget(kube.key(pod))
        for handler in self.pod_handlers:
            handler(kind, pod)

    def _on_other(self, kind: str, obj: kube.Obj) -> None:
        self.assumed.observe(kind, obj)

    def _on_node_event(self, kind: str, node: kube.Obj) -> None:
        self.assumed.observe(kind, node)
        self.node_changes.add(objects.node(node).metadata.name)

    async def wait_pod_gone(self, uid: str, within: float) -> bool:
        """Whether the Pod ``uid`` is gone within ``within`` seconds."""
        gone = self._gone.setdefault(uid, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await gone.wait()
        return gone.is_set()

    # -- gangs (sunk.model.gangindex) ------------------------------------------------------------
    def gang_of(self, pod: kube.Obj) -> str | None:
        """The key of the gang ``pod`` may belong to (whether it is one is for its claim)."""
        return self.gang_index.gang_of(pod)

    def gang_pods(self, key: str) -> list[kube.Obj]:
        """The Pods naming this scheduler that may belong to the gang ``key``."""
        return self.gang_index.pods(key)

    def gang_members(self, who: PodIdentity) -> list[kube.Obj]:
        """The Pods a gang's job is for that still exist (any phase)."""
        return self.gang_index.members(who)

    def gang_owners(self) -> gang.Owners:
        return self.gang_index.owners()

    # -- every Pod, by the Node it is bound to (sunk.model.noderoom) ------------------------------
    def _on_any_pod(self, kind: str, pod: kube.Obj) -> None:
        if kind == "DELETED":
            self.whole_pods.forget(kube.key(pod))
        self.node_room.observe(kind, pod)
        if self.scheduling:
            for subset in self.pod_informers:
                subset.observe(kind, pod)
        for handler in self.any_pod_handlers:
            handler(kind, pod)

    def _names_us(self, namespace: str | None, pod: kube.Obj) -> bool:
        """The Pod names this scheduler and is in ``namespace`` (None: any)."""
        p = objects.pod(pod)
        return p.spec.scheduler_name == self.settings.scheduler_name and (
            namespace is None or p.metadata.namespace == namespace)

    def pods_on(self, node: str) -> list[kube.Obj]:
        return self.node_room.pods_on(node)

    def any_pod(self, key: str) -> kube.Obj | None:
        return self.all_pods.cache.get(key)

    def watched(self, kind: str, obj: Mapping[str, Any]) -> kube.Obj | None:
        """``obj`` (a Pod or a Node) as the watch that confirms writes to it shows it now (the
        one whose copy is read with the assume cache on top); None if not watched."""
        if kind == "nodes":
            return self.node(objects.node(obj).metadata.name)
        if kind == "pods":
            key = objects.pod(obj).metadata.key
            return self.pod(key) or self.slurmd_informer.cache.get(key)
        return None

    def not_counted_by_slurm(self, node: str) -> list[str]:
        """The Pods on Node ``node`` whose room Slurm does not know is taken."""
        return self.node_room.not_counted_by_slurm(node)

    def room(self, pod: kube.Obj, node: str) -> list[str]:
        """What Node ``node`` lacks for ``pod`` in Kubernetes' view ([] if it fits)."""
        return self.node_room.room(pod, node)

    def allocatable(self, node: kube.Obj) -> fit.Resources:
        """The Node's allocatable, parsed once for as long as it stays the same."""
        return self.node_room.allocatable(node)

    # -- nodes ---------------------------------------------------------------------------------
    def index(self) -> NodeIndex:
        """Slurm node -> slurmd Pod and Kubernetes Node (built again only when a slurmd Pod
        changed)."""
        generation = self.slurmd_informer.generation
        if self._index is None or self._index[0] != generation:
            self._index = (generation, NodeIndex.build(self.slurmd_informer.cache.values()))
        return self._index[1]

    def node(self, name: str) -> kube.Obj | None:
        return self.node_informer.cache.get(name)

    def namespace(self, name: str) -> Mapping[str, Any] | None:
        """The Namespace object (policies read it as ``namespaceObject``)."""
        return self.namespace_informer.cache.get(name)

    def set_slurm_nodes(self, nodes: list[dict[str, Any]]) -> None:
        names = frozenset(n["name"] for n in nodes)
        if names != self.slurm_node_names:
            self.slurm_node_names = names
            self._slurm_nodes_generation += 1
        self.state.slurm_nodes = {n["name"]: n for n in nodes}

    def snapshot(self) -> placement.Snapshot:
        """The cluster as placement sees it; built again only when a Node, a slurmd Pod or
        the list of Slurm nodes changed (not for every Pod)."""
        version = (self.node_informer.generation, self.slurmd_informer.generation,
                   self._slurm_nodes_generation)
        if self._snapshot is not None and self._snapshot[0] == version:
            return self._snapshot[1]
        nodes: dict[str, placement.NodeInfo] = {}
        for name, obj in self.node_informer.cache.items():
            node = objects.node(obj)
            nodes[name] = placement.NodeInfo(
                name=name, labels=node.metadata.labels, taints=node.spec.taints,
                unschedulable=node.spec.unschedulable, allocatable=self.allocatable(obj))
        snapshot = placement.Snapshot(slurm_to_k8s=self.index().to_k8s, nodes=nodes,
                                      slurm_nodes=self.slurm_node_names,
                                      used=self.usage.used, exclusions=self.exclusions)
        self._snapshot = (version, snapshot)
        return snapshot
