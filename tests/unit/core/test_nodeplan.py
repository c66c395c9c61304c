"""One Slurm node's lock and drain -> actions (sunk.plans.nodeplan), on plain data."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from sunk.plans import actions as do
from sunk.plans.locking import LockState, PodOnNode
from sunk.plans.nodeplan import K8S_DRAIN_PREFIX, NodeFacts, plan_drain, plan_lock, plan_node

IDLE: Mapping[str, Any] = {"state": ["IDLE"], "reason": ""}
BUSY: Mapping[str, Any] = {"state": ["ALLOCATED"]}
WEB = PodOnNode("ns/web")
WEB_GOING = PodOnNode("ns/web", terminating=True)
API = PodOnNode("ns/api")
KEEPERS = (PodOnNode("ns/ds", daemonset=True), PodOnNode("ns/tol", tolerates_lock=True),
           PodOnNode("ns/sunk", placed_by_sunk=True), PodOnNode("slurm/slurmd", is_slurmd=True))


def node(slurm_info: Mapping[str, Any] = IDLE, **kw: Any) -> NodeFacts:
    return NodeFacts(slurm_node="h1", k8s_node="n1", slurm_info=slurm_info, **kw)


# -- the lock ---------------------------------------------------------------------------------
def test_an_unwanted_lock_is_released_and_its_taint_removed() -> None:
    facts = node(lock=LockState.LOCKED, tainted=True, pods=(WEB,))
    assert plan_lock(facts) == (do.SetLockTaint(False),
                                do.SetLockState(LockState.LOCKED, LockState.FALSE, ()))


@pytest.mark.parametrize("lock", [LockState.PENDING, LockState.LOCKED_STRICT])
def test_a_pending_or_strict_lock_is_released_too(lock: LockState) -> None:
    assert plan_lock(node(lock=lock, tainted=True, strict=True)) == (
        do.SetLockTaint(False), do.SetLockState(lock, LockState.FALSE, ()))


def test_an_unlocked_idle_node_needs_nothing() -> None:
    assert plan_lock(node(pods=(WEB,))) == ()


def test_a_left_over_taint_alone_is_removed() -> None:
    assert plan_lock(node(tainted=True)) == (do.SetLockTaint(False),)


def test_a_left_over_state_alone_is_reset() -> None:
    assert plan_lock(node(lock=LockState.LOCKED)) == (
        do.SetLockState(LockState.LOCKED, LockState.FALSE, ()),)


@pytest.mark.parametrize("state", [["ALLOCATED"], ["MIXED"], ["IDLE", "COMPLETING"]])
def test_a_busy_slurm_node_locks_after_evicting_its_blockers(state: list[str]) -> None:
    facts = node({"state": state}, pods=(WEB, API, *KEEPERS))
    assert plan_lock(facts) == (
        do.SetLockTaint(True), do.Evict("ns/api"), do.Evict("ns/web"),
        do.SetLockState(LockState.FALSE, LockState.PENDING, ("ns/api", "ns/web")))


def test_a_kept_request_locks_an_idle_node() -> None:
    facts = node(requested=True, strict=True, pods=(WEB,))
    assert plan_lock(facts) == (
        do.SetLockTaint(True), do.Evict("ns/web"),
        do.SetLockState(LockState.FALSE, LockState.PENDING, ("ns/web",)))


def test_still_pending_only_evicts_again() -> None:
    facts = node(BUSY, lock=LockState.PENDING, tainted=True, pods=(WEB,))
    assert plan_lock(facts) == (do.Evict("ns/web"),)


@pytest.mark.parametrize(("strict", "after"), [(False, LockState.LOCKED),
                                                (True, LockState.LOCKED_STRICT)])
def test_cleared_locks_as_the_request_says(strict: bool, after: LockState) -> None:
    facts = node(BUSY, lock=LockState.PENDING, tainted=True, strict=strict, pods=KEEPERS)
    assert plan_lock(facts) == (do.SetLockState(LockState.PENDING, after, ()),)


def test_a_normal_lock_answers_while_evicted_pods_terminate_a_strict_one_waits() -> None:
    normal = node(BUSY, lock=LockState.PENDING, tainted=True, strict=False, pods=(WEB_GOING,))
    assert plan_lock(normal) == (do.SetLockState(LockState.PENDING, LockState.LOCKED, ()),)
    strict = node(BUSY, lock=LockState.PENDING, tainted=True, strict=True, pods=(WEB_GOING,))
    assert plan_lock(strict) == ()  # pending, nothing left to evict: wait for it to go


def test_a_newer_request_changes_the_kind_of_lock() -> None:
    assert plan_lock(node(BUSY, lock=LockState.LOCKED, tainted=True, strict=True)) == (
        do.SetLockState(LockState.LOCKED, LockState.LOCKED_STRICT, ()),)
    assert plan_lock(node(BUSY, lock=LockState.LOCKED_STRICT, tainted=True, strict=False)) == (
        do.SetLockState(LockState.LOCKED_STRICT, LockState.LOCKED, ()),)


@pytest.mark.parametrize("lock", [LockState.LOCKED, LockState.LOCKED_STRICT])
def test_without_a_request_the_lock_keeps_its_kind(lock: LockState) -> None:
    assert plan_lock(node(BUSY, lock=lock, tainted=True, strict=None)) == ()


def test_without_a_request_a_strict_lock_stays_strict_about_terminating_pods() -> None:
    facts = node(BUSY, lock=LockState.LOCKED_STRICT, tainted=True, strict=None,
                 pods=(WEB_GOING,))
    assert plan_lock(facts) == (
        do.SetLockState(LockState.LOCKED_STRICT, LockState.PENDING, ("ns/web",)),)
    normal = node(BUSY, lock=LockState.LOCKED, tainted=True, strict=None, pods=(WEB_GOING,))
    assert plan_lock(normal) == ()


def test_a_missing_taint_is_put_back_on_a_held_lock() -> None:
    assert plan_lock(node(BUSY, lock=LockState.LOCKED, tainted=False)) == (
        do.SetLockTaint(True),)


# -- drains -----------------------------------------------------------------------------------
def test_no_slurm_record_means_nothing_to_do() -> None:
    assert plan_drain(node({}, cordoned=True, pod_shows={"slurm-state": "drain"})) == ()


@pytest.mark.parametrize("state", [["IDLE"], ["ALLOCATED"], ["DOWN"]])
def test_a_cordon_drains_the_slurm_node(state: list[str]) -> None:
    assert plan_drain(node({"state": state, "reason": "whatever"}, cordoned=True)) == (
        do.DrainSlurmNode("k8s: Kubernetes Node n1 is cordoned"),)
    assert K8S_DRAIN_PREFIX == "k8s:"


def test_uncordoning_resumes_a_drain_of_ours() -> None:
    info = {"state": ["IDLE", "DRAIN"], "reason": "k8s: Kubernetes Node n1 is cordoned"}
    assert plan_drain(node(info)) == (do.ResumeSlurmNode("Node n1 is no longer cordoned"),)


def test_a_cordoned_node_drained_by_us_is_shown_not_drained_again() -> None:
    reason = "k8s: Kubernetes Node n1 is cordoned"
    info = {"state": ["IDLE", "DRAIN"], "reason": reason}
    assert plan_drain(node(info, cordoned=True)) == (do.ShowSlurmState(
        {"slurm-state": "drain", "slurm-reason": reason}, "drain", reason),)


@pytest.mark.parametrize("cordoned", [False, True])
def test_an_admins_drain_is_shown_never_resumed(cordoned: bool) -> None:
    info = {"state": ["IDLE", "DRAIN"], "reason": "bad gpu"}
    assert plan_drain(node(info, cordoned=cordoned)) == (do.ShowSlurmState(
        {"slurm-state": "drain", "slurm-reason": "bad gpu"}, "drain", "bad gpu",
        on_pod=True, on_node=True),)


@pytest.mark.parametrize("state", [["DOWN"], ["DOWN", "DRAIN"]])
def test_down_is_shown_as_down(state: list[str]) -> None:
    info = {"state": state, "reason": "Not responding"}
    assert plan_drain(node(info)) == (do.ShowSlurmState(
        {"slurm-state": "down", "slurm-reason": "Not responding"}, "down", "Not responding"),)


def test_a_drain_without_a_reason_removes_the_reason_annotation() -> None:
    assert plan_drain(node({"state": ["DRAIN"]})) == (do.ShowSlurmState(
        {"slurm-state": "drain", "slurm-reason": None}, "drain", ""),)


def test_the_annotation_keys_are_the_callers() -> None:
    info = {"state": ["DRAIN"], "reason": "bad gpu"}
    facts = node(info, state_key="x/state", reason_key="x/reason")
    assert plan_drain(facts) == (do.ShowSlurmState(
        {"x/state": "drain", "x/reason": "bad gpu"}, "drain", "bad gpu"),)


SHOWN = {"slurm-state": "drain", "slurm-reason": "bad gpu"}
DRAINED = {"state": ["IDLE", "DRAIN"], "reason": "bad gpu"}


def test_nothing_when_the_pod_and_node_already_show_it() -> None:
    assert plan_drain(node(DRAINED, pod_shows=SHOWN, node_shows={**SHOWN, "other": "x"})) == ()
    assert plan_drain(node(IDLE)) == ()
    assert plan_drain(node(IDLE, pod_shows={"other": "x"}, node_shows={"other": "y"})) == ()


def test_only_the_side_that_differs_is_written() -> None:
    assert plan_drain(node(DRAINED, pod_shows=SHOWN)) == (do.ShowSlurmState(
        SHOWN, "drain", "bad gpu", on_pod=False, on_node=True),)
    assert plan_drain(node(DRAINED, node_shows=SHOWN)) == (do.ShowSlurmState(
        SHOWN, "drain", "bad gpu", on_pod=True, on_node=False),)
    stale = {"slurm-state": "drain", "slurm-reason": "old reason"}
    assert plan_drain(node(DRAINED, pod_shows=SHOWN, node_shows=stale)) == (do.ShowSlurmState(
        SHOWN, "drain", "bad gpu", on_pod=False, on_node=True),)


def test_a_drain_that_ended_is_no_longer_shown() -> None:
    cleared = {"slurm-state": None, "slurm-reason": None}
    assert plan_drain(node(IDLE, pod_shows=SHOWN)) == (do.ShowSlurmState(
        cleared, "", "", on_pod=True, on_node=False),)
    assert plan_drain(node(IDLE, pod_shows=SHOWN, node_shows=SHOWN)) == (do.ShowSlurmState(
        cleared, "", "", on_pod=True, on_node=True),)
    # A reason Slurm keeps on a node that is neither drained nor down is not shown.
    kept = {"state": ["IDLE"], "reason": "was bad"}
    assert plan_drain(node(kept)) == ()


# -- both ------------------------------------------------------------------------------------
def test_plan_node_is_the_lock_then_the_drain() -> None:
    info = {"state": ["ALLOCATED"], "reason": ""}
    facts = node(info, cordoned=True, pods=(WEB,))
    assert plan_node(facts) == (
        do.SetLockTaint(True), do.Evict("ns/web"),
        do.SetLockState(LockState.FALSE, LockState.PENDING, ("ns/web",)),
        do.DrainSlurmNode("k8s: Kubernetes Node n1 is cordoned"))
    assert plan_node(node()) == ()


def test_a_size_mismatch_is_told_once_and_when_it_ends() -> None:
    from sunk.plans.fit import Capacity
    from sunk.plans.nodeplan import plan_capacity

    over = (Capacity("cpu", 32, 28),)
    base = NodeFacts(slurm_node="h1", k8s_node="n1", slurm_info={"state": ["IDLE"]})
    told = plan_capacity(dataclasses.replace(base, mismatch=over))
    assert told == (do.ShowCapacity(over, "cpu: Slurm 32, Kubernetes leaves 28"),)
    assert plan_capacity(dataclasses.replace(
        base, mismatch=over, capacity_shown="cpu: Slurm 32, Kubernetes leaves 28")) == ()
    assert plan_capacity(dataclasses.replace(
        base, capacity_shown="cpu: Slurm 32, Kubernetes leaves 28")) == (
        do.ShowCapacity((), ""),)
    assert plan_capacity(base) == ()


KILL_WAIT = ("sunk: Pod chaos/p1 still terminating at KillWait (job 831); drained so nothing "
             "else lands here")


def test_a_kill_wait_drain_names_its_pod_and_only_a_drained_node_has_one() -> None:
    from sunk.plans.nodeplan import kill_wait_drain_pod

    assert kill_wait_drain_pod({"state": ["IDLE", "DRAIN"], "reason": KILL_WAIT}) == "chaos/p1"
    script = "sunk: Pod ns/web still terminating at KillWait (job 4)"  # the placeholder's own
    assert kill_wait_drain_pod({"state": ["DRAIN"], "reason": script}) == "ns/web"
    assert kill_wait_drain_pod({"state": ["IDLE"], "reason": KILL_WAIT}) is None
    assert kill_wait_drain_pod({"state": ["DRAIN"], "reason": "bad gpu"}) is None


def test_a_kill_wait_drain_is_resumed_once_its_pod_is_gone_and_kept_while_it_is_there() -> None:
    """Seen in the chaos soak: the node stayed drained for good once the Pod that outlived
    KillWait had gone, and nothing needed the drain any more."""
    info = {"state": ["IDLE", "DRAIN"], "reason": KILL_WAIT}
    (resume,) = plan_drain(node(info, drained_pod_gone=True))
    assert isinstance(resume, do.ResumeSlurmNode) and "is gone" in resume.why
    (shown,) = plan_drain(node(info))
    assert isinstance(shown, do.ShowSlurmState), "the Pod is still there: the drain stays"
    cordoned = plan_drain(node(info, drained_pod_gone=True, cordoned=True))
    assert not any(isinstance(a, do.ResumeSlurmNode) for a in cordoned), \
        "cordoned since: the cordon keeps it drained"
