"""One Pod and its job -> actions (sunk.plans.podplan), on plain data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk.plans import actions as do
from sunk.plans import ownership, translate, waiting
from sunk.plans.decide import JobView, PodView
from sunk.plans.ownership import Keys, Ownership
from sunk.plans.placement import NodeInfo, Snapshot
from sunk.plans.podplan import MAX_RESUBMITS, PodFacts, plan_deleted, plan_pod, plan_submission
from sunk.policy import Decision, Violation

PREFIX = "sunk.coreweave.com/"
KEYS = Keys.with_prefix(PREFIX)
UID = "uid-1"
RUNNING_STARTED = JobView(state="RUNNING", started=True, node="h1")


def facts(view: PodView | None = None, job: JobView | None = None,
          owned: Ownership | None = None, *, k8s_node: str | None = None,
          told_ignored: bool = False, replaced: frozenset[int] = frozenset()) -> PodFacts:
    return PodFacts("ns/p", view or PodView(), owned or Ownership(), job, k8s_node=k8s_node,
                    told_ignored=told_ignored, replaced=replaced)


def read(annotations: Mapping[str, str], *, proven: int | None = None) -> Ownership:
    return ownership.read(annotations, UID, KEYS, proven=proven, owner_of={})


def test_max_resubmits_is_three() -> None:
    assert MAX_RESUBMITS == 3


# -- annotations only the scheduler writes ------------------------------------------------------
def test_ignored_annotations_are_reported_and_the_pod_scheduled_from_scratch() -> None:
    owned = read({KEYS.job_id: "abc"})
    assert owned.job_id is None
    plan = plan_pod(facts(owned=owned))
    assert plan == do.Plan((do.ReportIgnored(
        "only the scheduler writes these, for this Pod alone: "
        f"{PREFIX}job-id: 'abc' is not a Slurm job id. The Pod is scheduled from scratch."),),
        submit=True)


def test_every_ignored_annotation_is_named_in_one_report() -> None:
    owned = read({KEYS.job_id: "x", KEYS.rejected: "Denied", KEYS.pod_uid: "other"})
    (report,) = plan_pod(facts(owned=owned)).actions
    assert report == do.ReportIgnored(
        "only the scheduler writes these, for this Pod alone: "
        f"{PREFIX}job-id: 'x' is not a Slurm job id; "
        f"{PREFIX}rejected: not written by the scheduler for this Pod (copied from another "
        "Pod?); checking the Pod again; "
        f"{PREFIX}pod-uid: 'other' is not this Pod's uid. The Pod is scheduled from scratch.")


def test_ignored_annotations_name_the_proven_job_and_are_rewritten() -> None:
    owned = read({KEYS.job_id: "7", KEYS.pod_uid: UID}, proven=12)
    plan = plan_pod(facts(PodView(job_id=12), JobView(state="PENDING"), owned))
    assert plan == do.Plan((
        do.ReportIgnored("only the scheduler writes these, for this Pod alone: "
                         f"{PREFIX}job-id: '7' is not this Pod's job; Slurm ties job 12 to it. "
                         "Its job is 12."),
        do.Annotate({KEYS.job_id: "12", KEYS.pod_uid: UID, KEYS.rejected: None},
                    note="adopted job 12"),
    ))


def test_ignored_annotations_are_reported_once() -> None:
    owned = read({KEYS.job_id: "abc"})
    assert plan_pod(facts(owned=owned, told_ignored=True)) == do.Plan((), submit=True)
    owned = read({KEYS.job_id: "7", KEYS.pod_uid: UID}, proven=12)
    plan = plan_pod(facts(PodView(job_id=12), JobView(state="PENDING"), owned,
                          told_ignored=True))
    assert [type(a) for a in plan.actions] == [do.Annotate]


# -- submitting ------------------------------------------------------------------------------
def test_a_pod_without_a_job_is_submitted() -> None:
    assert plan_pod(facts()) == do.Plan((), submit=True)
    assert plan_pod(facts(PodView(phase="Pending"))).submit


@pytest.mark.parametrize(("job", "replaced", "what", "try_"), [
    (None, frozenset(), "job 7 was lost by Slurm before it ran", 1),
    (JobView(state="FAILED"), frozenset({3}), "job 7 failed before it started", 2),
    (JobView(state="NODE_FAIL"), frozenset({3, 5}), "job 7 node_fail before it started", 3),
    (JobView(state="BOOT_FAIL"), frozenset(), "job 7 boot_fail before it started", 1),
])
def test_a_lost_job_is_replaced(job: JobView | None, replaced: frozenset[int], what: str,
                                try_: int) -> None:
    plan = plan_pod(facts(PodView(job_id=7), job, replaced=replaced))
    assert plan == do.Plan((
        do.Replace(7),
        do.PodEvent("SlurmJobLost", f"{what}; submitting a new one (try {try_} of 3)",
                    warning=True),
    ), submit=True)


def test_a_lost_job_already_replaced_is_not_counted_again() -> None:
    assert plan_pod(facts(PodView(job_id=7), None, replaced=frozenset({5, 7}))) == do.Plan(
        (), submit=True)
    # Even at the bound: the third replacement's retry is not a fourth lost job.
    assert plan_pod(facts(PodView(job_id=7), None, replaced=frozenset({1, 2, 7}))) == do.Plan(
        (), submit=True)


@pytest.mark.parametrize(("job", "what"), [
    (None, "job 7 was lost by Slurm before it ran"),
    (JobView(state="FAILED"), "job 7 failed before it started"),
])
def test_the_fourth_lost_job_deletes_the_pod(job: JobView | None, what: str) -> None:
    plan = plan_pod(facts(PodView(job_id=7), job, replaced=frozenset({1, 2, 3})))
    assert plan == do.Plan((do.DeletePod(f"{what}, the 4th lost job"),))
    assert not plan.submit


def test_the_report_comes_before_a_replacement_or_a_deletion() -> None:
    owned = read({KEYS.rejected: "Copied"})
    report = do.ReportIgnored(
        "only the scheduler writes these, for this Pod alone: "
        f"{PREFIX}rejected: not written by the scheduler for this Pod (copied from another "
        "Pod?); checking the Pod again. The Pod is scheduled from scratch.")
    replaced = plan_pod(facts(PodView(job_id=7), None, owned))
    assert replaced.actions[0] == report
    assert [type(a) for a in replaced.actions] == [do.ReportIgnored, do.Replace, do.PodEvent]
    deleted = plan_pod(facts(PodView(job_id=7), None, owned, replaced=frozenset({1, 2, 3})))
    assert deleted == do.Plan((report, do.DeletePod(
        "job 7 was lost by Slurm before it ran, the 4th lost job")))


# -- adoption ---------------------------------------------------------------------------------
def test_an_adopted_job_is_written_onto_the_pod() -> None:
    owned = read({}, proven=12)
    assert owned.ignored == {}
    plan = plan_pod(facts(PodView(job_id=12), JobView(state="PENDING"), owned))
    assert plan == do.Plan((do.Annotate(
        {KEYS.job_id: "12", KEYS.pod_uid: UID, KEYS.rejected: None}, note="adopted job 12"),))


def test_nothing_is_written_without_a_job_id() -> None:
    # A bound Pod without a job: its bad annotations are reported, not rewritten.
    owned = read({KEYS.job_id: "abc"})
    assert owned.write == {KEYS.job_id: None}
    plan = plan_pod(facts(PodView(phase="Running", bound=True), None, owned))
    assert [type(a) for a in plan.actions] == [do.ReportIgnored]
    assert not plan.submit


def test_nothing_is_written_when_the_annotations_show_the_job() -> None:
    owned = read({KEYS.job_id: "12", KEYS.pod_uid: UID}, proven=12)
    assert owned == Ownership(job_id=12)
    assert plan_pod(facts(PodView(job_id=12), JobView(state="PENDING"), owned)) == do.Plan()


# -- binding ----------------------------------------------------------------------------------
def test_a_started_job_binds_its_pod_to_the_node_of_its_slurm_node() -> None:
    plan = plan_pod(facts(PodView(job_id=7), RUNNING_STARTED, k8s_node="n1"))
    assert plan == do.Plan((do.Reserve("n1"), do.Bind("n1", "h1", 7)))


def test_an_adopted_job_is_written_before_the_bind() -> None:
    plan = plan_pod(facts(PodView(job_id=12), RUNNING_STARTED, read({}, proven=12),
                          k8s_node="n1"))
    assert plan == do.Plan((
        do.Annotate({KEYS.job_id: "12", KEYS.pod_uid: UID, KEYS.rejected: None},
                    note="adopted job 12"),
        do.Reserve("n1"),
        do.Bind("n1", "h1", 12),
    ))


def test_a_slurm_node_without_a_kubernetes_node_is_waited_for() -> None:
    plan = plan_pod(facts(PodView(job_id=7), RUNNING_STARTED, k8s_node=None))
    assert plan == do.Plan((
        do.PodEvent("NoNodeForSlurmNode", "no slurmd Pod has hostname h1; waiting",
                    warning=True),
        do.RetryLater("Slurm node h1 has no slurmd Pod"),
    ))


# -- cancelling the job, deleting the Pod --------------------------------------------------------
@pytest.mark.parametrize(("view", "job", "why"), [
    (PodView(job_id=7, deleting=True), RUNNING_STARTED, "its Pod is being deleted"),
    (PodView(job_id=7, deleting=True), JobView(state="PENDING"), "its Pod is being deleted"),
    (PodView(job_id=7, deleting=True, bound=True, phase="Succeeded"), RUNNING_STARTED,
     "its Pod is being deleted"),
    (PodView(job_id=7, bound=True, phase="Succeeded"), RUNNING_STARTED, "its Pod is succeeded"),
    (PodView(job_id=7, bound=True, phase="Failed"), RUNNING_STARTED, "its Pod is failed"),
])
def test_the_job_of_a_pod_going_or_done_is_cancelled(view: PodView, job: JobView,
                                                     why: str) -> None:
    assert plan_pod(facts(view, job, k8s_node="n1")) == do.Plan((do.CancelJob(7, why),))


@pytest.mark.parametrize(("view", "job", "why"), [
    (PodView(job_id=7, bound=True, phase="Running"), JobView(state="CANCELLED"),
     "job 7 cancelled"),
    (PodView(job_id=7, bound=True, phase="Running"), JobView(state="TIMEOUT"), "job 7 timeout"),
    (PodView(job_id=7), JobView(state="COMPLETED"), "job 7 completed"),
    (PodView(job_id=7), JobView(state="FAILED", started=True), "job 7 failed"),
])
def test_a_pod_whose_job_ended_is_deleted(view: PodView, job: JobView | None, why: str) -> None:
    assert plan_pod(facts(view, job)) == do.Plan((do.DeletePod(why),))


@pytest.mark.parametrize(("lost", "why"), [
    ("", "job 7 of this bound Pod is no longer in Slurm (ended and purged, or lost)"),
    ("its id is now another Pod's job",
     "job 7 of this bound Pod was lost by Slurm (its id is now another Pod's job)"),
])
def test_a_bound_pod_whose_job_slurm_no_longer_has_is_deleted_as_lost(lost: str,
                                                                       why: str) -> None:
    """Slurm no longer counts the Pod on its node: it must not run on there."""
    view = PodView(job_id=7, bound=True, phase="Running")
    plan = plan_pod(facts(view, None, Ownership(job_id=7, lost=lost)))
    assert plan == do.Plan((do.DeletePod(f"{why}: Slurm no longer counts the Pod on its node",
                                         reason="SlurmJobLost"),))


def test_a_bound_pod_whose_job_id_slurm_gave_to_another_pod_is_deleted_never_rescheduled(
        ) -> None:
    """From the annotations as they stand: the id was written for this Pod, Slurm says it is
    another Pod's job now (the scheduler reads it so; the job is not this Pod's to look at)."""
    owned = ownership.read({KEYS.job_id: "7", KEYS.pod_uid: UID}, UID, KEYS, proven=None,
                           owner_of={7: "uid-2"})
    view = PodView(job_id=owned.job_id, bound=True, phase="Running")
    (action,) = plan_pod(facts(view, None, owned)).actions
    assert isinstance(action, do.DeletePod) and action.reason == "SlurmJobLost"
    assert "another Pod's job" in action.why
    # not bound yet: a new job, saying what became of the old one
    plan = plan_pod(facts(PodView(job_id=7), None, owned))
    assert plan.submit and do.PodEvent(
        "SlurmJobLost", "job 7 was lost by Slurm before it ran (its id is now another Pod's "
        "job); submitting a new one (try 1 of 3)", warning=True) in plan.actions


def test_a_bound_pod_with_ignored_annotations_is_not_said_to_be_scheduled_from_scratch() -> None:
    owned = read({KEYS.job_id: "abc"})
    (report,) = plan_pod(facts(PodView(bound=True, phase="Running"), None, owned)).actions
    assert isinstance(report, do.ReportIgnored)
    assert "from scratch" not in report.message and "bound already" in report.message


@pytest.mark.parametrize(("view", "job"), [
    (PodView(job_id=7), JobView(state="PENDING")),                        # WAIT
    (PodView(job_id=7), JobView(state="RUNNING", started=False, node="h1")),  # WAIT
    (PodView(job_id=7, bound=True, phase="Running"), RUNNING_STARTED),    # NOTHING
    (PodView(rejected=True), None),                                       # NOTHING
    (PodView(phase="Running", bound=True), None),                         # NOTHING
    (PodView(job_id=7, deleting=True), JobView(state="COMPLETED")),       # NOTHING
    (PodView(job_id=7, bound=True, phase="Succeeded"), None),              # NOTHING
])
def test_waiting_or_nothing_to_do_gives_no_actions(view: PodView, job: JobView | None) -> None:
    assert plan_pod(facts(view, job, k8s_node="n1")) == do.Plan()


@pytest.mark.parametrize(("job", "expected"), [
    (RUNNING_STARTED, (do.CancelJob(7, "its Pod was deleted"),)),
    (JobView(state="PENDING"), (do.CancelJob(7, "its Pod was deleted"),)),
    (JobView(state="COMPLETED"), ()),
    (JobView(state="CANCELLED"), ()),
    (None, ()),
])
def test_plan_deleted(job: JobView | None, expected: tuple[do.CancelJob, ...]) -> None:
    assert plan_deleted(7, job) == expected


# -- plan_submission ----------------------------------------------------------------------------
SETTINGS = translate.TranslateSettings(scheduler_name="sunk", placeholder_script="/opt/p.sh")
TAINTED = {"key": "gpu-broken", "value": "true", "effect": "NoSchedule"}
SNAP = Snapshot(
    slurm_to_k8s={"h1": "n1", "t1": "n-tainted", "c1": "n-cordoned"},
    nodes={"n1": NodeInfo("n1"), "n-tainted": NodeInfo("n-tainted", taints=(TAINTED,)),
           "n-cordoned": NodeInfo("n-cordoned", unschedulable=True)})
ALLOW = Decision()


def pod(requests: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
        uid: str | None = UID) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "p", "annotations": dict(annotations or {})}
    if uid is not None:
        meta["uid"] = uid
    return {"metadata": meta,
            "spec": {"containers": [{"name": "c", "resources": {"requests": dict(
                requests or {"cpu": "1", "memory": "1Gi"})}}]}}


def submit(p: Mapping[str, Any], decision: Decision = ALLOW, snap: Snapshot = SNAP, *,
           first_try: bool = True) -> tuple[do.PodAction, ...]:
    return plan_submission(p, decision, snap, SETTINGS, annotation_prefix=PREFIX,
                           first_try=first_try)


def test_a_good_pod_is_submitted_with_its_job_description() -> None:
    p = pod()
    (action,) = submit(p)
    assert action == do.Submit(translate.job_description(p, {}, SNAP, SETTINGS))
    assert isinstance(action, do.Submit)
    assert action.description["cpus_per_task"] == 1
    assert action.description["excluded_nodes"] == ["c1", "t1"]


def test_the_policies_mappings_go_into_the_job() -> None:
    decision = Decision(mappings={"partition": "high", "required_nodes": ["h1"]})
    (action,) = submit(pod(), decision)
    assert isinstance(action, do.Submit)
    assert action.description["partition"] == "high"
    assert action.description["required_nodes"] == ["h1"]


WARNED = Decision(warnings=(Violation("gpu-quota", "NearQuota", "9 of 10 GPUs"),),
                  mappings={"account": "a"})
MISSPELT = {f"{PREFIX}prioritty": "5", f"{PREFIX}banana": "x", "other.io/prioritty": "1",
            f"{PREFIX}priority": "5"}
FIRST_TRY_EVENTS = (
    do.PodEvent("UnknownAnnotation", f"{PREFIX}banana is not an annotation sunk reads; it is "
                "ignored", warning=True),
    do.PodEvent("UnknownAnnotation", f"{PREFIX}prioritty is not an annotation sunk reads; it is "
                f"ignored (did you mean {PREFIX}priority?)", warning=True),
    do.PodEvent("NearQuota", "gpu-quota: 9 of 10 GPUs", warning=True),
)


def test_unknown_annotations_and_warnings_are_told_on_the_first_try_only() -> None:
    p = pod(annotations=MISSPELT)
    job = translate.job_description(p, {"account": "a"}, SNAP, SETTINGS)
    assert submit(p, WARNED) == (*FIRST_TRY_EVENTS, do.Submit(job))
    assert submit(p, WARNED, first_try=False) == (do.Submit(job),)


def test_a_denial_rejects_the_pod_with_the_decisions_reason_and_message() -> None:
    denied = Decision(denials=(Violation("gpu-quota", "OverQuota", "11 of 10 GPUs"),
                               Violation("naming", "BadName", "p is too short")),
                      warnings=WARNED.warnings)
    reject = do.Reject("OverQuota", "gpu-quota: 11 of 10 GPUs\nnaming: p is too short")
    p = pod(annotations=MISSPELT)
    assert submit(p, denied) == (*FIRST_TRY_EVENTS, reject)
    assert submit(p, denied, first_try=False) == (reject,)


def test_a_denial_without_a_reason_is_policy_denied() -> None:
    denied = Decision(denials=(Violation("gpu-quota", "", "no"),))
    assert submit(pod(), denied) == (do.Reject("PolicyDenied", "gpu-quota: no"),)


def test_a_denial_is_not_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> dict[str, Any]:
        raise AssertionError("translated a denied Pod")

    monkeypatch.setattr(translate, "job_description", boom)
    denied = Decision(denials=(Violation("v", "R", "m"),))
    assert submit(pod(), denied) == (do.Reject("R", "v: m"),)


def test_an_unschedulable_pod_is_rejected_with_its_reason() -> None:
    decision = Decision(mappings={"required_nodes": ["t1"]})
    assert submit(pod(), decision) == (do.Reject(
        "PlacementConflict",
        "required node(s) excluded (t1: taint gpu-broken=true:NoSchedule): Slurm would refuse "
        "the job ('Invalid node name specified'); change the Pod"),)


def test_a_bad_quantity_rejects_the_pod() -> None:
    assert submit(pod({"cpu": "lots"})) == (
        do.Reject("InvalidPod", "cpu: invalid quantity 'lots'"),)


def test_a_field_the_api_server_always_gives_missing_is_ours_not_the_pods() -> None:
    """No uid: a fault of sunk's (or of what fed it), never a permanent rejection."""
    with pytest.raises(KeyError, match="uid"):
        submit(pod(uid=None))


