"""The fast placement checks give the answers of the plain per-node code they replaced.

``excluded_slurm_nodes`` reads the Pod once and skips work on the usual Node; the oracle below is
the code before that (copied as it was), run over random Nodes and Pods with a fixed seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sunk.plans import fit
from sunk.plans.exclusions import MAX_RESOURCES, Exclusions
from sunk.plans.fit import NodeChanges
from sunk.plans.placement import (
    CORDONED,
    LOCK_TAINT,
    NO_ROOM,
    UNMAPPED,
    NodeInfo,
    Snapshot,
    excluded_slurm_nodes,
    feasible_k8s_nodes,
    node_fits,
    why_excluded,
)

# -- the oracle: placement as it was, one Node at a time --------------------------------------

_BLOCKING_EFFECTS = {"NoSchedule", "NoExecute"}


def old_room(snap: Snapshot, wants: fit.Resources, node: NodeInfo) -> str | None:
    if snap.used is None or node.allocatable is None:
        return None
    lacking = fit.shortfall(wants, node.allocatable, snap.used(node.name))
    return f"{NO_ROOM}: {'; '.join(lacking)}" if lacking else None


def old_tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
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


def old_requirement_holds(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
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


def old_term_holds(term: Mapping[str, Any], node: NodeInfo) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    field_values = {"metadata.name": node.name}
    return (all(old_requirement_holds(r, node.labels) for r in exprs)
            and all(old_requirement_holds(r, field_values) for r in fields))


def old_node_fits(pod: Mapping[str, Any], node: NodeInfo) -> str | None:
    spec = pod.get("spec") or {}
    if node.unschedulable:
        return CORDONED
    tolerations = spec.get("tolerations") or []
    for taint in node.taints:
        if taint.get("key") == LOCK_TAINT:
            continue
        if taint.get("effect") in _BLOCKING_EFFECTS and not old_tolerates(tolerations, taint):
            return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(old_term_holds(t, node) for t in terms):
        return "required node affinity"
    return None


def old_excluded_slurm_nodes(pod: Mapping[str, Any], snap: Snapshot) -> list[str]:
    known = snap.slurm_nodes if snap.slurm_nodes is not None else frozenset(snap.slurm_to_k8s)
    wants = fit.pod_requests(pod)
    excluded = []
    for slurm_node in sorted(known):
        k8s = snap.slurm_to_k8s.get(slurm_node)
        node = snap.nodes.get(k8s) if k8s else None
        if node is None or old_node_fits(pod, node) is not None or old_room(snap, wants, node):
            excluded.append(slurm_node)
    return excluded


def old_why_excluded(pod: Mapping[str, Any], snap: Snapshot, slurm_node: str) -> str:
    k8s = snap.slurm_to_k8s.get(slurm_node)
    node = snap.nodes.get(k8s) if k8s else None
    if node is None:
        return UNMAPPED
    return old_node_fits(pod, node) or old_room(snap, fit.pod_requests(pod), node) or ""


# -- random Nodes and Pods --------------------------------------------------------------------

TAINT_KEYS = ("gpu-broken", "dedicated", LOCK_TAINT, "node.kubernetes.io/not-ready")
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
LABEL_KEYS = ("zone", "gpu.nvidia.com/model", "rank", "pool")
LABEL_VALUES = ("a", "b", "H100", "3", "10", "-2", "")
RESOURCES = ("cpu", "memory", "pods", "nvidia.com/gpu")


def maybe(rng: random.Random, into: dict[str, Any], key: str, choices: tuple[Any, ...]) -> None:
    """Set ``key`` to one of ``choices``, or leave it out (absent and empty both occur)."""
    if rng.random() < 0.7:
        into[key] = rng.choice(choices)


def random_taint(rng: random.Random) -> dict[str, Any]:
    taint: dict[str, Any] = {"key": rng.choice(TAINT_KEYS)}
    maybe(rng, taint, "value", ("", "true", "a"))
    maybe(rng, taint, "effect", EFFECTS)
    return taint


def random_amounts(rng: random.Random, scale: int) -> dict[str, int]:
    """Amounts of some of RESOURCES (the others absent), in fit's units."""
    units = {"cpu": 1000 * scale, "memory": 2**30 * scale, "pods": scale, "nvidia.com/gpu": 1}
    return {r: rng.randint(0, 8) * units[r] for r in RESOURCES if rng.random() < 0.75}


