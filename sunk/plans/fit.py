"""Would the kubelet admit this Pod on this Node? (pure)

Slurm places a Pod's job by Slurm's view of a node; the kubelet admits the Pod by Kubernetes'
view: the Node's allocatable against the requests of every Pod bound to it. Where the two
disagree (a DaemonSet Pod Slurm does not know of, a slurmd Pod's own requests), binding where
Slurm chose would be refused at admission (``OutOfcpu``), so sunk checks the Kubernetes side
too: at submit (Nodes without room are excluded) and at bind (the chosen Node still has room).

Requests are counted as the kubelet counts them (``PodRequests`` in Kubernetes' resource
helpers): the app containers, plus restartable init containers (sidecars) that run beside them,
or the largest moment of the init sequence if that is more, plus the Pod's overhead; each Pod
also takes one of the Node's ``pods``. Only Pods that a node lock leaves in place count against
a Slurm job's Pod (DaemonSet Pods, Pods tolerating the lock taint, Pods placed by sunk, the
slurmd Pod): the lock evicts the others before the job starts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk import objects
from sunk.quantity import Quantity
from sunk.slurm.text import gpu_count, number

#: Amounts by resource, in whole units: CPU in millicores (as Kubernetes keeps it), memory
#: and storage in bytes, anything else in its own unit (integers: cheap to add up and compare).
Resources = Mapping[str, int]
PODS = "pods"
#: Pod phases after which a Pod holds nothing on its Node.
ENDED = frozenset({"Succeeded", "Failed"})


#: The quantities nearly every Pod and Node states ("2", "500m", "100Mi"), read without the
#: general parser: every submission reads a Pod's requests, and exact fractions are slow.
_PLAIN = re.compile(r"([0-9]{1,15})(m|k|M|G|T|Ki|Mi|Gi|Ti)?")
_SCALE = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _units(name: str, text: str) -> int:
    """A quantity in whole units (CPU: millicores), rounded up as Kubernetes rounds."""
    if (plain := _PLAIN.fullmatch(text)) is not None:
        number, suffix = int(plain[1]), plain[2]
        milli = number if suffix == "m" else number * _SCALE[suffix] * 1000
        return milli if name == "cpu" else -(-milli // 1000)
    value = Quantity.parse(text).value
    return math.ceil(value * 1000) if name == "cpu" else math.ceil(value)


def _parse(raw: Mapping[str, Any], *, strict: bool = True) -> dict[str, int]:
    """Quantities by resource; a bad one raises ValueError (``strict``) or counts as none."""
    out: dict[str, int] = {}
    for name, text in raw.items():
        try:
            out[name] = _units(name, str(text))
        except ValueError as exc:
            if strict:
                raise ValueError(f"{name}: {exc}") from exc
    return out


def _add(into: dict[str, int], more: Resources, sign: int = 1) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, 0) + sign * amount


def _max(into: dict[str, int], other: Resources) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The Pod's effective requests, as the kubelet and kube-scheduler compute them. A bad
    quantity raises ValueError (the API server refuses them; a policy reports them first)."""
    spec = objects.pod(pod).spec
    total: dict[str, int] = {}
    for container in spec.containers:
        _add(total, _parse(container.resources.requests))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.init_containers:
        wants = _parse(container.resources.requests)
        if container.restart_policy == "Always":  # a sidecar: it keeps running
            _add(sidecars, wants)
            _max(init_peak, sidecars)
        else:  # runs to completion beside the sidecars started before it
            moment = dict(sidecars)
            _add(moment, wants)
            _max(init_peak, moment)
    _add(total, sidecars)
    _max(total, init_peak)
    _add(total, _parse(spec.overhead))
    return total


def allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    return _parse(objects.node(node).status.allocatable, strict=False)


def holds_node(pod: Mapping[str, Any]) -> bool:
    """The Pod counts against its Node (bound, and not ended)."""
    return _holds(objects.pod(pod))


def _holds(pod: objects.Pod) -> bool:
    return bool(pod.spec.node_name) and pod.status.phase not in ENDED


