"""Each kind of Pod's excluded Slurm nodes (:func:`sunk.plans.placement.excluded_slurm_nodes`),
kept across submissions and brought up to date from the Nodes that changed (pure: what changed
is told to it)."""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sunk.plans import fit
from sunk.plans.placement import PodConstraints, Snapshot, node_excluded, room_needs


@dataclass
class _Excluded:
    slurm_to_k8s: Mapping[str, str]
    slurm_nodes: frozenset[str] | None
    position: int
    nodes: set[str]


class Exclusions:
    """:func:`excluded_slurm_nodes` for the kinds of Pod submitted lately (what a Pod asks of
    a Node, and its requests), each brought up to date only on the Nodes that changed since
    (:class:`sunk.plans.fit.NodeChanges`). Looking at every Node at every submission cost
    0.2 ms of CPU a Pod at 100 Nodes, and grows with the cluster; a job's Node changes twice
    (its lock's taint on and off) and its Pod's requests once. A kind not seen lately (Pods of
    many users differ in their requests) is the nodes its Node constraints exclude, kept as a
    kind of their own, and those :class:`FreeRoom` finds short of its requests."""

    def __init__(self, changes: fit.NodeChanges, kinds: int = 64) -> None:
        self.changes = changes
        self._kinds = kinds
        self._memo: OrderedDict[tuple[bytes, tuple[tuple[str, int], ...]], _Excluded] = (
            OrderedDict())
        self._room = FreeRoom(changes)

    def excluded(self, pod: Mapping[str, Any], snap: Snapshot) -> list[str]:
        constraints = PodConstraints.of(pod)
        return sorted(self._nodes(constraints, room_needs(fit.pod_requests(pod)), snap))

    def _nodes(self, constraints: PodConstraints, needs: tuple[tuple[str, int], ...],
               snap: Snapshot) -> set[str]:
        kind = (constraints.key, needs)
        memo = self._memo.pop(kind, None)
        position = self.changes.position
        changed = (self.changes.since(memo.position) if memo is not None
                   and memo.slurm_to_k8s is snap.slurm_to_k8s
                   and memo.slurm_nodes is snap.slurm_nodes else None)
        if memo is None or changed is None:  # new, or the Slurm nodes or their mapping moved
            memo = _Excluded(snap.slurm_to_k8s, snap.slurm_nodes, position,
                             self._fresh(constraints, needs, snap))
        else:
            for k8s in changed:
                node = snap.nodes.get(k8s)
                for slurm_node in snap.on_k8s_node.get(k8s, ()):
                    if node_excluded(constraints, needs, node, snap.used):
                        memo.nodes.add(slurm_node)
                    else:
                        memo.nodes.discard(slurm_node)
            memo.position = position
        self._memo[kind] = memo
        if len(self._memo) > self._kinds:
            self._memo.popitem(last=False)
        return memo.nodes

    def _fresh(self, constraints: PodConstraints, needs: tuple[tuple[str, int], ...],
               snap: Snapshot) -> set[str]:
        """A kind's excluded nodes found anew: every Node looked at for its constraints alone
        (``needs`` empty); else those nodes, and the ones on Nodes short of room."""
        if not needs or snap.used is None:
            return {slurm_node for slurm_node, node in snap.known_nodes
                    if node_excluded(constraints, needs, node, snap.used)}
        nodes = set(self._nodes(constraints, (), snap))
        for k8s in self._room.short_of(needs, snap):
            nodes.update(snap.on_k8s_node.get(k8s, ()))
        return nodes


#: The most resources :class:`FreeRoom` keeps sorted lists of (each costs a list entry per Node,
#: and work at each change of a Node): a Pod may name any extended resource.
MAX_RESOURCES = 16


class FreeRoom:
    """Each Node's free room (allocatable less what is bound there), for each resource Pods
    have asked for, kept sorted: the Nodes short of a request are the front of each list, found
    by bisection and not by a look at every Node. Brought up to date from the Nodes that
    changed (:class:`sunk.plans.fit.NodeChanges`), as :class:`Exclusions`' kinds are."""

    def __init__(self, changes: fit.NodeChanges) -> None:
        self.changes = changes
        self._position: int | None = None
        #: Node name -> (its allocatable, resource -> free), for Nodes with a known allocatable.
        self._free: dict[str, tuple[fit.Resources, dict[str, int]]] = {}
        #: Resource -> (free, Node name) of every Node above, sorted.
        self._sorted: dict[str, list[tuple[int, str]]] = {}

    def short_of(self, needs: tuple[tuple[str, int], ...], snap: Snapshot) -> set[str]:
        """The Nodes with less free than ``needs`` asks of any resource (``snap.used`` set)."""
        untracked = sum(resource not in self._sorted for resource, _ in needs)
        if untracked and len(self._sorted) + untracked > MAX_RESOURCES:
            self._position = None  # Pods named many resources: track only today's again
        self._catch_up(snap)
        short: set[str] = set()
        for resource, amount in needs:
            ranked = self._sorted.get(resource)
            if ranked is None:
                ranked = self._track(resource, snap)
            for _, name in ranked[:bisect.bisect_left(ranked, (amount,))]:
                short.add(name)
        return short

    def _catch_up(self, snap: Snapshot) -> None:
        changed = None if self._position is None else self.changes.since(self._position)
        self._position = self.changes.position
        if changed is None:
            self._free, self._sorted = {}, {}
            for name in snap.nodes:
                self._place(name, snap)
            return
        for name in changed:
            if (before := self._free.pop(name, None)) is not None:
                for resource, free in before[1].items():
                    ranked = self._sorted[resource]
                    del ranked[bisect.bisect_left(ranked, (free, name))]
            self._place(name, snap)

    def _place(self, name: str, snap: Snapshot) -> None:
        """``name``'s free room of each tracked resource, into the sorted lists."""
        node = snap.nodes.get(name)
        if node is None or node.allocatable is None or snap.used is None:
            return
        allocatable, taken = node.allocatable, snap.used(name)
        free = {resource: allocatable.get(resource, 0) - taken.get(resource, 0)
                for resource in self._sorted}
        self._free[name] = (allocatable, free)
        for resource, amount in free.items():
            bisect.insort(self._sorted[resource], (amount, name))

    def _track(self, resource: str, snap: Snapshot) -> list[tuple[int, str]]:
        """A resource asked for the first time: every Node's free room of it."""
        assert snap.used is not None
        ranked = []
        for name, (allocatable, free) in self._free.items():
            free[resource] = allocatable.get(resource, 0) - snap.used(name).get(resource, 0)
            ranked.append((free[resource], name))
        ranked.sort()
        self._sorted[resource] = ranked
        return ranked
