"""Which Slurm nodes a Pod must not land on (pure).

The reference scheduler ignores taints, node affinity and the Node's room, so Slurm may pick a
Node whose kubelet then rejects the Pod. We narrow Slurm's choice instead: every Slurm node
whose Kubernetes Node the Pod could not run on (a taint, a selector, affinity, or no room left
in Kubernetes' view: :mod:`sunk.fit`) goes into the job's ``excluded_nodes``. Slurm still
picks among the rest (never a full ``required_nodes`` list: after a node removal and a
slurmctld restart that killed every such job in a peer project).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk import fit

LOCK_TAINT = "sunk.coreweave.com/lock"
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


def node_fits(pod: Mapping[str, Any], node: NodeInfo) -> str | None:
    """None if the Pod may run on ``node``, else why not (taint, selector or affinity)."""
    spec = pod.get("spec") or {}
    if node.unschedulable:
        return CORDONED
    tolerations = spec.get("tolerations") or []
    for taint in node.taints:
        if taint.get("key") == LOCK_TAINT:
            continue  # our own lock: placeholder jobs are what the lock is for
        if taint.get("effect") in _BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(_term_holds(t, node) for t in terms):
        return "required node affinity"
    return None


def excluded_slurm_nodes(pod: Mapping[str, Any], snap: Snapshot) -> list[str]:
    """Slurm nodes the Pod must not get: unmapped ones, and those on Nodes it does not fit."""
    known = snap.slurm_nodes if snap.slurm_nodes is not None else frozenset(snap.slurm_to_k8s)
    wants = fit.pod_requests(pod)
    excluded = []
    for slurm_node in sorted(known):
        k8s = snap.slurm_to_k8s.get(slurm_node)
        node = snap.nodes.get(k8s) if k8s else None
        if node is None or node_fits(pod, node) is not None or snap.room(wants, node):
            excluded.append(slurm_node)
    return excluded


def why_excluded(pod: Mapping[str, Any], snap: Snapshot, slurm_node: str) -> str:
    """Why ``slurm_node`` is in the Pod's excluded nodes ("" if it is not)."""
    k8s = snap.slurm_to_k8s.get(slurm_node)
    node = snap.nodes.get(k8s) if k8s else None
    if node is None:
        return UNMAPPED
    return node_fits(pod, node) or snap.room(fit.pod_requests(pod), node) or ""


def feasible_k8s_nodes(pod: Mapping[str, Any], snap: Snapshot) -> list[str]:
    return [n.name for n in snap.nodes.values() if node_fits(pod, n) is None]


def gpu_models(pod: Mapping[str, Any], snap: Snapshot, label: str) -> set[str]:
    """GPU models among the Nodes the Pod may land on (to choose a typed GRES)."""
    mapped = set(snap.slurm_to_k8s.values())
    return {snap.nodes[n].labels[label] for n in feasible_k8s_nodes(pod, snap)
            if n in mapped and label in snap.nodes[n].labels}