def _amount(value: int, resource: str) -> str:
    if resource == "cpu":
        return f"{value / 1000:.4g}"
    if resource == "memory" or resource.startswith("hugepages-") or resource.endswith("storage"):
        return f"{value / 2**30:.3g}Gi"
    return str(value)


def shortfall(wants: Resources, allocatable: Resources, used: Resources) -> list[str]:
    """What the Node lacks for a Pod requesting ``wants`` ([] if it fits): each resource the
    Pod asks for, and one of the Node's ``pods``, must stay within allocatable. Called for
    every Node at every submission: the common answer, "it fits", builds no text."""
    lacking = []
    for resource, amount in (*wants.items(), (PODS, 1)):
        if amount > 0 and amount > allocatable.get(resource, 0) - used.get(resource, 0):
            have = allocatable.get(resource, 0)
            free = max(have - used.get(resource, 0), 0)
            lacking.append(f"{resource}: needs {_amount(amount, resource)}, "
                           f"{_amount(free, resource)} of {_amount(have, resource)} left")
    return sorted(lacking)



class NodeChanges:
    """The Kubernetes Nodes whose placement facts changed (the Node object, or what is bound
    to it), in order, so that :class:`Exclusions` look again only at those. Only the newest
    ``limit`` are kept: a memo older than that looks at every Node once."""

    def __init__(self, limit: int = 4096) -> None:
        self._names: list[str] = []
        self._dropped = 0
        self._limit = limit

    @property
    def position(self) -> int:
        return self._dropped + len(self._names)

    def add(self, node: str) -> None:
        if len(self._names) >= self._limit:
            self._dropped += len(self._names)
            self._names = []
        self._names.append(node)

    def since(self, position: int) -> set[str] | None:
        """The Nodes that changed after ``position`` (None: not kept that long)."""
        if position < self._dropped:
            return None
        return set(self._names[position - self._dropped:])


@dataclass
class NodeUsage:
    """The requests bound to each Node, kept up to date one Pod event at a time.

    ``staying`` decides which Pods count against a Slurm job's Pod (those the lock leaves in
    place); ``reserved`` which ones Slurm's node definition must leave room for (the slurmd
    Pod and DaemonSet Pods: what the operator runs beside Slurm on every node).
    """

    staying: Any
    reserved: Any
    #: Pod uid -> (Node, requests, counts as reserved) of the Pods that stay.
    _held: dict[str, tuple[str, dict[str, int], bool]] = field(default_factory=dict)
    _used: dict[str, dict[str, int]] = field(default_factory=dict)
    _reserved: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Pod uid -> (metadata.generation, requests): a Pod's requests are parsed once, not at
    #: every event (its spec's generation grows only when the spec changes).
    _requests: dict[str, tuple[int | None, dict[str, int]]] = field(default_factory=dict)
    #: Pods this process bound that the watch has not shown on a Node yet. An event of theirs
    #: without a Node is older than the binding (the job id's own write, landing just before
    #: it): it leaves their room held. Released, it let 30 Pods be bound where 28 fit (CI).
    _binding: set[str] = field(default_factory=set)

    #: Called with a Node whose room grew (a Pod there ended, went, or moved off it).
    freed: Any = None
    #: Where a Node whose used requests changed (either way) is noted, for placement.
    changed: NodeChanges | None = None

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        p = objects.pod(pod)
        uid = p.metadata.uid
        if uid in self._binding:
            if kind != "DELETED" and not p.spec.node_name:
                return  # from before this process's binding: the room stays held
            self._binding.discard(uid)
        before = self._held.get(uid)
        self._release(uid)
        if kind == "DELETED":
            self._requests.pop(uid, None)
        elif _holds(p) and self.staying(pod):
            self._hold(uid, p.spec.node_name, pod, reserved=bool(self.reserved(pod)))
        if before is not None and self.freed is not None and (
                self._held.get(uid, ("",))[0] != before[0]):
            self.freed(before[0])

    def assume_bound(self, pod: Mapping[str, Any], node: str) -> None:
        """A Pod this process is binding, held there until the watch shows where it is (or
        :meth:`binding_failed`)."""
        uid = objects.pod(pod).metadata.uid
        self._release(uid)
        self._hold(uid, node, pod, reserved=False)
        self._binding.add(uid)

    def binding_failed(self, pod: Mapping[str, Any]) -> None:
        """The binding of :meth:`assume_bound` failed: the Pod holds what the Pod as read
        before it (``pod``) holds."""
        self._binding.discard(objects.pod(pod).metadata.uid)
        self.observe("MODIFIED", pod)

    def used(self, node: str) -> Resources:
        return self._used.get(node, {})

    def reserved_on(self, node: str) -> Resources:
        return self._reserved.get(node, {})

    def _hold(self, uid: str, node: str, pod: Mapping[str, Any], *, reserved: bool) -> None:
        generation = objects.pod(pod).metadata.generation
        cached = self._requests.get(uid)
        if cached is not None and cached[0] == generation and generation is not None:
            wants = cached[1]
        else:
            try:
                wants = {**pod_requests(pod), PODS: 1}
            except ValueError:
                wants = {PODS: 1}  # cannot happen through the API server's validation
            self._requests[uid] = (generation, wants)
        self._held[uid] = (node, wants, reserved)
        _add(self._used.setdefault(node, {}), wants)
        if self.changed is not None:
            self.changed.add(node)
        if reserved:
            _add(self._reserved.setdefault(node, {}), wants)

    def _release(self, uid: str) -> None:
        held = self._held.pop(uid, None)
        if held is None:
            return
        node, wants, reserved = held
        _add(self._used[node], wants, -1)
        if self.changed is not None:
            self.changed.add(node)
        if reserved:
            _add(self._reserved[node], wants, -1)