@pytest.mark.parametrize("value", [["1"], "high", True, {"n": 1}])
def test_a_mapping_of_the_wrong_type_rejects_the_pod(value: object) -> None:
    (action,) = submit(pod(), Decision(mappings={"priority": value}))  # type: ignore[dict-item]
    assert action == do.Reject("InvalidPod", f"priority: {value!r} is not a whole number")


def test_a_required_node_that_is_cordoned_is_looked_at_again() -> None:
    decision = Decision(mappings={"required_nodes": ["c1"]})
    why = "required node(s) not usable yet (c1: unschedulable (cordoned)); waiting"
    assert submit(pod(), decision) == (do.RetryLater(why, show=waiting.unschedulable(why)),)


def test_a_retry_keeps_the_first_try_events_before_it() -> None:
    decision = Decision(warnings=WARNED.warnings, mappings={"required_nodes": ["c1"]})
    actions = submit(pod(annotations=MISSPELT), decision)
    assert actions[:-1] == FIRST_TRY_EVENTS
    assert isinstance(actions[-1], do.RetryLater)


@pytest.mark.parametrize(("error", "expected"), [
    (translate.Unschedulable("TooBig", "no node has 99 GPUs"),
     do.Reject("TooBig", "no node has 99 GPUs")),
    (translate.InvalidPod("cpu: bad"), do.Reject("InvalidPod", "cpu: bad")),
    (translate.NotYet("node c1 is cordoned"), do.RetryLater(
        "node c1 is cordoned", show=waiting.unschedulable("node c1 is cordoned"))),
    (translate.NoRoom("no Node has room"), do.RetryLater(
        "no Node has room", room=True, show=waiting.unschedulable("no Node has room"))),
])
def test_each_kind_of_translate_error(monkeypatch: pytest.MonkeyPatch, error: Exception,
                                      expected: do.PodAction) -> None:
    seen: list[tuple[object, ...]] = []

    def fail(*args: object) -> dict[str, Any]:
        seen.append(args)
        raise error

    monkeypatch.setattr(translate, "job_description", fail)
    p = pod()
    decision = Decision(mappings={"account": "a"})
    assert submit(p, decision) == (expected,)
    assert seen == [(p, decision.mappings, SNAP, SETTINGS, None)]  # no claims read


