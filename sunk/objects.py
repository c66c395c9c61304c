"""The fields of Pods and Nodes that sunk reads, as typed structs decoded once.

The informers keep each object as the dict the API server sent (trimmed: :mod:`sunk.kube.trim`),
because writes, policies and the dashboard need the object as it is. Code that *reads* a Pod or
a Node asks :func:`pod` or :func:`node` for its typed fields instead of walking the dict with
``.get("spec") or {}``: mypy then knows every field, and a missing one has its API default.

An informer decodes each object once, when it caches it (:class:`Decoded` remembers the struct
by the identity of the cached dict); any other dict (an assumed copy, a test's Pod) is decoded
when read. The structs are frozen: they are read, never written.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import msgspec

log = logging.getLogger("sunk.objects")

Obj = dict[str, Any]


def timestamp(moment: datetime.datetime | float) -> str:
    """A moment (an aware datetime, or epoch seconds) as the API server writes one: RFC 3339 in
    UTC, to the second (``2026-11-28T21:57:49Z``)."""
    if not isinstance(moment, datetime.datetime):
        moment = datetime.datetime.fromtimestamp(moment, datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class OwnerReference(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    kind: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = ""
    controller: bool = False


class Meta(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int | None = None
    creation_timestamp: str = ""
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object (the caches' key)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def terminating(self) -> bool:
        return bool(self.deletion_timestamp)


class Resources(msgspec.Struct, frozen=True, gc=False):
    #: Quantities as the API gives them ("500m", "4Gi"): parsed where they are added up.
    requests: dict[str, Any] = {}


class Container(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    name: str = ""
    resources: Resources = Resources()
    #: ``Always`` on an init container: a sidecar, running beside the others.
    restart_policy: str = ""


class SchedulingGroup(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    """``spec.schedulingGroup``: the ``scheduling.k8s.io`` PodGroup the Pod belongs to."""

    pod_group_name: str = ""


class PodSpec(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    node_name: str = ""
    scheduler_name: str = ""
    hostname: str = ""
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: dict[str, Any] = {}
    #: As the API gives them: matched by :mod:`sunk.plans.locking` and placement.
    tolerations: tuple[dict[str, Any], ...] = ()
    node_selector: dict[str, str] = {}
    affinity: dict[str, Any] = {}
    scheduling_group: SchedulingGroup = SchedulingGroup()

    @property
    def required_node_terms(self) -> tuple[dict[str, Any], ...]:
        """The required node affinity's terms (one must hold; none: no affinity required)."""
        node_affinity = self.affinity.get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        return tuple(required.get("nodeSelectorTerms") or ())


class PodStatus(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    phase: str = "Pending"


class Pod(msgspec.Struct, frozen=True, gc=False):
    metadata: Meta = Meta()
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()


class NodeSpec(msgspec.Struct, frozen=True, gc=False):
    unschedulable: bool = False
    #: As the API gives them: matched against tolerations, and written back with changes.
    taints: tuple[dict[str, Any], ...] = ()


class NodeStatus(msgspec.Struct, frozen=True, gc=False):
    allocatable: dict[str, Any] = {}


class Node(msgspec.Struct, frozen=True, gc=False):
    metadata: Meta = Meta()
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()


#: What a :class:`Decoded` holds: :class:`Pod` or :class:`Node`.
T = TypeVar("T", bound=msgspec.Struct)


class Custom(msgspec.Struct, frozen=True, gc=False):
    """The metadata and status of a custom resource (a PodGroup), its status left as JSON."""

    metadata: Meta = Meta()
    status: dict[str, Any] = {}


class Decoded(Generic[T]):
    """Typed copies of the objects an informer caches, found by the identity of the cached
    dict: decoded when cached, dropped when the cache lets the dict go. The cached dicts are
    never changed in place (a changed object arrives as a new dict), so a copy stays true."""

    def __init__(self, kind: type[T]) -> None:
        self.kind: type[T] = kind
        #: The copies by the identity of the cached dict (the dict too: an id is reused).
        self.copies: dict[int, tuple[Mapping[str, Any], T]] = {}

    def __len__(self) -> int:
        return len(self.copies)

    def cached(self, obj: Mapping[str, Any]) -> T | None:
        """``obj``'s fields if an informer caches this very dict, else None (no decoding)."""
        hit = self.copies.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def read(self, obj: Mapping[str, Any]) -> T:
        found = self.cached(obj)
        return found if found is not None else self.decode(obj)

    def decode(self, obj: Mapping[str, Any]) -> T:
        """``obj``'s fields; the API defaults for a field of the wrong type (the API server
        validates objects, so only a hand-made one has them), and a log line naming it."""
        try:
            return msgspec.convert(obj, self.kind, strict=False)
        except msgspec.ValidationError:
            pass
        try:  # an explicit null reads as the field's default, as an absent field does
            return msgspec.convert(_without_nulls(obj), self.kind, strict=False)
        except msgspec.ValidationError as exc:
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            log.warning("%s %r has a field sunk cannot read: %s", self.kind.__name__, name, exc)
            return self.kind()

    def keep(self, obj: Obj) -> None:
        self.copies[id(obj)] = (obj, self.decode(obj))

    def drop(self, obj: Obj) -> None:
        hit = self.copies.get(id(obj))
        if hit is not None and hit[0] is obj:
            del self.copies[id(obj)]


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_without_nulls(v) for v in value if v is not None]
    return value


#: Every cached Pod's and Node's fields (the informers of Pods and Nodes fill them).
PODS: Decoded[Pod] = Decoded(Pod)
NODES: Decoded[Node] = Decoded(Node)
CUSTOM: Decoded[Custom] = Decoded(Custom)
_POD_COPIES, _NODE_COPIES = PODS.copies, NODES.copies


def pod(obj: Mapping[str, Any]) -> Pod:
    """The fields sunk reads of a Pod (decoded once if an informer caches it). The hottest
    call of the scheduler (about 120 a Pod): :meth:`Decoded.read` written out."""
    hit = _POD_COPIES.get(id(obj))
    return hit[1] if hit is not None and hit[0] is obj else PODS.decode(obj)


def node(obj: Mapping[str, Any]) -> Node:
    """The fields sunk reads of a Node (decoded once if an informer caches it)."""
    hit = _NODE_COPIES.get(id(obj))
    return hit[1] if hit is not None and hit[0] is obj else NODES.decode(obj)


def custom(obj: Mapping[str, Any]) -> Custom:
    """A custom resource's metadata and status (decoded each time: none is cached)."""
    return CUSTOM.decode(obj)


def pod_or_node(obj: Mapping[str, Any]) -> Pod | Node:
    """The fields of a Pod or a Node, whichever ``obj`` is cached as (code that serves both,
    such as the assume cache); one not cached is read as a Pod (a Node's metadata reads the
    same)."""
    return NODES.cached(obj) or PODS.read(obj)