def not_counted_by_slurm(pods: Iterable[Mapping[str, Any]], *, staying: Any, reserved: Any,
                         counted: Any) -> list[str]:
    """The Pods (``ns/name``) on a Node that take room Slurm does not know is taken: a node
    lock leaves them in place (``staying``), Slurm's node definition sets no room aside for them
    (not ``reserved``: the slurmd Pod, DaemonSet Pods), and no live job of Slurm's counts them
    (not ``counted``). Where Slurm places a job in that room, its Pod cannot be bound."""
    return sorted(objects.pod(p).metadata.key for p in pods
                  if holds_node(p) and staying(p) and not reserved(p) and not counted(p))


def sum_requests(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod in pods:
        _add(total, {**pod_requests(pod), PODS: 1})
    return total


@dataclass(frozen=True)
class Capacity:
    """One resource of one node: what Slurm's node definition offers, and what Kubernetes
    leaves for Slurm (allocatable minus the slurmd and DaemonSet Pods' requests)."""

    resource: str
    slurm: int
    kubernetes: int

    @property
    def over(self) -> bool:
        """Slurm may place more than the Node holds: Pods would be refused."""
        return self.slurm > self.kubernetes


def capacity_mismatch(slurm_node: Mapping[str, Any], allocatable: Resources,
                      reserved: Resources, *, gpu_resource: str) -> tuple[Capacity, ...]:
    """Where Slurm's view of a node and Kubernetes' disagree (() where they agree): CPUs,
    memory (MiB) and GPUs."""
    def left(resource: str, unit: int = 1) -> int:
        return (allocatable.get(resource, 0) - reserved.get(resource, 0)) // unit

    pairs = (("cpu", number(slurm_node.get("cpus")), left("cpu", 1000)),
             ("memory", number(slurm_node.get("real_memory")), left("memory", 2**20)),
             (gpu_resource, gpu_count(slurm_node.get("gres")), left(gpu_resource)))
    return tuple(Capacity(r, s, k) for r, s, k in pairs if s != k)


def describe(mismatch: Iterable[Capacity]) -> str:
    """One line for an Event and the dashboard ("" when the views agree)."""
    unit = {"memory": " MiB"}
    return "; ".join(f"{c.resource}: Slurm {c.slurm}{unit.get(c.resource, '')}, Kubernetes "
                     f"leaves {c.kubernetes}{unit.get(c.resource, '')}" for c in mismatch)