@pytest.mark.parametrize("error", [RuntimeError("a bug"), ValueError("bad"),
                                   KeyError("metadata"), TypeError("not a list"),
                                   LookupError("node"), IndexError("gone")])
def test_any_other_error_is_sunks_and_is_not_swallowed(monkeypatch: pytest.MonkeyPatch,
                                                        error: Exception) -> None:
    """A bug in translating is never turned into the Pod's permanent rejection: it goes up
    to the worker (which tells the Pod it is sunk's fault, and retries)."""
    def fail(*args: object) -> dict[str, Any]:
        raise error

    monkeypatch.setattr(translate, "job_description", fail)
    with pytest.raises(type(error)):
        submit(pod())


# -- Kubernetes' room: at bind, and at submit ----------------------------------------------------
def test_a_node_without_room_is_not_bound_the_job_is_refitted() -> None:
    plan = plan_pod(PodFacts("ns/p", PodView(job_id=7), Ownership(job_id=7), RUNNING_STARTED,
                             k8s_node="n1", no_room=("cpu: needs 1, 0 of 33 left",)))
    why = ("Slurm ran job 7 on h1, but Node n1 has no room for the Pod (cpu: needs 1, 0 of 33 "
           "left): the kubelet would refuse it")
    assert plan == do.Plan((
        do.PodEvent("NoRoomOnNode", f"{why}. The job is cancelled and the Pod submitted again "
                    "when a Node has room.", warning=True),
        do.Refit(7, why)))


