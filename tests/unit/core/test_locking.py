"""The node lock state machine, on plain data."""

from __future__ import annotations

from sunk.plans.locking import LockState, PodOnNode, plan, pod_on_node

WEB = PodOnNode("ns/web")
WEB_GOING = PodOnNode("ns/web", terminating=True)
KEEPERS = [PodOnNode("ns/ds", daemonset=True), PodOnNode("ns/tol", tolerates_lock=True),
           PodOnNode("ns/sunk", placed_by_sunk=True), PodOnNode("slurm/slurmd", is_slurmd=True)]


def test_unwanted_lock_is_false_without_taint() -> None:
    assert plan(wanted=False, strict=False, pods=[WEB]) == plan(wanted=False, strict=True,
                                                                 pods=[])
    assert plan(wanted=False, strict=False, pods=[WEB]).state is LockState.FALSE
    assert not plan(wanted=False, strict=False, pods=[WEB]).taint


def test_pods_that_stay_are_never_evicted() -> None:
    step = plan(wanted=True, strict=True, pods=KEEPERS)
    assert step.state is LockState.LOCKED_STRICT and step.taint and step.evict == ()


def test_normal_lock_answers_once_evictions_are_accepted() -> None:
    first = plan(wanted=True, strict=False, pods=[WEB, *KEEPERS])
    assert first.state is LockState.PENDING and first.evict == ("ns/web",) and first.taint
    assert plan(wanted=True, strict=False, pods=[WEB_GOING]).state is LockState.LOCKED


def test_strict_lock_waits_until_evicted_pods_are_gone() -> None:
    going = plan(wanted=True, strict=True, pods=[WEB_GOING])
    assert going.state is LockState.PENDING and going.evict == ()
    assert going.waiting_for == ("ns/web",)
    assert plan(wanted=True, strict=True, pods=[]).state is LockState.LOCKED_STRICT


def test_pod_on_node_reads_owner_tolerations_and_sunk_annotation() -> None:
    pod = {"metadata": {"namespace": "n", "name": "p",
                        "ownerReferences": [{"kind": "DaemonSet"}],
                        "annotations": {"sunk.coreweave.com/job-id": "3"}},
           "spec": {"tolerations": [{"key": "sunk.coreweave.com/lock", "operator": "Exists"}]}}
    facts = pod_on_node(pod, placed_by_sunk=True, slurmd_selector={"app": "slurmd"})
    assert facts.daemonset and facts.tolerates_lock and facts.placed_by_sunk
    assert not facts.is_slurmd and facts.stays
    assert LockState.parse("bogus") is LockState.FALSE


def test_a_pod_is_placed_by_sunk_only_on_the_callers_word_not_its_annotations() -> None:
    forged = {"metadata": {"namespace": "n", "name": "p",
                           "annotations": {"sunk.coreweave.com/job-id": "3",
                                           "sunk.coreweave.com/pod-uid": "u"}, "uid": "u"},
              "spec": {}}
    facts = pod_on_node(forged, placed_by_sunk=False, slurmd_selector={"app": "slurmd"})
    assert not facts.placed_by_sunk and not facts.stays
    assert plan(wanted=True, strict=False, pods=[facts]).evict == ("n/p",)
