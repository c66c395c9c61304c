"""A gang whose members differ in shape -> one heterogeneous Slurm job (sunk.plans.hetjob),
and its job read back: each member's node in its own component."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.plans import actions as do
from sunk.plans import hetjob
from sunk.plans.gangplan import plan_gang_submission
from sunk.plans.translate import Unschedulable, gang_job_description
from sunk.slurm.job import Job, PodIdentity, job_extra, parse_extra
from tests.unit.core.test_gang_translate import SNAP, env, gang, member, submission, who

CPU = {"cpu": "2", "memory": "2Gi"}
GPU = {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "4"}


def gpu(i: int, **more: Any) -> dict[str, Any]:
    return member(i, GPU, nodeSelector={"gpu.nvidia.com/model": "H100"}, **more)


def cpu(i: int, **more: Any) -> dict[str, Any]:
    return member(i, CPU, **more)


# -- shapes ------------------------------------------------------------------------------------
def test_members_of_one_shape_are_one_component_numbered_as_they_come() -> None:
    assert hetjob.parts([cpu(0), gpu(1), gpu(2)]) == (0, 1, 1)
    assert hetjob.parts([gpu(0), cpu(1), gpu(2), cpu(3)]) == (0, 1, 0, 1)
    assert hetjob.parts([cpu(0), cpu(1)]) == (0, 0)


def test_a_different_partition_is_a_different_shape_and_a_node_list_is_not() -> None:
    a = cpu(0, )
    b = cpu(1, mappings={"partition": "cpu"})
    assert hetjob.parts([a, b]) == (0, 1)
    c = {**cpu(1), "excluded_nodes": ["h1"]}
    assert hetjob.parts([a, c]) == (0, 0)


@pytest.mark.parametrize(("said", "shape"), [
    ([], "exact"), ([None, None], "exact"), (["exact", None], "exact"),
    (["largest", "exact"], "largest"), (["exact-or-largest", None], "exact-or-largest"),
    (["exact-or-largest", "largest"], "largest")])
def test_the_gangs_choice_is_the_most_lenient_any_member_gives(said: list[str | None],
                                                               shape: str) -> None:
    assert hetjob.shape_of(said) == shape


# -- the job ----------------------------------------------------------------------------------
def test_one_shape_is_todays_one_job() -> None:
    made = hetjob.gang_jobs([gpu(0), gpu(1)], who(2), SNAP)
    assert made.jobs == (gang_job_description([gpu(0), gpu(1)], who(2), SNAP),)
    assert made.who == who(2) and made.who.parts == () and not made.fallback


def test_each_component_is_sized_exactly_and_no_gpu_goes_to_the_driver() -> None:
    members = [cpu(0), gpu(1), gpu(2)]
    made = hetjob.gang_jobs(members, who(3), SNAP)
    driver, workers = made.jobs
    assert made.who.parts == (0, 1, 1)
    assert (driver["nodes"], driver["minimum_nodes"], driver["maximum_nodes"]) == ("1", 1, 1)
    assert driver["cpus_per_task"] == 2 and driver["memory_per_node"]["number"] == 2048
    assert "tres_per_node" not in driver
    assert (workers["nodes"], workers["tasks"], workers["cpus_per_task"]) == ("2", 2, 8)
    assert workers["tres_per_node"] == "gres/gpu:h100:4"
    assert workers["memory_per_node"]["number"] == 16384


def test_every_component_names_the_gang_and_each_members_component() -> None:
    made = hetjob.gang_jobs([cpu(0), gpu(1), gpu(2)], who(3), SNAP)
    for job in made.jobs:
        owner, started = parse_extra(job["extra"])
        assert owner == made.who and owner.members == who(3).members and not started
        assert owner.parts == (0, 1, 1)
        assert env(job)["SUNK_JOB_EXTRA"] == job["extra"]
        assert job["name"] == made.jobs[0]["name"]
        assert job["admin_comment"] == made.jobs[0]["admin_comment"]
    assert "script" in made.jobs[0] and "script" not in made.jobs[1]


def test_job_wide_fields_are_rank_0s_and_component_fields_their_own() -> None:
    members = [cpu(0, mappings={"time_limit": 30, "partition": "cpu", "priority": 7}),
               gpu(1, mappings={"partition": "gpu", "time_limit": 90}), gpu(2, mappings={
                   "partition": "gpu", "time_limit": 90})]
    driver, workers = hetjob.gang_jobs(members, who(3), SNAP).jobs
    assert driver["partition"] == "cpu" and workers["partition"] == "gpu"
    assert driver["time_limit"] == workers["time_limit"] == {"set": True, "number": 30}
    assert workers["priority"] == {"set": True, "number": 7}


def test_a_components_node_lists_are_its_members_own() -> None:
    members = [{**cpu(0), "required_nodes": ["a1"]}, {**gpu(1), "excluded_nodes": ["a1", "a2"]},
               {**gpu(2), "excluded_nodes": ["a2"]}]
    driver, workers = hetjob.gang_jobs(members, who(3), SNAP).jobs
    assert driver.get("required_nodes") == ["a1"] and "excluded_nodes" not in driver
    assert workers["excluded_nodes"] == ["a1", "a2"] and "required_nodes" not in workers


@pytest.mark.parametrize("shape", ["largest"])
def test_largest_keeps_todays_one_job(shape: str) -> None:
    members = [cpu(0), gpu(1)]
    made = hetjob.gang_jobs(members, who(2), SNAP, shape)
    assert made.jobs == (gang_job_description(members, who(2), SNAP),)
    assert made.jobs[0]["tres_per_node"] == "gres/gpu:h100:4" and not made.fallback


def test_a_segment_cannot_span_components_refused_or_the_largest_shape_as_allowed() -> None:
    members = [cpu(0, mappings={"segment_size": 2}), gpu(1, mappings={"segment_size": 2})]
    with pytest.raises(Unschedulable) as refused:
        hetjob.gang_jobs(members, who(2), SNAP)
    assert refused.value.reason == "HeterogeneousUnsupported"
    assert "segment" in str(refused.value) and "gang-shape: exact-or-largest" in str(
        refused.value)
    made = hetjob.gang_jobs(members, who(2), SNAP, "exact-or-largest")
    assert made.jobs == (gang_job_description(members, who(2), SNAP),)
    assert "segment" in made.fallback


def test_more_components_than_slurm_takes_is_refused() -> None:
    many = [{**cpu(0), "cpus_per_task": c} for c in range(1, hetjob.MAX_COMPONENTS + 2)]
    assert hetjob.why_not(many, hetjob.parts(many)) is not None
    assert hetjob.why_not(many[:-1], hetjob.parts(many[:-1])) is None


def test_a_gang_larger_than_slurm_is_refused_whatever_its_components() -> None:
    members = [cpu(0), *(gpu(i) for i in range(1, 5))]
    with pytest.raises(Unschedulable) as refused:
        hetjob.gang_jobs(members, who(5), SNAP)
    assert refused.value.reason == "GangTooLarge"


# -- as the gang's plan -------------------------------------------------------------------------
def test_the_plan_submits_the_components_together() -> None:
    steps = plan_gang_submission(gang(3), who(3), [
        submission(0, do.Submit(cpu(0))), submission(1, do.Submit(gpu(1))),
        submission(2, do.Submit(gpu(2)))], SNAP)
    ((target, submit),) = steps
    assert target is None and isinstance(submit, do.SubmitGang)
    assert submit.gang.parts == (0, 1, 1) and len(submit.components) == 1
    assert submit.job["cpus_per_task"] == 2 and submit.components[0]["nodes"] == "2"


def test_a_fallback_is_told_on_every_member() -> None:
    seg = {"segment_size": 3}
    steps = plan_gang_submission(gang(2), who(2), [
        submission(0, do.Submit(cpu(0, mappings=seg))),
        submission(1, do.Submit(gpu(1, mappings=seg)))], SNAP, "exact-or-largest")
    told = [(t, a.reason) for t, a in steps if isinstance(a, do.PodEvent)]
    assert told == [(f"ns/p-{i}", "GangShapeLargest") for i in range(2)]
    assert isinstance(steps[-1][1], do.SubmitGang) and not steps[-1][1].components


# -- reading it back ----------------------------------------------------------------------------
def test_extra_carries_each_members_component_and_nothing_odd_parses() -> None:
    het = PodIdentity("ns", "label:t", "ab" * 16, "sunk", ("a" * 12, "b" * 12), (0, 1))
    assert parse_extra(job_extra(het)) == (het, False)
    assert parse_extra(job_extra(het) + ": started") == (het, True)
    text = job_extra(het)
    assert parse_extra(text.replace("parts=0,1", "parts=0"))[0] is None  # one part short
    assert parse_extra(text.replace("parts=0,1", "parts=0,x"))[0] is None
    pod = PodIdentity("ns", "p", "ab" * 16, "sunk")
    assert parse_extra(job_extra(pod) + " parts=0")[0] is None


def test_each_member_gets_the_next_node_of_its_component() -> None:
    assert hetjob.ranked_nodes([["c1"], ["g1", "g2"]], (0, 1, 1)) == ("c1", "g1", "g2")
    assert hetjob.ranked_nodes([["g1", "g2"], ["c1", "c2"]], (0, 1, 0, 1)) == (
        "g1", "c1", "g2", "c2")
    assert hetjob.ranked_nodes([["n1", "n2"]], ()) == ("n1", "n2")


def test_ranks_follow_slurms_node_order_not_the_printed_one() -> None:
    """Slurm prints an ended job's nodes sorted by name (``a100-[005,007],h100-006``); its
    tasks were numbered in node-table order, and so are the members."""
    order = {"h100-004": 4, "a100-005": 5, "h100-006": 6, "a100-007": 7}
    printed = [["h100-004"], ["a100-005", "a100-007", "h100-006"]]
    assert hetjob.ranked_nodes(printed, (0, 1, 1, 1), order) == (
        "h100-004", "a100-005", "h100-006", "a100-007")
    assert hetjob.ranked_nodes([["a100-005", "a100-007", "h100-006"]], (), order) == (
        "a100-005", "h100-006", "a100-007")
    # A node Slurm's table does not list (yet) keeps its printed place, after the rest.
    assert hetjob.ranked_nodes([["x2", "a100-007", "x1", "a100-005"]], (), order) == (
        "a100-005", "a100-007", "x2", "x1")


@pytest.mark.parametrize("components", [[["c1"]], [["c1"], ["g1"]], [[], ["g1", "g2"]],
                                        [["c1"], ["g1", "g2"], ["x"]]])
def test_node_lists_that_do_not_match_the_members_give_none(components: list[list[str]]
                                                           ) -> None:
    assert hetjob.ranked_nodes(components, (0, 1, 1)) == ()


def record(job_id: int, leader: int, offset: int, nodes: str, state: str = "RUNNING"
           ) -> dict[str, Any]:
    number = {"set": True, "infinite": False}
    return {"job_id": job_id, "job_state": [state], "nodes": nodes, "extra": "",
            "het_job_id": {**number, "number": leader},
            "het_job_offset": {**number, "number": offset}}


def test_a_listing_gives_a_heterogeneous_job_as_its_leader_with_every_components_nodes() -> None:
    plain = {"job_id": 5, "job_state": ["PENDING"], "nodes": "",
             "het_job_id": {"set": True, "infinite": False, "number": 0}}
    jobs = Job.folded([Job.from_api(r) for r in (
        record(11, 10, 1, "g[1-2]"), plain, record(10, 10, 0, "c1"),
        record(21, 20, 1, "x1"))])  # 20's leader is not listed
    assert [(j.job_id, j.nodes, j.components) for j in jobs] == [
        (5, "", ()), (10, "c1,g[1-2]", ("c1", "g[1-2]"))]
    assert not jobs[1].component and Job.from_api(record(11, 10, 1, "g1")).component
