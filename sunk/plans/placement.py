"""Which Slurm nodes a Pod must not land on (pure).

The reference scheduler ignores taints, node affinity and the Node's room, so Slurm may pick a
Node whose kubelet then rejects the Pod. We narrow Slurm's choice instead: every Slurm node
whose Kubernetes Node the Pod could not run on (a taint, a selector, affinity, or no room left
in Kubernetes' view: :mod:`sunk.plans.fit`) goes into the job's ``excluded_nodes``. Slurm still
picks among the rest (never a full ``required_nodes`` list: after a node removal and a
slurmctld restart that killed every such job in a peer project).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import msgspec

from sunk import objects
from sunk.plans import fit

if TYPE_CHECKING:
    from sunk.plans.exclusions import Exclusions

LOCK_TAINT = "sunk.coreweave.com/lock"
_encode = msgspec.json.Encoder().encode
_BLOCKING_EFFECTS = {"NoSchedule", "NoExecute"}
#: Why a node is excluded, when that may pass by itself (a cordon lifted, a slurmd Pod back).
UNMAPPED = "no slurmd Pod runs it"
CORDONED = "unschedulable (cordoned)"
#: Why a node is excluded when it lacks room for the Pod (that passes too, as Pods end).
NO_ROOM = "no room"
PASSING_REASONS = frozenset({UNMAPPED, CORDONED})


def passes(reason: str) -> bool:
    """Whether an exclusion may pass by itself (and the Pod should wait, not be rejected)."""
    return reason in PASSING_REASONS or reason.startswith(NO_ROOM)


@dataclass(frozen=True)
class NodeInfo:
    """What placement needs of one Kubernetes Node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False
    #: The Node's allocatable (None: unknown, so room is not checked).
    allocatable: fit.Resources | None = None

    #: The taints a Pod must tolerate (NoSchedule, NoExecute; not our lock: placeholder jobs
    #: are what it is for), found once per Node rather than per Pod: most Nodes have none.
    blocking_taints: tuple[Mapping[str, Any], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        blocking = tuple(t for t in self.taints if t.get("key") != LOCK_TAINT
                         and t.get("effect") in _BLOCKING_EFFECTS) if self.taints else ()
        object.__setattr__(self, "blocking_taints", blocking)


@dataclass(frozen=True)
class Snapshot:
    """The cluster as placement sees it: Slurm nodes and the Kubernetes Nodes hosting them."""

    #: Slurm node name -> Kubernetes Node name (from the slurmd Pods).
    slurm_to_k8s: Mapping[str, str]
    nodes: Mapping[str, NodeInfo]
    #: Slurm nodes Slurm knows of (None: not known yet, so only mapped nodes are considered).
    slurm_nodes: frozenset[str] | None = None
    #: Node name -> the requests bound there that a node lock leaves (None: room unchecked).
    used: Callable[[str], fit.Resources] | None = None
    #: Each kind of Pod's excluded nodes, kept across snapshots (None: found afresh each time).
    exclusions: Exclusions | None = field(default=None, compare=False)

    @cached_property
    def known_nodes(self) -> tuple[tuple[str, NodeInfo | None], ...]:
        """Each Slurm node placement considers, sorted by name, with its Kubernetes Node (None:
        unmapped). Found once per snapshot, not per Pod: a snapshot's mappings are not changed
        after it is built (``Cluster.snapshot`` builds a new one when any of them changes)."""
        known = self.slurm_nodes if self.slurm_nodes is not None else self.slurm_to_k8s
        to_k8s, nodes = self.slurm_to_k8s, self.nodes
        return tuple((slurm_node, nodes.get(k8s) if (k8s := to_k8s.get(slurm_node)) else None)
                     for slurm_node in sorted(known))

    @cached_property
    def on_k8s_node(self) -> Mapping[str, tuple[str, ...]]:
        """Kubernetes Node name -> the Slurm nodes placement considers on it."""
        on: dict[str, list[str]] = {}
        for slurm_node, _ in self.known_nodes:
            if k8s := self.slurm_to_k8s.get(slurm_node):
                on.setdefault(k8s, []).append(slurm_node)
        return {k8s: tuple(names) for k8s, names in on.items()}

    def k8s_node(self, slurm_node: str) -> NodeInfo | None:
        """The Kubernetes Node running ``slurm_node`` (None: no slurmd Pod runs it)."""
        k8s = self.slurm_to_k8s.get(slurm_node)
        return self.nodes.get(k8s) if k8s else None

    def room(self, wants: fit.Resources, node: NodeInfo) -> str | None:
        """None if the Node has room for ``wants`` in Kubernetes' view, else what it lacks."""
        if self.used is None or node.allocatable is None:
            return None
        lacking = fit.shortfall(wants, node.allocatable, self.used(node.name))
        return f"{NO_ROOM}: {'; '.join(lacking)}" if lacking else None


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration matching (core/v1 Toleration.ToleratesTaint)."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement_holds(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
    present = key in labels
    value = labels.get(key, "")
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def _term_holds(term: Mapping[str, Any], node: NodeInfo) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects (Kubernetes semantics)
    field_values = {"metadata.name": node.name}
    return (all(_requirement_holds(r, node.labels) for r in exprs)
            and all(_requirement_holds(r, field_values) for r in fields))


@dataclass(frozen=True)
class PodConstraints:
    """What a Pod asks of a Node (tolerations, nodeSelector, required node affinity), read
    from its spec once: placement checks every Node for every Pod submitted."""

    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: tuple[tuple[str, Any], ...] = ()
    #: The required node affinity's terms (one must hold; none: no affinity required).
    affinity_terms: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodConstraints:
        spec = objects.pod(pod).spec
        return cls(tolerations=spec.tolerations, node_selector=tuple(spec.node_selector.items()),
                   affinity_terms=spec.required_node_terms)

    @cached_property
    def key(self) -> bytes:
        """The same for two Pods that ask the same of a Node."""
        return _encode((self.tolerations, self.node_selector, self.affinity_terms))

    @property
    def selective(self) -> bool:
        """The Pod asks for particular labels or fields (nodeSelector, required affinity)."""
        return bool(self.node_selector or self.affinity_terms)

    def tolerates_taints(self, node: NodeInfo) -> bool:
        return all(tolerates(self.tolerations, taint) for taint in node.blocking_taints)

    def selects(self, node: NodeInfo) -> bool:
        """The Node's labels and name meet the nodeSelector and the required affinity."""
        labels = node.labels
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        return not self.affinity_terms or any(_term_holds(t, node) for t in self.affinity_terms)

    def fits(self, node: NodeInfo) -> bool:
        """Whether the Pod may run on ``node`` (``why_not`` is None), without building text."""
        return not node.unschedulable and self.tolerates_taints(node) and self.selects(node)

    def why_not(self, node: NodeInfo) -> str | None:
        """None if the Pod may run on ``node``, else why not: the first of cordon, taint,
        selector, affinity that forbids it."""
        if node.unschedulable:
            return CORDONED
        for taint in node.blocking_taints:
            if not tolerates(self.tolerations, taint):
                return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
        for key, value in self.node_selector:
            if node.labels.get(key) != value:
                return f"nodeSelector {key}={value}"
        if self.affinity_terms and not any(_term_holds(t, node) for t in self.affinity_terms):
            return "required node affinity"
        return None


def node_fits(pod: Mapping[str, Any], node: NodeInfo) -> str | None:
    """None if the Pod may run on ``node``, else why not (taint, selector or affinity)."""
    return PodConstraints.of(pod).why_not(node)


def room_needs(wants: fit.Resources) -> tuple[tuple[str, int], ...]:
    """What must stay within a Node's allocatable for one more Pod (as ``fit.shortfall``
    counts it): each resource requested above zero, and one of the Node's ``pods``."""
    return tuple((r, amount) for r, amount in (*wants.items(), (fit.PODS, 1)) if amount > 0)


def excluded_slurm_nodes(pod: Mapping[str, Any], snap: Snapshot) -> list[str]:
    """Slurm nodes the Pod must not get: unmapped ones, and those on Nodes it does not fit
    (sorted by name). Through the snapshot's :class:`Exclusions` when it has them."""
    if snap.exclusions is not None:
        return snap.exclusions.excluded(pod, snap)
    constraints = PodConstraints.of(pod)
    needs = room_needs(fit.pod_requests(pod))
    return [slurm_node for slurm_node, node in snap.known_nodes
            if node_excluded(constraints, needs, node, snap.used)]


def node_excluded(constraints: PodConstraints, needs: tuple[tuple[str, int], ...],
                  node: NodeInfo | None, used: Callable[[str], fit.Resources] | None) -> bool:
    """Whether a Slurm node on ``node`` is excluded. Runs for every Node at a full look, so the
    usual Node (no taint, room to spare) for the usual Pod (no selector, no affinity) costs a
    few attribute reads and the room sums, which are ``fit.shortfall``'s without its text."""
    if (node is None or node.unschedulable
            or (node.blocking_taints and not constraints.tolerates_taints(node))
            or (constraints.selective and not constraints.selects(node))):
        return True
    if used is None or (allocatable := node.allocatable) is None:
        return False
    taken = used(node.name)
    for resource, amount in needs:
        if amount > allocatable.get(resource, 0) - taken.get(resource, 0):
            return True
    return False


def why_excluded(pod: Mapping[str, Any], snap: Snapshot, slurm_node: str) -> str:
    """Why ``slurm_node`` is in the Pod's excluded nodes ("" if it is not)."""
    node = snap.k8s_node(slurm_node)
    if node is None:
        return UNMAPPED
    return node_fits(pod, node) or snap.room(fit.pod_requests(pod), node) or ""


def feasible_k8s_nodes(pod: Mapping[str, Any], snap: Snapshot) -> list[str]:
    constraints = PodConstraints.of(pod)
    return [n.name for n in snap.nodes.values() if constraints.fits(n)]


def gpu_models(pod: Mapping[str, Any], snap: Snapshot, label: str) -> set[str]:
    """GPU models among the Nodes the Pod may land on (to choose a typed GRES)."""
    mapped = set(snap.slurm_to_k8s.values())
    return {snap.nodes[n].labels[label] for n in feasible_k8s_nodes(pod, snap)
            if n in mapped and label in snap.nodes[n].labels}