def test_pods_slurm_does_not_count_are_reported_with_the_refit() -> None:
    plan = plan_pod(PodFacts("ns/p", PodView(job_id=7), Ownership(job_id=7), RUNNING_STARTED,
                             k8s_node="n1", no_room=("cpu: needs 1, 0 of 33 left",),
                             not_counted=("ns/a", "ns/b")))
    assert plan.actions[-1] == do.ReportNotCounted("n1", "h1", 7, ("ns/a", "ns/b"))
    assert isinstance(plan.actions[-2], do.Refit)


def test_a_refitted_job_is_replaced_without_counting_as_lost() -> None:
    running = PodFacts("ns/p", PodView(job_id=7), Ownership(job_id=7), RUNNING_STARTED,
                       k8s_node="n1", refitted=True, replaced=frozenset({1, 2, 3}))
    assert plan_pod(running) == do.Plan(
        (do.CancelJob(7, "moved: its Node had no room for the Pod"),), submit=True), (
        "cancelled again in case the first cancel failed")
    cancelled = PodFacts("ns/p", PodView(job_id=7), Ownership(job_id=7),
                         JobView(state="CANCELLED", started=True, node="h1"), refitted=True)
    assert plan_pod(cancelled) == do.Plan((), submit=True), "not deleted as an ended job"