def random_node(rng: random.Random, name: str) -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={k: rng.choice(LABEL_VALUES) for k in LABEL_KEYS if rng.random() < 0.6},
        taints=tuple(random_taint(rng) for _ in range(rng.choice((0, 0, 0, 1, 1, 2, 3)))),
        unschedulable=rng.random() < 0.1,
        allocatable=random_amounts(rng, 4) if rng.random() < 0.85 else None)


def random_snapshot(rng: random.Random) -> Snapshot:
    names = [f"k{i}" for i in range(rng.randint(1, 30))]
    nodes = {n: random_node(rng, n) for n in names if rng.random() < 0.9}
    to_k8s = {f"s{i:02d}": rng.choice([*names, "", "gone"]) for i in range(len(names))}
    slurm_nodes = None
    if rng.random() < 0.7:
        slurm_nodes = frozenset(n for n in to_k8s if rng.random() < 0.9) | {"s-unmapped"}
    used = {n: random_amounts(rng, 1) for n in names if rng.random() < 0.8}
    return Snapshot(slurm_to_k8s=to_k8s, nodes=nodes, slurm_nodes=slurm_nodes,
                    used=(lambda node: used.get(node, {})) if rng.random() < 0.8 else None)


def random_toleration(rng: random.Random) -> dict[str, Any]:
    tol: dict[str, Any] = {}
    maybe(rng, tol, "key", (*TAINT_KEYS, ""))
    maybe(rng, tol, "operator", ("Exists", "Equal", ""))
    maybe(rng, tol, "value", ("", "true", "a"))
    maybe(rng, tol, "effect", (*EFFECTS, ""))
    return tol


def random_requirement(rng: random.Random) -> dict[str, Any]:
    req: dict[str, Any] = {"key": rng.choice(LABEL_KEYS),
                           "operator": rng.choice(("In", "NotIn", "Exists", "DoesNotExist",
                                                   "Gt", "Lt"))}
    if rng.random() < 0.8:
        req["values"] = rng.sample(LABEL_VALUES, rng.choice((0, 1, 1, 2)))
    return req


