"""One gang, its Pods and its newest Slurm job -> steps (sunk.plans.gangplan), on plain data."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sunk.plans import actions as do
from sunk.plans import waiting
from sunk.plans.decide import JobView
from sunk.plans.gang import Gang, Member
from sunk.plans.gangplan import (
    MAX_RESUBMITS,
    GangFacts,
    GangJob,
    GangPlan,
    MemberFacts,
    Step,
    plan_gang,
)
from sunk.slurm.job import FINISHED_STATES, LAUNCH_FAILED_HELD, member_id

PREFIX = "sunk.coreweave.com/"
RANK, NODE, JOB_ID = PREFIX + "gang-rank", PREFIX + "gang-node", PREFIX + "job-id"
UIDS = [f"{i:08x}-aaaa-bbbb-cccc-0123456789ab" for i in range(10)]
IDS = [member_id(u) for u in UIDS]
NODES = ("h100-000", "a100-001", "h100-002", "a100-003")
K8S = {n: f"kwok-node-{n[-3:]}" for n in NODES}
PENDING = JobView(state="PENDING", reason="Resources")
STARTED = JobView(state="RUNNING", started=True, node="h100-[000-002]")
HELD = JobView(state="PENDING", reason=LAUNCH_FAILED_HELD)


def gang(n: int = 3, size: int | None = 3, *, problem: str = "", waiting: str = "") -> Gang:
    return Gang("ns", "label:train", size,
                tuple(Member(f"ns/p-{i}", UIDS[i], i) for i in range(n)), problem, waiting)


def member(i: int, **over: Any) -> MemberFacts:
    return MemberFacts(key=f"ns/p-{i}", id=IDS[i], **over)


def job(view: JobView, n: int = 3, *, job_id: int = 7,
        nodes: tuple[str, ...] | None = None, order: list[int] | None = None) -> GangJob:
    ids = tuple(IDS[i] for i in (order if order is not None else range(n)))
    if nodes is None:
        nodes = NODES[:len(ids)] if view.started else ()
    return GangJob(job_id, view, ids, nodes)


def facts(g: Gang, pods: list[MemberFacts], j: GangJob | None = None,
          **over: Any) -> GangFacts:
    return GangFacts(gang=g, pods={m.id: m for m in pods}, job=j, prefix=PREFIX,
                     k8s_nodes=over.pop("k8s_nodes", K8S), **over)


#: What precedes sunk's cancel of a job whose gang changed before it started: the job is
#: marked withdrawn (not counted as lost), so its end is not taken for Slurm's.
WITHDRAWN: tuple[Step, ...] = ((None, do.Replace(7, counted=False)),)


def three(**over: Any) -> list[MemberFacts]:
    return [member(i, **over) for i in range(3)]


def bound(i: int, rank: int, job_id: int = 7) -> Step:
    """Member i bound as rank ``rank``: the rank, node and job travel with the binding."""
    return (f"ns/p-{i}", do.Bind(K8S[NODES[rank]], NODES[rank], job_id, {
        RANK: str(rank), NODE: NODES[rank], JOB_ID: str(job_id)}))


def bind(i: int, rank: int, job_id: int = 7) -> tuple[Step, Step]:
    """Member i's room on its rank's Node reserved, then the member bound there."""
    return (f"ns/p-{i}", do.Reserve(K8S[NODES[rank]])), bound(i, rank, job_id)


def test_max_resubmits_is_three() -> None:
    assert MAX_RESUBMITS == 3


# -- no job yet ----------------------------------------------------------------------------------
def test_a_complete_gang_without_a_job_is_submitted() -> None:
    plan = plan_gang(facts(gang(), three()))
    assert plan == GangPlan(submit=True, waiting="submitting its job")


def test_a_complete_gang_of_one_is_submitted() -> None:
    assert plan_gang(facts(gang(1, 1), [member(0)])).submit


def test_an_incomplete_gang_waits_quietly_before_its_timeout() -> None:
    plan = plan_gang(facts(gang(2, 3), [member(0), member(1)], waited_for=100.0))
    assert plan == GangPlan(waiting="2 of 3 members; nothing is submitted until all exist",
                            recheck_in=200.0, show=waiting.gang_incomplete("label:train", 2, 3))
    assert plan.show is not None and plan.show.message == (
        "gang label:train waits for its members: 2 of 3 exist; it is submitted to Slurm as "
        "one job when all do.")
    just = plan_gang(facts(gang(2, 3), [member(0), member(1)], waited_for=299.5))
    assert just.steps == () and just.recheck_in == pytest.approx(0.5) and not just.submit


@pytest.mark.parametrize("waited", [300.0, 301.0, 10_000.0])
def test_an_incomplete_gang_is_told_after_its_timeout(waited: float) -> None:
    plan = plan_gang(facts(gang(2, 3), [member(0), member(1)], waited_for=waited))
    # the same words however long it waited, so the Event is told once
    message = ("gang label:train has 2 of 3 members after more than 300s; nothing is "
               "submitted until all exist")
    assert plan == GangPlan(
        tuple((f"ns/p-{i}", do.PodEvent("GangIncomplete", message, warning=True))
              for i in range(2)),
        waiting="2 of 3 members; nothing is submitted until all exist",
        show=waiting.gang_incomplete("label:train", 2, 3))
    assert not plan.submit


def test_the_incomplete_timeout_is_a_setting() -> None:
    plan = plan_gang(facts(gang(2, 3), [member(0), member(1)], waited_for=20.0,
                           incomplete_after=10.0))
    assert [type(a) for _, a in plan.steps] == [do.PodEvent, do.PodEvent]
    assert all(isinstance(a, do.PodEvent) and "after more than 10s" in a.message
               for _, a in plan.steps)
    plan = plan_gang(facts(gang(2, 3), [member(0), member(1)], waited_for=5.0,
                           incomplete_after=10.0))
    assert plan.steps == () and plan.recheck_in == 5.0


def test_an_invalid_gang_is_told_on_every_live_member_and_not_submitted() -> None:
    why = "members disagree on the gang's size: '2', '3'"
    pods = [*three(), member(3, phase="Succeeded"), member(4, deleting=True)]
    plan = plan_gang(facts(gang(problem=why, size=None), pods))
    assert plan == GangPlan(
        tuple((f"ns/p-{i}", do.PodEvent("GangInvalid", why, warning=True)) for i in range(3)),
        waiting=why)
    assert not plan.submit


def test_a_gang_waiting_for_its_job_or_podgroup_rechecks_soon() -> None:
    plan = plan_gang(facts(gang(size=None, waiting="Job train not seen yet"), three(),
                           waited_for=1e6))
    assert plan == GangPlan(waiting="Job train not seen yet", recheck_in=5.0)


def test_a_rejected_member_stops_the_gang() -> None:
    pods = [member(0), member(1, rejected=True), member(2)]
    plan = plan_gang(facts(gang(), pods))
    assert plan == GangPlan(waiting="rejected: a member can never run (see its Events)")
    # even when the gang is invalid too, or incomplete past its timeout: nothing more is said
    assert plan_gang(facts(gang(problem="x"), pods)).steps == ()
    assert plan_gang(facts(gang(2, 3), pods[:2], waited_for=1e6)).steps == ()


def test_a_rejected_member_that_ended_no_longer_stops_the_gang() -> None:
    pods = [*three(), member(3, rejected=True, phase="Failed")]
    assert plan_gang(facts(gang(), pods)).submit


def test_no_live_member_means_nothing_to_do() -> None:
    pods = [member(0, phase="Succeeded"), member(1, phase="Failed"), member(2, deleting=True)]
    assert plan_gang(facts(gang(0, 3), pods)) == GangPlan()
    assert plan_gang(facts(gang(0, None, problem="no member gives the gang's size"), [])) == (
        GangPlan())


def test_a_bound_pod_of_a_gang_not_known_yet_is_left_alone() -> None:
    """Its PodGroup, JobSet or Job not seen yet (a restarted scheduler's optional watches are
    not waited for): a bound Pod may have been bound alone, and is not deleted."""
    pods = [member(0, bound=True), member(1, bound=True)]
    plan = plan_gang(facts(gang(size=None, waiting="JobSet train not seen yet"), pods))
    assert plan == GangPlan(waiting="JobSet train not seen yet", recheck_in=5.0)


def test_a_bound_member_without_a_job_is_deleted() -> None:
    pods = [member(0, bound=True), member(1), member(2, bound=True)]
    why = "its gang has no job any more (it ended or Slurm lost it)"
    assert plan_gang(facts(gang(), pods)) == GangPlan((
        ("ns/p-0", do.DeletePod(why)), ("ns/p-2", do.DeletePod(why))))
    # a bound member already going is left alone
    assert plan_gang(facts(gang(), [member(0, bound=True, deleting=True), member(1)],
                           waited_for=0)).steps == ()


# -- a pending job -----------------------------------------------------------------------------
def test_a_pending_job_with_every_member_waits() -> None:
    plan = plan_gang(facts(gang(), three(), job(PENDING)))
    assert plan == GangPlan(waiting="job 7 pending (Resources): waiting for Slurm to start it "
                                    "on 3 nodes at once")
    plain = plan_gang(facts(gang(), three(), job(JobView(state="PENDING"))))
    assert plain.waiting == "job 7 pending: waiting for Slurm to start it on 3 nodes at once"


def test_a_running_job_whose_script_has_not_started_waits() -> None:
    plan = plan_gang(facts(gang(), three(), job(JobView(state="RUNNING", node="x"))))
    assert plan.steps == () and not plan.submit
    assert plan.waiting.startswith("job 7 running: waiting for Slurm to start it")


def test_a_started_flag_without_running_state_does_not_bind() -> None:
    plan = plan_gang(facts(gang(), three(), job(JobView(state="CONFIGURING", started=True),
                                                nodes=NODES[:3])))
    assert not any(isinstance(a, do.Bind) for _, a in plan.steps)


def test_a_job_held_by_a_person_is_waited_for_not_replaced() -> None:
    plan = plan_gang(facts(gang(), three(), job(JobView(state="PENDING",
                                                         reason="JobHeldUser"))))
    assert plan.steps == ()
    assert plan.waiting == ("job 7 pending (JobHeldUser): waiting for Slurm to start it on 3 "
                            "nodes at once")


@pytest.mark.parametrize("gone", [
    member(1, deleting=True), member(1, phase="Failed"), None,
])
def test_a_member_gone_before_start_cancels_the_job(gone: MemberFacts | None) -> None:
    pods = [member(0), member(2)] + ([gone] if gone is not None else [])
    plan = plan_gang(facts(gang(2 if gone is None else 3), pods, job(PENDING)))
    name = "p-1" if gone is not None else "member 1"
    why = f"member(s) {name} gone before the gang's job started"
    assert plan == GangPlan((*WITHDRAWN, (None, do.CancelJob(7, why))), waiting=why)
    assert not plan.submit


def test_a_member_replaced_by_a_new_pod_before_start_cancels_the_job() -> None:
    # p-1 was deleted and made again: a new uid, not the job's member
    pods = [member(0), member(2), MemberFacts("ns/p-1", IDS[9])]
    plan = plan_gang(facts(gang(), pods, job(PENDING)))
    why = "member(s) member 1 gone before the gang's job started"
    assert plan.steps == (*WITHDRAWN, (None, do.CancelJob(7, why)))


def test_a_member_added_before_start_cancels_the_job() -> None:
    # the gang grew to 4 (every Pod's size changed): the job for 3 is no longer the gang's
    plan = plan_gang(facts(gang(4, 4), [*three(), member(3)], job(PENDING)))
    why = "the gang's members changed before its job started"
    assert plan == GangPlan((*WITHDRAWN, (None, do.CancelJob(7, why))), waiting=why)


def test_a_gang_gone_invalid_before_start_cancels_the_job() -> None:
    why = "4 Pods claim a gang of 3: a gang's job has a fixed number of nodes; remove the extra"
    plan = plan_gang(facts(gang(4, 3, problem=why), [*three(), member(3)], job(PENDING)))
    assert plan == GangPlan((*WITHDRAWN, (None, do.CancelJob(7, why))), waiting=why)
    # a problem on the same Pods (an annotation edited) cancels too
    plan = plan_gang(facts(gang(problem="members disagree"), three(), job(PENDING)))
    assert plan.steps == (*WITHDRAWN, (None, do.CancelJob(7, "members disagree")))


def test_many_lost_members_are_named_five_at_most() -> None:
    n = 8
    g = gang(n, n)
    plan = plan_gang(facts(g, [member(0)], job(PENDING, n)))
    (_, (target, action)) = plan.steps
    assert target is None and isinstance(action, do.CancelJob)
    assert action.why == ("member(s) member 1, member 2, member 3, member 4, member 5 and 2 "
                          "more gone before the gang's job started")


# -- a job held after its launch failed ---------------------------------------------------------
def replaced_events(why: str, members: range) -> tuple[Step, ...]:
    return tuple((f"ns/p-{i}", do.PodEvent(
        "GangJobReplaced", f"{why}; submitting a new job for the gang", warning=True))
        for i in members)


@pytest.mark.parametrize("replaced", [frozenset(), frozenset({1}), frozenset({1, 2}),
                                      frozenset({1, 2, 3, 7})])
def test_a_held_job_is_replaced(replaced: frozenset[int]) -> None:
    plan = plan_gang(facts(gang(), three(), job(HELD), replaced=replaced))
    why = f"job 7 is held by Slurm after its launch failed ({LAUNCH_FAILED_HELD})"
    assert plan == GangPlan((
        (None, do.Replace(7)),
        (None, do.CancelJob(7, f"{why}; replaced")),
        *replaced_events(why, range(3)),
    ), waiting=why)
    assert not plan.submit  # the new job comes once the held one has ended


def test_a_held_job_is_replaced_even_if_a_member_went() -> None:
    plan = plan_gang(facts(gang(2), [member(0), member(1)], job(HELD)))
    assert plan.steps[:2] == (
        (None, do.Replace(7)),
        (None, do.CancelJob(7, f"job 7 is held by Slurm after its launch failed "
                               f"({LAUNCH_FAILED_HELD}); replaced")))
    assert [t for t, _ in plan.steps[2:]] == ["ns/p-0", "ns/p-1"]


def test_the_fourth_held_job_deletes_the_gang() -> None:
    pods = [*three(), member(3, phase="Succeeded")]
    plan = plan_gang(facts(gang(), pods, job(HELD), replaced=frozenset({1, 2, 3})))
    why = f"job 7 is held by Slurm after its launch failed ({LAUNCH_FAILED_HELD})"
    assert plan == GangPlan((
        (None, do.CancelJob(7, why)),
        *((f"ns/p-{i}", do.DeletePod(f"{why}; the gang's 4th job lost")) for i in range(3))))
    assert not any(isinstance(a, do.Replace) for _, a in plan.steps)


def test_a_replaced_job_that_ended_gets_the_gang_a_new_one() -> None:
    for state in ("CANCELLED", "FAILED", "COMPLETED"):
        plan = plan_gang(facts(gang(), three(), job(JobView(state=state)),
                               replaced=frozenset({7})))
        assert plan == GangPlan(submit=True, waiting="submitting its job"), state


def test_a_replaced_job_that_ended_with_bound_members_deletes_them() -> None:
    pods = [member(0, bound=True), member(1), member(2)]
    plan = plan_gang(facts(gang(), pods, job(JobView(state="CANCELLED", started=True),
                                             nodes=NODES[:3]), replaced=frozenset({7})))
    assert plan.steps == (("ns/p-0", do.DeletePod(
        "its gang has no job any more (it ended or Slurm lost it)")),)
    assert not plan.submit


@pytest.mark.parametrize("state", ["FAILED", "NODE_FAIL", "BOOT_FAIL"])
def test_a_job_that_failed_to_launch_is_counted_as_replaced(state: str) -> None:
    plan = plan_gang(facts(gang(), three(), job(JobView(state=state))))
    assert (None, do.Replace(7)) in plan.steps


def test_the_fourth_job_that_failed_to_launch_deletes_the_gang() -> None:
    plan = plan_gang(facts(gang(), three(), job(JobView(state="NODE_FAIL")),
                           replaced=frozenset({1, 2, 3})))
    assert not plan.submit
    assert [t for t, a in plan.steps if isinstance(a, do.DeletePod)] == [
        "ns/p-0", "ns/p-1", "ns/p-2"]


# -- a started job: binding by rank -------------------------------------------------------------
def test_a_started_job_binds_rank_r_to_the_rth_node_with_its_rank_and_node() -> None:
    plan = plan_gang(facts(gang(), three(), job(STARTED), started_for=1.0))
    assert plan == GangPlan((*bind(0, 0), *bind(1, 1), *bind(2, 2)), recheck_in=59.0,
                            waiting="binding every member")
    assert not plan.submit


def test_ranks_follow_the_job_not_the_gang_or_names() -> None:
    # the job names p-2 first: p-2 is rank 0 and gets the job's first node
    j = job(STARTED, order=[2, 0, 1])
    plan = plan_gang(facts(gang(), three(), j, started_for=0.0))
    binds = [(t, a) for t, a in plan.steps if isinstance(a, do.Bind)]
    assert binds == [bound(2, 0), bound(0, 1), bound(1, 2)]


def test_nodes_are_taken_in_the_jobs_order() -> None:
    j = job(STARTED, nodes=("h100-002", "a100-003", "h100-000"))
    plan = plan_gang(facts(gang(), three(), j))
    assert [(t, a.k8s_node, a.slurm_node, dict(a.annotations or {})[NODE])
            for t, a in plan.steps if isinstance(a, do.Bind)] == [
        ("ns/p-0", "kwok-node-002", "h100-002", "h100-002"),
        ("ns/p-1", "kwok-node-003", "a100-003", "a100-003"),
        ("ns/p-2", "kwok-node-000", "h100-000", "h100-000")]


def test_bound_members_are_skipped_and_an_all_bound_gang_needs_nothing() -> None:
    pods = [member(0, bound=True), member(1), member(2)]
    plan = plan_gang(facts(gang(), pods, job(STARTED), started_for=10.0))
    assert plan.steps == (*bind(1, 1), *bind(2, 2))
    assert plan.recheck_in == 50.0
    done = [member(i, bound=True) for i in range(3)]
    assert plan_gang(facts(gang(), done, job(STARTED), started_for=1e6)) == GangPlan()


def test_some_members_succeeded_and_others_run_keeps_the_job() -> None:
    pods = [member(0, bound=True, phase="Succeeded"), member(1, bound=True, phase="Running"),
            member(2, bound=True)]
    assert plan_gang(facts(gang(), pods, job(STARTED))) == GangPlan()


def test_a_node_without_a_kubernetes_node_retries_later() -> None:
    k8s = {n: k for n, k in K8S.items() if n != "a100-001"}
    plan = plan_gang(facts(gang(), three(), job(STARTED), k8s_nodes=k8s, started_for=5.0))
    assert plan.steps[-1] == (None, do.RetryLater("Slurm node(s) a100-001 have no slurmd Pod"))
    assert not any(t == "ns/p-1" for t, _ in plan.steps)
    assert plan.recheck_in == 55.0 and plan.waiting == "binding every member"


def test_no_kubernetes_node_at_all_retries_later() -> None:
    plan = plan_gang(facts(gang(), three(), job(STARTED), k8s_nodes={}))
    assert plan.steps == ((None, do.RetryLater(
        "Slurm node(s) h100-000, a100-001, h100-002 have no slurmd Pod")),)


@pytest.mark.parametrize("nodes", [(), ("h100-000",), NODES])
def test_a_node_list_not_matching_the_members_retries_later(nodes: tuple[str, ...]) -> None:
    plan = plan_gang(facts(gang(), three(), job(STARTED, nodes=nodes), started_for=1e6))
    assert plan == GangPlan(((None, do.RetryLater(
        f"job 7 runs on {len(nodes)} nodes for 3 members; waiting for Slurm's node list")),))


@pytest.mark.parametrize("replaced", [frozenset(), frozenset({1, 2})])
def test_binding_not_done_within_its_timeout_replaces_the_job(replaced: frozenset[int]) -> None:
    pods = [member(0, bound=True), member(1), member(2)]
    plan = plan_gang(facts(gang(), pods, job(STARTED), started_for=61.0, replaced=replaced))
    why = "job 7 started 61s ago but not every member could be bound"
    assert plan == GangPlan((
        (None, do.Replace(7)), (None, do.CancelJob(7, f"{why}; replaced")),
        *replaced_events(why, range(3))), waiting=why)


def test_binding_at_exactly_its_timeout_still_binds() -> None:
    plan = plan_gang(facts(gang(), three(), job(STARTED), started_for=60.0))
    assert [type(a) for _, a in plan.steps].count(do.Bind) == 3
    assert plan.recheck_in == 1.0


def test_binding_timeout_is_a_setting_and_counts_missing_nodes() -> None:
    plan = plan_gang(facts(gang(), three(), job(STARTED), k8s_nodes={}, started_for=11.0,
                           bind_within=10.0))
    assert plan.steps[0] == (None, do.Replace(7))


def test_the_fourth_job_not_bound_in_time_deletes_the_gang() -> None:
    plan = plan_gang(facts(gang(), [member(0, bound=True), member(1), member(2)], job(STARTED),
                           started_for=120.0, replaced=frozenset({1, 2, 3})))
    why = "job 7 started 120s ago but not every member could be bound"
    assert plan == GangPlan((
        (None, do.CancelJob(7, why)),
        *((f"ns/p-{i}", do.DeletePod(f"{why}; the gang's 4th job lost")) for i in range(3))))


@pytest.mark.parametrize("gone", [
    member(1, deleting=True, bound=True), member(1, phase="Failed", bound=True),
    member(1, phase="Failed"), None,
])
def test_a_member_gone_or_failed_after_start_cancels_the_job(gone: MemberFacts | None) -> None:
    pods = [member(0, bound=True), member(2, bound=True)] + ([gone] if gone else [])
    plan = plan_gang(facts(gang(), pods, job(STARTED), started_for=1e6))
    name = "p-1" if gone is not None else "member 1"
    assert plan == GangPlan(((None, do.CancelJob(
        7, f"member(s) {name} gone or failed after the gang started; the rest go with it")),))


def test_every_member_succeeded_cancels_the_job() -> None:
    pods = [member(i, bound=True, phase="Succeeded") for i in range(3)]
    assert plan_gang(facts(gang(0, 3), pods, job(STARTED))) == GangPlan(
        ((None, do.CancelJob(7, "every member has succeeded")),))


def test_a_failed_member_wins_over_succeeded_ones() -> None:
    pods = [member(0, bound=True, phase="Succeeded"), member(1, bound=True, phase="Failed"),
            member(2, bound=True, phase="Succeeded")]
    ((_, action),) = plan_gang(facts(gang(0, 3), pods, job(STARTED))).steps
    assert isinstance(action, do.CancelJob) and "p-1 gone or failed" in action.why


# -- the job ended --------------------------------------------------------------------------------
@pytest.mark.parametrize("state", sorted(FINISHED_STATES))
def test_a_job_that_ended_after_binding_deletes_its_live_members(state: str) -> None:
    pods = [member(0, bound=True), member(1, bound=True, phase="Succeeded"),
            member(2, bound=True, deleting=True)]
    plan = plan_gang(facts(gang(), pods, job(JobView(state=state, started=True))))
    ended = f"job 7 {state.lower()}"
    assert plan == GangPlan((("ns/p-0", do.DeletePod(f"the gang's {ended}")),),
                            waiting=f"the gang's {ended}; its members are deleted")
    assert not plan.submit


def test_a_job_that_ended_once_every_member_is_gone_needs_nothing() -> None:
    pods = [member(i, bound=True, phase="Succeeded") for i in range(3)]
    plan = plan_gang(facts(gang(0, 3), pods, job(JobView(state="COMPLETED", started=True))))
    assert plan.steps == () and not plan.submit


def test_a_job_that_ended_while_binding_deletes_every_live_member() -> None:
    pods = [member(0, bound=True), member(1, bound=True), member(2)]
    plan = plan_gang(facts(gang(), pods, job(JobView(state="CANCELLED", started=True))))
    assert [t for t, a in plan.steps if isinstance(a, do.DeletePod)] == [
        "ns/p-0", "ns/p-1", "ns/p-2"]


@pytest.mark.parametrize("state", ["CANCELLED", "TIMEOUT", "DEADLINE", "PREEMPTED"])
def test_a_job_ended_by_slurm_before_start_deletes_the_same_members(state: str) -> None:
    plan = plan_gang(facts(gang(), three(), job(JobView(state=state))))
    why = f"the gang's job 7 {state.lower()} before it started"
    assert plan == GangPlan(tuple((f"ns/p-{i}", do.DeletePod(why)) for i in range(3)))
    assert not plan.submit


def test_a_job_ended_before_start_for_other_members_lets_the_gang_resubmit() -> None:
    # the gang is made of new Pods now (p-1 was made again): the old job is not theirs
    pods = [member(0), MemberFacts("ns/p-1", IDS[9]), member(2)]
    plan = plan_gang(facts(gang(), pods, job(JobView(state="CANCELLED"))))
    assert plan == GangPlan(submit=True, waiting="submitting its job")


def test_a_job_ended_before_start_with_a_member_missing_waits_for_it() -> None:
    plan = plan_gang(facts(gang(2, 3), [member(0), member(2)], job(JobView(state="CANCELLED")),
                           waited_for=1.0))
    assert plan.steps == () and not plan.submit and plan.recheck_in == 299.0


def test_a_job_sunk_cancelled_for_a_change_does_not_delete_the_fixed_gang() -> None:
    why = "4 Pods claim a gang of 3: remove the extra Pods"
    first = plan_gang(facts(gang(4, 3, problem=why), [*three(), member(3)], job(PENDING)))
    assert (None, do.CancelJob(7, why)) in first.steps
    withdrawn = frozenset(a.lost_job for _, a in first.steps
                          if isinstance(a, do.Replace) and not a.counted)
    # the extra Pod is removed; Slurm reports the job sunk cancelled
    after = plan_gang(facts(gang(), three(), job(JobView(state="CANCELLED")),
                            withdrawn=withdrawn))
    assert after == GangPlan(submit=True, waiting="submitting its job")


def test_a_gang_whose_job_is_unknown_after_binding_deletes_the_bound() -> None:
    pods = [member(0, bound=True), member(1, bound=True), member(2, bound=True)]
    why = "its gang has no job any more (it ended or Slurm lost it)"
    assert plan_gang(facts(gang(), pods, None)).steps == tuple(
        (f"ns/p-{i}", do.DeletePod(why)) for i in range(3))


# -- the plan is a function of its inputs ----------------------------------------------------------
def test_the_same_facts_give_the_same_plan() -> None:
    f = facts(gang(), [member(0), member(1), member(2, bound=True)], job(STARTED),
              started_for=3.0)
    assert plan_gang(f) == plan_gang(f)
    # and the order the Pods are listed in does not matter
    g = dataclasses.replace(f, pods=dict(reversed(list(f.pods.items()))))
    assert plan_gang(g) == plan_gang(f)