def room_snapshot(used: Mapping[str, Mapping[str, int]]) -> Snapshot:
    alloc = {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}
    return Snapshot(slurm_to_k8s={"h1": "n1", "h2": "n2"},
                    nodes={"n1": NodeInfo("n1", allocatable=alloc),
                           "n2": NodeInfo("n2", allocatable=alloc)},
                    used=lambda node: {k: 1000 * v for k, v in used.get(node, {}).items()})


def test_nodes_without_room_are_excluded_at_submit() -> None:
    (action,) = submit(pod({"cpu": "2", "memory": "1Gi"}),
                       snap=room_snapshot({"n1": {"cpu": 3}}))
    assert isinstance(action, do.Submit)
    assert action.description["excluded_nodes"] == ["h1"]


def test_with_no_room_anywhere_the_pod_waits_rather_than_submitting() -> None:
    (action,) = submit(pod({"cpu": "2", "memory": "1Gi"}),
                       snap=room_snapshot({"n1": {"cpu": 3}, "n2": {"cpu": 4}}))
    assert isinstance(action, do.RetryLater) and action.room, "woken when room frees up"
    assert action.why.startswith("no Node has room for the Pod now (h1: no room: cpu: needs 2, "
                                 "1 of 4 left; h2: no room: cpu: needs 2, 0 of 4 left)")