def random_term(rng: random.Random, names: list[str]) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if rng.random() < 0.8:
        term["matchExpressions"] = [random_requirement(rng) for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.3:
        term["matchFields"] = [{"key": "metadata.name", "operator": rng.choice(("In", "NotIn")),
                                "values": rng.sample(names, min(len(names), 3))}]
    return term


def random_pod(rng: random.Random, names: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": []}
    for _ in range(rng.randint(0, 2)):
        requests = {r: rng.choice(texts) for r, texts in (
            ("cpu", ("0", "500m", "2", "16")), ("memory", ("0", "100Mi", "4Gi", "64Gi")),
            ("nvidia.com/gpu", ("0", "1", "8"))) if rng.random() < 0.6}
        spec["containers"].append({"name": "c", "resources": {"requests": requests}})
    if rng.random() < 0.6:
        spec["tolerations"] = [random_toleration(rng) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.3:
        spec["nodeSelector"] = {rng.choice(LABEL_KEYS): rng.choice(LABEL_VALUES)
                                for _ in range(rng.randint(0, 2))}
    if rng.random() < 0.4:
        terms = [random_term(rng, names) for _ in range(rng.randint(0, 2))]
        spec["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return {"metadata": {"name": "p"}, "spec": spec}


def kind_of(reason: str) -> str:
    """A reason without its particulars (which taint, which resource)."""
    for prefix in (NO_ROOM, "taint", "nodeSelector"):
        if reason.startswith(prefix):
            return prefix
    return reason


def test_excluded_nodes_and_reasons_match_the_per_node_reference() -> None:
    rng = random.Random(20240611)
    reasons_seen: set[str] = set()
    for _ in range(60):
        snap = random_snapshot(rng)
        names = list(snap.nodes) or ["k0"]
        for _ in range(25):
            pod = random_pod(rng, names)
            assert excluded_slurm_nodes(pod, snap) == old_excluded_slurm_nodes(pod, snap), pod
            for slurm_node in [*snap.slurm_to_k8s, "s-unmapped", "never-heard-of"]:
                expected = old_why_excluded(pod, snap, slurm_node)
                assert why_excluded(pod, snap, slurm_node) == expected, (pod, slurm_node)
                reasons_seen.add(kind_of(expected))
            for node in snap.nodes.values():
                assert node_fits(pod, node) == old_node_fits(pod, node), (pod, node)
            assert feasible_k8s_nodes(pod, snap) == [
                n.name for n in snap.nodes.values() if old_node_fits(pod, n) is None]
    # Every outcome occurred, so the comparison above covered each path.
    assert reasons_seen == {"", UNMAPPED, CORDONED, "taint", "nodeSelector",
                            "required node affinity", NO_ROOM}


# -- the memo: each kind of Pod's exclusions, brought up to date Node by Node ------------------

@dataclass
class World:
    """What placement reads, changed step by step."""

    to_k8s: Mapping[str, str]
    slurm_nodes: frozenset[str] | None
    nodes: dict[str, NodeInfo]
    used: dict[str, dict[str, int]]

    def snapshot(self, memo: Exclusions | None) -> Snapshot:
        """As ``Cluster.snapshot`` builds one: new Node records, the mappings kept as they
        are until they change."""
        used = self.used
        return Snapshot(slurm_to_k8s=self.to_k8s, nodes=dict(self.nodes),
                        slurm_nodes=self.slurm_nodes, used=lambda node: used.get(node, {}),
                        exclusions=memo)


def test_the_memo_answers_as_a_full_look_through_any_sequence_of_changes() -> None:
    """Nodes changed, added and removed, requests bound and released, Slurm nodes remapped,
    the change log cut and kinds of Pod evicted from the memo: after each, the memo's answer
    for every kind of Pod, and for a kind never seen, is a full look's."""
    rng = random.Random(20261126)
    outcomes: set[str] = set()
    for _ in range(40):
        base = random_snapshot(rng)
        names = [f"k{i}" for i in range(len(base.slurm_to_k8s))]
        world = World(base.slurm_to_k8s, base.slurm_nodes, dict(base.nodes),
                      {n: random_amounts(rng, 1) for n in names})
        changes = NodeChanges(limit=rng.choice((4, 16, 4096)))
        memo = Exclusions(changes, kinds=rng.choice((2, 64)))
        pods = [random_pod(rng, names) for _ in range(rng.randint(1, 6))]
        for _ in range(60):
            change = rng.choice(("node", "node", "gone", "used", "used", "used", "remap"))
            name = rng.choice(names)
            if change == "node":
                world.nodes[name] = random_node(rng, name)
                changes.add(name)
            elif change == "gone":
                world.nodes.pop(name, None)
                changes.add(name)
            elif change == "used":
                world.used[name] = random_amounts(rng, 1)
                changes.add(name)
            else:  # a slurmd Pod moved: a new mapping (as a new node index is)
                world.to_k8s = {**world.to_k8s,
                                rng.choice(list(world.to_k8s)): rng.choice([*names, ""])}
            outcomes.add(change)
            # Pods seen before, and one never seen (its requests' Nodes found by bisection)
            for pod in [*rng.sample(pods, rng.randint(1, len(pods))), random_pod(rng, names)]:
                assert memo.excluded(pod, world.snapshot(memo)) == excluded_slurm_nodes(
                    pod, world.snapshot(None)), (change, pod)
    assert outcomes == {"node", "gone", "used", "remap"}


def test_the_change_log_forgets_what_is_older_than_its_limit() -> None:
    changes = NodeChanges(limit=3)
    start = changes.position
    for name in ("a", "b", "a"):
        changes.add(name)
    assert changes.since(start) == {"a", "b"}
    middle = changes.position
    changes.add("c")  # the log is cut: what came before is forgotten
    assert changes.since(start) is None
    assert changes.since(middle) == {"c"}
    assert changes.since(changes.position) == set()


def test_free_room_tracks_a_bounded_number_of_resources_and_still_answers() -> None:
    """Pods naming ever new extended resources: the sorted lists kept stay few, and a kind of
    Pod never seen still gets a full look's answer."""
    rng = random.Random(7)
    base = random_snapshot(rng)
    names = [f"k{i}" for i in range(len(base.slurm_to_k8s))]
    world = World(base.slurm_to_k8s, base.slurm_nodes, dict(base.nodes),
                  {n: random_amounts(rng, 1) for n in names})
    memo = Exclusions(NodeChanges())
    for i in range(3 * MAX_RESOURCES):
        pod = random_pod(rng, names)
        pod["spec"]["containers"].append({"name": "x", "resources": {
            "requests": {f"example.com/r{i}": "1", "cpu": rng.choice(("1", "8"))}}})
        assert memo.excluded(pod, world.snapshot(memo)) == excluded_slurm_nodes(
            pod, world.snapshot(None))
        assert len(memo._room._sorted) <= MAX_RESOURCES
