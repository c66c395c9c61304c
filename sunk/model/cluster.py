"""The cluster model: what sunk knows of Kubernetes and Slurm, built once and shared.

One instance holds the informers (the Pods that name this scheduler, every Pod with the Node
it is bound to, Nodes, slurmd Pods, Namespaces), the index from a Slurm node to its slurmd Pod
and Kubernetes Node, what is bound to each Node (:class:`sunk.plans.fit.NodeUsage`), Slurm's node
and job tables, the placement snapshot, the assume cache and the dashboard's records. The
scheduler, the syncer, the hook API and the dashboard read it; only the Slurm poller
(:mod:`sunk.model.slurmwatch`) and the executor (:mod:`sunk.apply.executor`) write to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from sunk import kube
from sunk.model.assume import AssumeCache
from sunk.model.health import Health
from sunk.model.jobtable import JobTable
from sunk.model.nodeindex import NodeIndex
from sunk.model.state import SchedulerState
from sunk.plans import fit, gang, locking, placement
from sunk.runtime import metrics
from sunk.runtime.supervise import forever
from sunk.settings import Settings
from sunk.slurm.job import PodIdentity, member_id

log = logging.getLogger("sunk.model.cluster")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode

PodHandler = Callable[[str, kube.Obj], None]


def _same_pod(found: Any, meta: Mapping[str, Any]) -> bool:
    return isinstance(found, dict) and isinstance(found.get("metadata"), dict) and (
        found["metadata"].get("uid") == meta.get("uid"))


def label_terms(text: str) -> dict[str, str]:
    """A label selector's ``key=value`` terms (the slurmd Pods')."""
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


class Cluster:
    def __init__(self, settings: Settings, api: kube.Client,
                 state: SchedulerState | None = None) -> None:
        self.settings = settings
        self.api = api
        self.state = state or SchedulerState()
        self.jobs = JobTable(settings.scheduler_name)
        self.assumed = AssumeCache()
        metrics.ASSUMED_WRITES.set_function(self.assumed.waiting)
        self.scheduling = "scheduler" in settings.components
        namespaces = settings.namespaces()
        watched: list[str | None] = [None] if namespaces is None else list(namespaces)
        #: Every Pod (for what is bound to each Node: fit checks and node locks).
        #: It keeps Pods trimmed to what sunk reads (sunk.kube.trim): it holds every Pod.
        self.all_pods = kube.Informer(api, "pods", handler=self._on_any_pod,
                                      trim=self._keep_pod)
        #: Pod key -> the whole Pod, as JSON, while it waits for its policies (it names this
        #: scheduler and has no job yet): policies may read any field (:meth:`whole_pod`).
        self._whole: dict[str, bytes] = {}
        self._job_key = f"{settings.annotation_prefix}job-id"
        self._uid_key = f"{settings.annotation_prefix}pod-uid"
        #: The Pods that name this scheduler, per namespace watched: taken from every Pod's
        #: watch, not a watch of their own (one decoded copy of each Pod, not two).
        self.pod_informers = [
            kube.Subset(self.all_pods, functools.partial(self._names_us, ns), namespace=ns,
                        handler=self._on_pod)
            for ns in watched]
        self.node_informer = kube.Informer(api, "nodes", handler=self._on_node_event)
        self.slurmd_informer = kube.Informer(
            api, "pods", namespace=settings.slurmd_namespace,
            label_selector=settings.slurmd_label_selector, handler=self._on_other)
        self.namespace_informer = kube.Informer(api, "namespaces")
        #: What a gang's size comes from (docs/gangs.md): batch Jobs, and PodGroups if their
        #: CRD is installed (not waited for: without it, PodGroup gangs wait and say why).
        self.job_informer = kube.Informer(api, "jobs", version="batch/v1",
                                          handler=lambda _, obj: self._on_gang_owner("job", obj))
        self.podgroup_informer = kube.Informer(
            api, "podgroups", version="scheduling.x-k8s.io/v1alpha1",
            handler=lambda _, obj: self._on_gang_owner("podgroup", obj))
        #: Gang key -> its Pods (that name this scheduler) by key; Pod key -> its gang key.
        self._gang_pods: dict[str, dict[str, kube.Obj]] = {}
        self._gang_of: dict[str, str] = {}
        #: Called with a gang's key when its Job or PodGroup changes.
        self.gang_handlers: list[Callable[[str], None]] = []
        self.slurmd_selector = label_terms(settings.slurmd_label_selector)
        self.usage = fit.NodeUsage(staying=self._stays_beside_slurm, reserved=self._reserved)
        #: Nodes whose placement facts changed, and each kind of Pod's excluded Slurm nodes
        #: brought up to date from them (not every Node looked at for every submission).
        self.node_changes = placement.NodeChanges()
        self.exclusions = placement.Exclusions(self.node_changes)
        self.usage.changed = self.node_changes.add
        #: Node name -> the Pods bound to it, by key (a lock looks at one Node's Pods).
        self._on_node: dict[str, dict[str, kube.Obj]] = {}
        self._node_of: dict[str, str] = {}
        #: Called for every change of any Pod (the syncer's locks).
        self.any_pod_handlers: list[PodHandler] = []
        #: Node name -> its allocatable as written and as parsed (Nodes change often, their
        #: allocatable seldom: each lock taint is a Node event).
        self._allocatable: dict[str, tuple[tuple[tuple[str, str], ...], fit.Resources]] = {}
        self.health = Health(self.state, poll_interval=settings.slurm_poll_interval,
                             informers=self.informers)
        self.ready = asyncio.Event()
        #: Called for every change of a Pod that names this scheduler.
        self.pod_handlers: list[PodHandler] = []
        #: Slurm's node names (for placement), and a generation that grows when they change.
        self.slurm_node_names: frozenset[str] | None = None
        self._slurm_nodes_generation = 0
        self._index: tuple[int, NodeIndex] | None = None
        self._snapshot: tuple[tuple[int, int, int], placement.Snapshot] | None = None
        #: Pod uid -> set when that Pod object is gone (placeholder jobs wait on it).
        self._gone: dict[str, asyncio.Event] = {}

    def informers(self) -> list[kube.Informer]:
        """The informers that run: the scheduled Pods' and Namespaces' only with the scheduler
        component."""
        shared = [self.node_informer, self.slurmd_informer, self.all_pods]
        if self.scheduling:
            shared += [self.namespace_informer, self.job_informer]
        return shared

    def optional_informers(self) -> list[kube.Informer]:
        """Informers run but not waited for (a CRD that may not be installed)."""
        return [self.podgroup_informer] if (
            self.scheduling and self.settings.watch_podgroups) else []

    async def run(self) -> None:
        """Run the informers until cancelled; :attr:`ready` once every cache is synced."""
        async with asyncio.TaskGroup() as tasks:
            for informer in [*self.informers(), *self.optional_informers()]:
                tasks.create_task(informer.run())
            await asyncio.gather(*(i.synced.wait() for i in self.informers()))
            tasks.create_task(forever("probing the API server",
                                      lambda: self.health.probe_kube(self.api)))
            self.ready.set()

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
        return pod if pod is not None and pod["metadata"].get("uid") == who.uid else None

    def _on_pod(self, kind: str, pod: kube.Obj) -> None:
        self.assumed.observe(kind, pod)
        self._track_gang(kind, pod)
        if kind == "DELETED":
            uid = pod["metadata"].get("uid", "")
            if (gone := self._gone.pop(uid, None)) is not None:
                gone.set()
            self.state.forget(kube.key(pod))
        for handler in self.pod_handlers:
            handler(kind, pod)

    def _on_other(self, kind: str, obj: kube.Obj) -> None:
        self.assumed.observe(kind, obj)

    def _on_node_event(self, kind: str, node: kube.Obj) -> None:
        self.assumed.observe(kind, node)
        self.node_changes.add((node.get("metadata") or {}).get("name", ""))

    # -- gangs ---------------------------------------------------------------------------------
    def _track_gang(self, kind: str, pod: kube.Obj) -> None:
        key = kube.key(pod)
        was = self._gang_of.pop(key, None)
        if was is not None:
            members = self._gang_pods[was]
            members.pop(key, None)
            if not members:
                del self._gang_pods[was]
        name = gang.gang_name(pod, self.settings.annotation_prefix)
        if name is not None and kind != "DELETED":
            gang_key = f"{pod['metadata']['namespace']}/{name}"
            self._gang_pods.setdefault(gang_key, {})[key] = pod
            self._gang_of[key] = gang_key

    def gang_of(self, pod: kube.Obj) -> str | None:
        """The key of the gang ``pod`` may belong to (whether it is one is for its claim)."""
        name = gang.gang_name(pod, self.settings.annotation_prefix)
        return None if name is None else f"{pod['metadata']['namespace']}/{name}"

    def gang_pods(self, key: str) -> list[kube.Obj]:
        """The Pods naming this scheduler that may belong to the gang ``key``."""
        return list(self._gang_pods.get(key, {}).values())

    def gang_members(self, who: PodIdentity) -> list[kube.Obj]:
        """The Pods a gang's job is for that still exist (any phase)."""
        wanted = set(who.members)
        return [p for p in self.gang_pods(who.key)
                if member_id(p["metadata"].get("uid", "")) in wanted]

    def gang_owners(self) -> gang.Owners:
        jobs, groups = self.job_informer.cache, self.podgroup_informer.cache

        def job(namespace: str, name: str) -> tuple[int | None, int | None] | None:
            found = jobs.get(f"{namespace}/{name}")
            if found is None:
                return None
            spec = found.get("spec") or {}
            return spec.get("parallelism"), spec.get("completions")

        def podgroup(namespace: str, name: str) -> int | None:
            found = groups.get(f"{namespace}/{name}")
            size = ((found or {}).get("spec") or {}).get("minMember")
            return size if isinstance(size, int) and not isinstance(size, bool) else None

        return gang.Owners(job=job, podgroup=podgroup,
                           podgroups_known=self.podgroup_informer.synced.is_set())

    def _on_gang_owner(self, source: str, obj: kube.Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{source}:{meta.get('name')}"
        for handler in self.gang_handlers:
            handler(key)

    # -- every Pod, by the Node it is bound to ---------------------------------------------------
    def _keep_pod(self, pod: kube.Obj) -> kube.Obj:
        """What the Pod cache keeps of ``pod``: the trimmed Pod, and the whole one while its
        policies are still to run."""
        key = kube.key(pod)
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        if (self.scheduling and spec.get("schedulerName") == self.settings.scheduler_name
                and not spec.get("nodeName") and not (
                    self._job_key in annotations
                    and annotations.get(self._uid_key) == meta.get("uid"))):
            meta.pop("managedFields", None)
            self._whole[key] = _encode(pod)
        elif self._whole:
            self._whole.pop(key, None)
        return kube.trim_pod(pod)

    async def whole_pod(self, pod: kube.Obj) -> kube.Obj | None:
        """``pod`` with every field (the cache's copy is trimmed), for its policies: kept from
        its last event while it waits for a job, else read again from the API server. None
        if the API server no longer has this Pod (gone, or another of the same name)."""
        meta = pod["metadata"]
        whole = self._whole.get(kube.key(pod))
        found: Any = _decode(whole) if whole is not None else None
        if not _same_pod(found, meta):
            # A Pod that had a job and needs another: rare enough for one more read.
            try:
                found = await self.api.request("GET", f"pods/{meta['name']}",
                                               namespace=meta.get("namespace"))
            except kube.KubeError as exc:
                if exc.status == 404:  # deleted meanwhile: its DELETED event follows
                    return None
                raise
            if not _same_pod(found, meta):
                return None
            found["metadata"].pop("managedFields", None)
        return typing.cast(kube.Obj, found)

    def _on_any_pod(self, kind: str, pod: kube.Obj) -> None:
        key = kube.key(pod)
        if kind == "DELETED":
            self._whole.pop(key, None)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if (was := self._node_of.pop(key, None)) is not None:
            on_node = self._on_node[was]
            on_node.pop(key, None)
            if not on_node:
                del self._on_node[was]
        if node_name and kind != "DELETED":
            self._on_node.setdefault(node_name, {})[key] = pod
            self._node_of[key] = node_name
        self.usage.observe(kind, pod)
        if self.scheduling:
            for subset in self.pod_informers:
                subset.observe(kind, pod)
        for handler in self.any_pod_handlers:
            handler(kind, pod)

    def _names_us(self, namespace: str | None, pod: kube.Obj) -> bool:
        """The Pod names this scheduler and is in ``namespace`` (None: any)."""
        return ((pod.get("spec") or {}).get("schedulerName") == self.settings.scheduler_name
                and (namespace is None or (pod.get("metadata") or {}).get("namespace")
                     == namespace))

    def pods_on(self, node: str) -> list[kube.Obj]:
        return list(self._on_node.get(node, {}).values())

    def any_pod(self, key: str) -> kube.Obj | None:
        return self.all_pods.cache.get(key)

    def watched(self, kind: str, obj: Mapping[str, Any]) -> kube.Obj | None:
        """``obj`` (a Pod or a Node) as the watch that confirms writes to it shows it now (the
        one whose copy is read with the assume cache on top); None if not watched."""
        meta = obj.get("metadata") or {}
        if kind == "nodes":
            return self.node(meta.get("name", ""))
        if kind == "pods":
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            return self.pod(key) or self.slurmd_informer.cache.get(key)
        return None

    def _is_slurmd(self, pod: kube.Obj) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return bool(self.slurmd_selector) and all(
            labels.get(k) == v for k, v in self.slurmd_selector.items())

    def _stays_beside_slurm(self, pod: kube.Obj) -> bool:
        """Left in place by a node lock, so it counts against a Slurm job's Pod. A Pod naming
        this scheduler counts as placed by sunk here (a conservative count: the lock itself
        asks Slurm, :meth:`sunk.loops.syncer.Syncer._placed_by_sunk`)."""
        placed = (pod.get("spec") or {}).get("schedulerName") == self.settings.scheduler_name
        return locking.pod_on_node(pod, placed_by_sunk=placed,
                                   slurmd_selector=self.slurmd_selector).stays

    def not_counted_by_slurm(self, node: str) -> list[str]:
        """The Pods on Node ``node`` whose room Slurm does not know is taken
        (:mod:`sunk.plans.fit`): a Pod counts as Slurm's while a job of ours that names it (alone,
        or as a gang member) has not ended."""
        def counted(pod: kube.Obj) -> bool:
            uid = (pod.get("metadata") or {}).get("uid", "")
            job_id = self.jobs.by_uid.get(uid, self.jobs.member_of.get(member_id(uid)))
            job = self.jobs.get(job_id) if job_id is not None else None
            return job is not None and not job.finished

        return fit.not_counted_by_slurm(self.pods_on(node), staying=self._stays_beside_slurm,
                                        reserved=self._reserved, counted=counted)

    def _reserved(self, pod: kube.Obj) -> bool:
        """What Slurm's node definition must leave room for: the slurmd Pod, DaemonSet Pods."""
        owners = (pod.get("metadata") or {}).get("ownerReferences") or []
        return self._is_slurmd(pod) or any(o.get("kind") == "DaemonSet" for o in owners)

    def room(self, pod: kube.Obj, node: str) -> list[str]:
        """What Node ``node`` lacks for ``pod`` in Kubernetes' view ([] if it fits)."""
        obj = self.node(node)
        if obj is None:
            return [f"no Node {node}"]
        return fit.shortfall(fit.pod_requests(pod), self.allocatable(obj), self.usage.used(node))

    def allocatable(self, node: kube.Obj) -> fit.Resources:
        """The Node's allocatable, parsed once for as long as it stays the same."""
        raw = tuple(sorted(((node.get("status") or {}).get("allocatable") or {}).items()))
        name = (node.get("metadata") or {}).get("name", "")
        cached = self._allocatable.get(name)
        if cached is None or cached[0] != raw:
            cached = (raw, fit.allocatable(node))
            self._allocatable[name] = cached
        return cached[1]

    async def wait_pod_gone(self, uid: str, within: float) -> bool:
        """Whether the Pod ``uid`` is gone within ``within`` seconds."""
        gone = self._gone.setdefault(uid, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await gone.wait()
        return gone.is_set()

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
        nodes = {
            name: placement.NodeInfo(
                name=name, labels=n["metadata"].get("labels") or {},
                taints=tuple((n.get("spec") or {}).get("taints") or ()),
                unschedulable=bool((n.get("spec") or {}).get("unschedulable")),
                allocatable=self.allocatable(n))
            for name, n in self.node_informer.cache.items()}
        snapshot = placement.Snapshot(slurm_to_k8s=self.index().to_k8s, nodes=nodes,
                                      slurm_nodes=self.slurm_node_names,
                                      used=self.usage.used, exclusions=self.exclusions)
        self._snapshot = (version, snapshot)
        return snapshot
