"""Node locking, the state machine (pure): a Slurm job starts only on a Node cleared of
Kubernetes work that Slurm does not know about.

The lock lives on the cluster objects, so a restarted syncer picks it up where it was: the taint
``sunk.coreweave.com/lock`` on the Node, and an annotation of the same key on the Node's slurmd
Pod::

    false --lock wanted--> pending --blockers cleared--> locked          (a normal Slurm job)
                                                     \\-> locked_strict   (a placeholder job)
    locked | locked_strict --Slurm node runs nothing--> false

Which Pods are cleared: every Pod on the Node except DaemonSet Pods, Pods that tolerate the lock
taint, Pods placed by sunk (Slurm already accounts for them) and the slurmd Pod itself. They are
evicted through the Eviction API, so PodDisruptionBudgets are honoured.

Normal and strict locks differ in when they answer:

- **normal** (``locked``): once every such Pod has been evicted (its eviction was accepted, so
  it is terminating or gone). The job may start while evicted Pods finish their grace period.
- **strict** (``locked_strict``): only once every such Pod object is gone. A placeholder job's
  Pod is bound to the Node the moment the lock answers, so nothing may still be running there.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sunk import objects
from sunk.plans.placement import LOCK_TAINT, tolerates

LOCK_KEY = LOCK_TAINT
LOCK_TAINT_SPEC = {"key": LOCK_TAINT, "value": "true", "effect": "NoSchedule"}


class LockState(enum.StrEnum):
    FALSE = "false"
    PENDING = "pending"
    LOCKED = "locked"
    LOCKED_STRICT = "locked_strict"

    @classmethod
    def parse(cls, value: str | None) -> LockState:
        try:
            return cls(value or "false")
        except ValueError:
            return cls.FALSE  # an unknown value is treated as unlocked, and rewritten

    @property
    def locked(self) -> bool:
        return self in (LockState.LOCKED, LockState.LOCKED_STRICT)


@dataclass(frozen=True)
class PodOnNode:
    """What locking needs of a Pod bound to the Node."""

    key: str
    terminating: bool = False
    daemonset: bool = False
    tolerates_lock: bool = False
    placed_by_sunk: bool = False
    is_slurmd: bool = False

    @property
    def stays(self) -> bool:
        return self.daemonset or self.tolerates_lock or self.placed_by_sunk or self.is_slurmd


@dataclass(frozen=True)
class Plan:
    """What to make true on the cluster for one Node."""

    state: LockState
    taint: bool
    evict: tuple[str, ...] = ()
    #: Pods still in the way (for messages: why a lock is pending).
    waiting_for: tuple[str, ...] = ()


def pod_on_node(pod: Mapping[str, Any], *, placed_by_sunk: bool,
                slurmd_selector: Mapping[str, str]) -> PodOnNode:
    """``placed_by_sunk``: the caller's word, from Slurm (a job of ours names the Pod's uid),
    never from the Pod's own annotations: a Pod that writes sunk's job-id onto itself must
    not stay on a Node locked for Slurm."""
    p = objects.pod(pod)
    labels = p.metadata.labels
    return PodOnNode(
        key=p.metadata.key,
        terminating=p.metadata.terminating,
        daemonset=any(o.kind == "DaemonSet" for o in p.metadata.owner_references),
        tolerates_lock=tolerates(p.spec.tolerations, LOCK_TAINT_SPEC),
        placed_by_sunk=placed_by_sunk,
        is_slurmd=bool(slurmd_selector) and all(labels.get(k) == v
                                                for k, v in slurmd_selector.items()),
    )


def plan(*, wanted: bool, strict: bool, pods: Iterable[PodOnNode]) -> Plan:
    """The next lock state of one Node (it does not depend on the current one: the lock is
    level-triggered, so a restarted syncer reaches the same answer).

    ``wanted``: Slurm runs (or is about to run) a job there. ``strict``: the newest job that
    asked is a placeholder job of ours.
    """
    if not wanted:
        return Plan(LockState.FALSE, taint=False)
    blockers = [p for p in pods if not p.stays]
    to_evict = tuple(sorted(p.key for p in blockers if not p.terminating))
    if strict:
        cleared = not blockers
        target = LockState.LOCKED_STRICT
    else:
        cleared = not to_evict
        target = LockState.LOCKED
    if cleared:
        return Plan(target, taint=True)
    return Plan(LockState.PENDING, taint=True, evict=to_evict,
                waiting_for=tuple(sorted(p.key for p in blockers)))


def slurm_node_busy(node: Mapping[str, Any]) -> bool:
    """Whether slurmrestd's node record shows jobs on it (running, starting or ending)."""
    states = set(node.get("state") or [])
    return bool(states & {"ALLOCATED", "MIXED", "COMPLETING"})