def test_a_job_held_after_its_launch_failed_is_cancelled_and_replaced() -> None:
    held = JobView(state="PENDING", reason="launch_failed_requeued_held")
    plan = plan_pod(PodFacts("ns/p", PodView(job_id=7), Ownership(job_id=7), held))
    assert plan == do.Plan((
        do.CancelJob(7, "held after its launch failed (launch_failed_requeued_held); replaced"),
        do.Replace(7),
        do.PodEvent("SlurmJobLost", "job 7 is held by Slurm after its launch failed "
                    "(launch_failed_requeued_held); submitting a new one (try 1 of 3)",
                    warning=True)), submit=True)


def test_a_hold_a_person_set_is_left_to_them() -> None:
    for reason in ("JobHeldAdmin", "JobHeldUser", "Resources", ""):
        pending = JobView(state="PENDING", reason=reason)
        assert plan_pod(PodFacts("ns/p", PodView(job_id=7), Ownership(job_id=7),
                                 pending)) == do.Plan(), reason


# -- reservation ----------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(view=st.builds(PodView, phase=st.sampled_from(["Pending", "Running", "Failed"]),
                      bound=st.booleans(), deleting=st.booleans(),
                      job_id=st.one_of(st.none(), st.sampled_from([7, 12])),
                      rejected=st.booleans()),
       job=st.one_of(st.none(), st.builds(
           JobView, state=st.sampled_from(["PENDING", "RUNNING", "COMPLETED", "CANCELLED"]),
           started=st.booleans(), node=st.sampled_from(["", "h1"]))),
       proven=st.sampled_from([None, 7, 12]),
       k8s_node=st.sampled_from([None, "n1"]),
       no_room=st.sampled_from([(), ("cpu: needs 2, 1 of 4 left",)]))
