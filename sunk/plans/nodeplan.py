"""What to do for one node, its lock and its drain, as a list of actions (pure).

The syncer gathers plain facts about one Slurm node and the Kubernetes Node that hosts it;
:func:`plan_node` answers with :mod:`sunk.plans.actions`. The lock's state machine itself is
:func:`sunk.plans.locking.plan`. Node state is kept in step both ways:

- a Slurm drain or down state, and its reason, is shown on the Kubernetes side (annotations on
  the slurmd Pod and the Node, and an Event on the Node when it changes);
- a Kubernetes cordon drains the Slurm node with a reason prefixed ``k8s:``; uncordoning lifts
  only such drains, never one an admin set in Slurm;
- a drain of sunk's for a Pod still terminating at KillWait (``sunk: Pod <key> still
  terminating at KillWait ...``) is lifted once that Pod is gone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.plans import actions as do
from sunk.plans import fit, locking
from sunk.plans.locking import LockState

K8S_DRAIN_PREFIX = "k8s:"
#: How a drain for a Pod that outlived KillWait names the Pod (sunk.hooks.answers, and the
#: placeholder script when the scheduler does not answer).
KILL_WAIT_DRAIN = re.compile(r"^sunk: Pod (?P<key>[^/\s]+/\S+) still terminating at KillWait")


def kill_wait_drain_pod(slurm_info: Mapping[str, Any]) -> str | None:
    """The Pod (namespace/name) a KillWait drain of sunk's on the node is for (None: none)."""
    if "DRAIN" not in set(slurm_info.get("state") or []):
        return None
    m = KILL_WAIT_DRAIN.match(str(slurm_info.get("reason") or ""))
    return m["key"] if m else None


@dataclass(frozen=True)
class NodeFacts:
    slurm_node: str
    k8s_node: str
    #: slurmrestd's record of the Slurm node (state, reason, ...).
    slurm_info: Mapping[str, Any]
    #: The lock state on the slurmd Pod, and whether the Node has the lock taint.
    lock: LockState = LockState.FALSE
    tainted: bool = False
    cordoned: bool = False
    #: A prolog asked for the lock and its request still holds.
    requested: bool = False
    #: Whether the newest request was a strict one (None: no request is kept).
    strict: bool | None = None
    pods: tuple[locking.PodOnNode, ...] = ()
    #: Annotation keys for Slurm's node state and reason.
    state_key: str = "slurm-state"
    reason_key: str = "slurm-reason"
    #: What the slurmd Pod and the Node show now of Slurm's state (their annotations).
    pod_shows: Mapping[str, str] = field(default_factory=dict)
    node_shows: Mapping[str, str] = field(default_factory=dict)
    #: Where Slurm's node definition and Kubernetes' room disagree, and what was last shown.
    mismatch: tuple[fit.Capacity, ...] = ()
    capacity_shown: str = ""
    #: The node is drained for a Pod that outlived KillWait, and that Pod is gone.
    drained_pod_gone: bool = False


def plan_node(facts: NodeFacts) -> tuple[do.NodeAction, ...]:
    return (*plan_lock(facts), *plan_drain(facts), *plan_capacity(facts))


def plan_capacity(facts: NodeFacts) -> tuple[do.NodeAction, ...]:
    """Tell a disagreement between Slurm's view and Kubernetes' once, and when it ends."""
    text = fit.describe(facts.mismatch)
    return () if text == facts.capacity_shown else (do.ShowCapacity(facts.mismatch, text),)


def plan_lock(facts: NodeFacts) -> tuple[do.NodeAction, ...]:
    """Lock while Slurm runs a job there (or a prolog asked), unlock when it runs nothing."""
    wanted = locking.slurm_node_busy(facts.slurm_info) or facts.requested
    strict = facts.strict if facts.strict is not None else facts.lock is LockState.LOCKED_STRICT
    step = locking.plan(wanted=wanted, strict=strict, pods=facts.pods)
    out: list[do.NodeAction] = []
    if facts.tainted != step.taint:
        out.append(do.SetLockTaint(step.taint))
    out += [do.Evict(key) for key in step.evict]
    if step.state is not facts.lock:
        out.append(do.SetLockState(facts.lock, step.state, step.waiting_for))
    return tuple(out)


def plan_drain(facts: NodeFacts) -> tuple[do.NodeAction, ...]:
    """A cordon drains the Slurm node; Slurm's drain or down state shows on the Node."""
    if not facts.slurm_info:
        return ()
    states = set(facts.slurm_info.get("state") or [])
    reason = facts.slurm_info.get("reason") or ""
    drained = "DRAIN" in states
    if facts.cordoned and not drained:
        return (do.DrainSlurmNode(
            f"{K8S_DRAIN_PREFIX} Kubernetes Node {facts.k8s_node} is cordoned"),)
    if not facts.cordoned and drained and reason.startswith(K8S_DRAIN_PREFIX):
        return (do.ResumeSlurmNode(f"Node {facts.k8s_node} is no longer cordoned"),)
    if not facts.cordoned and facts.drained_pod_gone:
        return (do.ResumeSlurmNode(f"the Pod it was drained for is gone ({reason})"),)
    shown = "down" if "DOWN" in states else "drain" if drained else ""
    wanted = {facts.state_key: shown or None,
              facts.reason_key: (reason or None) if shown else None}
    on_pod = any(facts.pod_shows.get(k) != v for k, v in wanted.items())
    on_node = any(facts.node_shows.get(k) != v for k, v in wanted.items())
    if not (on_pod or on_node):
        return ()
    return (do.ShowSlurmState(wanted, shown, reason, on_pod=on_pod, on_node=on_node),)