def test_every_bind_comes_right_after_the_reservation_of_its_node(
        view: PodView, job: JobView | None, proven: int | None, k8s_node: str | None,
        no_room: tuple[str, ...]) -> None:
    """As kube-scheduler's Reserve before Bind: the executor counts the room at the Reserve,
    so a Bind without one would put a Pod on a Node unchecked."""
    owned = read({KEYS.job_id: "7", KEYS.pod_uid: UID}, proven=proven) \
        if proven else Ownership()
    plan = plan_pod(PodFacts("ns/p", view, owned, job, k8s_node=k8s_node, no_room=no_room))
    actions = list(plan.actions)
    for i, action in enumerate(actions):
        if isinstance(action, do.Bind):
            assert i > 0 and actions[i - 1] == do.Reserve(action.k8s_node), actions
    reserves = [a for a in actions if isinstance(a, do.Reserve)]
    assert len(reserves) == sum(isinstance(a, do.Bind) for a in actions)


def test_a_bound_pod_whose_job_slurm_runs_on_another_node_is_deleted_as_lost() -> None:
    """A slurmctld restarted from state saved before the job started runs it again on a node of
    its choice (seen in the chaos soak: bound to kwok-node-002, its job on a100-007 after the
    restart): the Pod goes, and its job with it, rather than run where Slurm does not count it."""
    view = PodView(job_id=7, bound=True, phase="Running", node="kwok-node-002")
    (action,) = plan_pod(facts(view, RUNNING_STARTED, k8s_node="kwok-node-007")).actions
    assert isinstance(action, do.DeletePod) and action.reason == "SlurmJobLost"
    assert "runs on Slurm node h1 (Node kwok-node-007)" in action.why
    assert plan_pod(facts(view, RUNNING_STARTED, k8s_node="kwok-node-002")).actions == ()
    unknown = facts(view, RUNNING_STARTED, k8s_node=None)
    assert plan_pod(unknown).actions == (), "no Node hosts its Slurm node: nothing to compare"
    in_flight = PodView(job_id=7, bound=True, phase="Pending")  # bound by the assumed cache
    assert plan_pod(facts(in_flight, RUNNING_STARTED, k8s_node="kwok-node-007")).actions == ()
