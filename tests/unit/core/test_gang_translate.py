"""Members' job descriptions -> one multi-node job for their gang (gang_job_description)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sunk.plans import actions as do
from sunk.plans.gang import Gang, Member, gang_id
from sunk.plans.gangplan import MemberSubmission, plan_gang_submission
from sunk.plans.placement import NodeInfo, Snapshot
from sunk.plans.translate import (
    NoRoom,
    TranslateSettings,
    Unschedulable,
    gang_job_description,
    job_description,
)
from sunk.slurm.job import PodIdentity, admin_comment, member_id, parse_extra

SETTINGS = TranslateSettings(scheduler_name="sunk", placeholder_script="/opt/p.sh",
                             gpu_types={"H100": "h100", "A100": "a100"}, kill_wait_seconds=45)
MODEL = "gpu.nvidia.com/model"
SNAP = Snapshot(
    slurm_to_k8s={"h1": "n1", "h2": "n2", "a1": "n3", "a2": "n4"},
    nodes={"n1": NodeInfo("n1", labels={MODEL: "H100"}),
           "n2": NodeInfo("n2", labels={MODEL: "H100"}),
           "n3": NodeInfo("n3", labels={MODEL: "A100"}),
           "n4": NodeInfo("n4", labels={MODEL: "A100"})})
UIDS = [f"{i:08x}-aaaa-bbbb-cccc-0123456789ab" for i in range(8)]
NAME = "label:train"
GANG = PodIdentity("ns", NAME, gang_id("ns", NAME), "sunk", tuple(member_id(u) for u in UIDS[:2]))


def who(n: int) -> PodIdentity:
    return PodIdentity("ns", NAME, gang_id("ns", NAME), "sunk",
                       tuple(member_id(u) for u in UIDS[:n]))


def pod(i: int, requests: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": f"p-{i}", "uid": UIDS[i]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}],
                     **spec}}


def member(i: int, requests: dict[str, str] | None = None,
           mappings: dict[str, Any] | None = None, snap: Snapshot = SNAP,
           **spec: Any) -> dict[str, Any]:
    return job_description(pod(i, requests or {"cpu": "1", "memory": "1Gi"}, **spec),
                           mappings or {}, snap, SETTINGS)


def env(job: dict[str, Any]) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in job["environment"]]
    names = [k for k, _ in pairs]
    assert len(names) == len(set(names)), f"a variable is set twice: {names}"
    return {k: v for k, v in pairs}


# -- shape and identity -----------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_a_node_and_a_task_per_member(n: int) -> None:
    job = gang_job_description([member(i) for i in range(n)], who(n), SNAP)
    assert job["nodes"] == str(n)
    assert (job["minimum_nodes"], job["maximum_nodes"], job["tasks"]) == (n, n, n)


def test_the_job_names_the_gang_not_a_pod() -> None:
    job = gang_job_description([member(0), member(1)], GANG, SNAP)
    assert job["name"] == "gang:ns/label:train"
    assert job["admin_comment"] == admin_comment(GANG)
    assert job["admin_comment"] == f"sunk-pod-uid={gang_id('ns', NAME)} scheduler=sunk"
    assert parse_extra(job["extra"]) == (GANG, False)
    assert job["extra"] == (f"sunk-gang=ns/label:train uid={gang_id('ns', NAME)} scheduler=sunk "
                            f"members={member_id(UIDS[0])},{member_id(UIDS[1])}")


def test_the_environment_names_the_gang() -> None:
    job = gang_job_description([member(0), member(1)], GANG, SNAP)
    e = env(job)
    assert e["SUNK_POD_NAME"] == NAME
    assert e["SUNK_POD_NAMESPACE"] == "ns"
    assert e["SUNK_POD_UID"] == gang_id("ns", NAME)
    assert e["SUNK_JOB_EXTRA"] == job["extra"]
    # what is not the Pod's identity is kept from the members' jobs
    assert e["SUNK_KILL_WAIT"] == "45"
    assert e["PATH"].startswith("/usr/local/sbin")
    assert not any(UIDS[0] in line or "p-0" in line for line in job["environment"])


def test_members_are_not_changed() -> None:
    members = [member(0, mappings={"excluded_nodes": ["h1"]}),
               member(1, {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"})]
    before = copy.deepcopy(members)
    gang_job_description(members, GANG, SNAP)
    assert members == before


# -- resources: each node gets what the largest member asks -------------------------------------
def test_cpus_and_memory_are_the_per_node_maximum_even_from_different_members() -> None:
    job = gang_job_description([member(0, {"cpu": "8", "memory": "1Gi"}),
                                member(1, {"cpu": "2", "memory": "64Gi"}),
                                member(2, {"cpu": "500m", "memory": "3Gi"})], who(3), SNAP)
    assert job["cpus_per_task"] == 8
    assert job["memory_per_node"] == {"set": True, "number": 64 * 1024}


def test_the_largest_gpu_count_wins_and_a_cpu_member_gets_gpus_too() -> None:
    job = gang_job_description([member(0),
                                member(1, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}),
                                member(2, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"})],
                               who(3), SNAP)
    assert job["tres_per_node"] == "gres/gpu:8"


def test_gpu_counts_compare_as_numbers() -> None:
    # "gres/gpu:10" sorts before "gres/gpu:8" as text
    members = [dict(member(0), tres_per_node="gres/gpu:8"),
               dict(member(1), tres_per_node="gres/gpu:10")]
    assert gang_job_description(members, GANG, SNAP)["tres_per_node"] == "gres/gpu:10"


def test_no_gpus_anywhere_means_no_gres() -> None:
    job = gang_job_description([member(0), member(1)], GANG, SNAP)
    assert "tres_per_node" not in job


def test_one_gpu_type_for_all_is_kept_typed() -> None:
    h100 = {MODEL: "H100"}
    gpus = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}
    more = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}
    members = [member(0, gpus, nodeSelector=h100), member(1, more, nodeSelector=h100)]
    assert members[0]["tres_per_node"] == "gres/gpu:h100:2"
    job = gang_job_description(members, GANG, SNAP)
    assert job["tres_per_node"] == "gres/gpu:h100:4"
    assert job["excluded_nodes"] == ["a1", "a2"]


def test_typed_and_untyped_members_give_untyped_gres_of_the_most_gpus() -> None:
    typed = member(0, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"},
                   nodeSelector={MODEL: "H100"})
    untyped = member(1, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})
    assert (typed["tres_per_node"], untyped["tres_per_node"]) == ("gres/gpu:h100:8",
                                                                  "gres/gpu:2")
    job = gang_job_description([typed, untyped], GANG, SNAP)
    assert job["tres_per_node"] == "gres/gpu:8"
    # the typed member's placement still keeps the gang on its model
    assert job["excluded_nodes"] == ["a1", "a2"]
    # the order of the members does not matter for the GRES
    assert gang_job_description([untyped, typed], GANG, SNAP)["tres_per_node"] == "gres/gpu:8"


def test_two_gpu_types_give_untyped_gres() -> None:
    members = [dict(member(0), tres_per_node="gres/gpu:h100:4"),
               dict(member(1), tres_per_node="gres/gpu:a100:4")]
    assert gang_job_description(members, GANG, Snapshot({}, {}))["tres_per_node"] == (
        "gres/gpu:4")


# -- Slurm-side fields: rank 0's ---------------------------------------------------------------
def test_slurm_side_fields_are_rank_zeros() -> None:
    first = member(0, mappings={"account": "a0", "partition": "p0", "priority": 5})
    second = member(1, mappings={"account": "a1", "partition": "p1", "qos": "q1"})
    job = gang_job_description([first, second], GANG, SNAP)
    assert (job["account"], job["partition"]) == ("a0", "p0")
    assert job["priority"] == {"set": True, "number": 5}
    assert "qos" not in job
    assert job["script"] == "#!/bin/sh\nexec /opt/p.sh\n"


# -- placement -----------------------------------------------------------------------------------
def test_excluded_nodes_are_the_union_of_the_members() -> None:
    members = [member(0, mappings={"excluded_nodes": ["h1"]}),
               member(1, mappings={"excluded_nodes": ["a1", "h1"]}),
               member(2)]
    job = gang_job_description(members[:2], GANG, SNAP)
    assert job["excluded_nodes"] == ["a1", "h1"]
    job = gang_job_description([member(2), member(3)], GANG, SNAP)
    assert "excluded_nodes" not in job
    # one member's exclusions hold for all, whichever rank it has
    job = gang_job_description([member(2), members[1]], GANG, SNAP)
    assert job["excluded_nodes"] == ["a1", "h1"]


def test_required_nodes_are_the_union_of_the_members() -> None:
    job = gang_job_description([member(0, mappings={"required_nodes": ["h1"]}),
                                member(1, mappings={"required_nodes": ["h2"]})], GANG, SNAP)
    assert job["required_nodes"] == ["h1", "h2"]
    assert "excluded_nodes" not in job


def test_a_node_one_member_requires_and_another_excludes_is_unschedulable() -> None:
    members = [member(0, mappings={"required_nodes": ["h1"]}),
               member(1, nodeSelector={MODEL: "A100"})]
    assert "h1" in members[1]["excluded_nodes"]
    with pytest.raises(Unschedulable, match="requires node\\(s\\) h1 that another member "
                                            "cannot use") as caught:
        gang_job_description(members, GANG, SNAP)
    assert caught.value.reason == "PlacementConflict"
    with pytest.raises(Unschedulable):
        gang_job_description(list(reversed(members)), GANG, SNAP)


@pytest.mark.parametrize(("n", "known"), [(5, 4), (3, 2), (2, 1)])
def test_a_gang_bigger_than_slurm_is_unschedulable(n: int, known: int) -> None:
    names = ["h1", "h2", "a1", "a2"][:known]
    snap = Snapshot(slurm_to_k8s={k: v for k, v in SNAP.slurm_to_k8s.items() if k in names},
                    nodes=SNAP.nodes)
    members = [member(i % 8, snap=snap) for i in range(n)]
    with pytest.raises(Unschedulable, match=f"the gang needs {n} nodes; Slurm has {known}"
                       ) as caught:
        gang_job_description(members, who(min(n, 8)), snap)
    assert caught.value.reason == "GangTooLarge"


def test_slurm_nodes_count_even_when_not_mapped() -> None:
    # Slurm knows of more nodes than have a slurmd Pod: too large only past Slurm's count
    snap = Snapshot(slurm_to_k8s={"h1": "n1"}, nodes=SNAP.nodes,
                    slurm_nodes=frozenset({"h1", "h2", "h3"}))
    members = [dict(member(i), excluded_nodes=[]) for i in range(4)]
    with pytest.raises(Unschedulable) as caught:
        gang_job_description(members, who(4), snap)
    assert caught.value.reason == "GangTooLarge"
    job = gang_job_description(members[:3], who(3), snap)
    assert job["nodes"] == "3"


def test_too_few_usable_nodes_waits_for_room() -> None:
    members = [member(0, nodeSelector={MODEL: "H100"}), member(1), member(2)]
    with pytest.raises(NoRoom, match="the gang needs 3 nodes; only 2 can take every member"):
        gang_job_description(members, who(3), SNAP)
    assert not issubclass(NoRoom, ValueError)  # waits, not rejected
    # exactly enough is fine
    job = gang_job_description(members[:2], GANG, SNAP)
    assert job["excluded_nodes"] == ["a1", "a2"] and job["nodes"] == "2"


def test_exclusions_of_unknown_nodes_do_not_count_against_room() -> None:
    members = [member(0, mappings={"excluded_nodes": ["x1", "x2", "x3"]}), member(1)]
    job = gang_job_description(members, GANG, SNAP)
    assert job["excluded_nodes"] == ["x1", "x2", "x3"]


def test_an_unknown_cluster_is_not_checked() -> None:
    empty = Snapshot(slurm_to_k8s={}, nodes={})
    members = [member(i, snap=empty) for i in range(6)]
    job = gang_job_description(members, who(6), empty)
    assert job["nodes"] == "6" and "excluded_nodes" not in job


# -- the gang's submission as a plan (sunk.plans.gangplan.plan_gang_submission) -------------------

def gang(n: int) -> Gang:
    return Gang("ns", NAME, n, tuple(Member(f"ns/p-{i}", UIDS[i], i) for i in range(n)))


def submission(i: int, *actions: do.PodAction) -> MemberSubmission:
    return MemberSubmission(f"ns/p-{i}", f"p-{i}", actions)


WARN = do.PodEvent("UnknownAnnotation", "sunk.coreweave.com/x is not known", warning=True)


def test_every_member_submits_one_job_for_the_gang_after_its_warnings() -> None:
    steps = plan_gang_submission(gang(2), who(2), [
        submission(0, WARN, do.Submit(member(0))), submission(1, do.Submit(member(1)))], SNAP)
    *told, (target, last) = steps
    assert told == [("ns/p-0", WARN)]
    assert target is None and isinstance(last, do.SubmitGang)
    assert last.gang == who(2) and last.members == (("ns/p-0", 0), ("ns/p-1", 1))
    assert last.job == gang_job_description([member(0), member(1)], who(2), SNAP)


def test_one_member_refused_rejects_the_gang_naming_it() -> None:
    steps = plan_gang_submission(gang(3), who(3), [
        submission(0, do.Submit(member(0))),
        submission(1, WARN, do.Reject("MissingResourceRequests", "no CPU request"))], SNAP)
    assert steps == (("ns/p-1", WARN), (None, do.RejectGang(
        NAME, "MissingResourceRequests", "member p-1: no CPU request",
        ("ns/p-0", "ns/p-1", "ns/p-2"))))


def test_one_member_that_must_wait_makes_the_gang_wait() -> None:
    steps = plan_gang_submission(gang(2), who(2), [
        submission(0, do.RetryLater("namespace ns not seen yet"))], SNAP)
    assert steps == ((None, do.RetryLater("member p-0: namespace ns not seen yet")),)
    steps = plan_gang_submission(gang(2), who(2), [
        submission(0, do.Submit(member(0))), submission(1, do.RetryLater("no room", True))],
        SNAP)
    assert steps == ((None, do.RetryLater("member p-1: no room", room=True)),)


def test_a_gang_slurm_cannot_place_is_rejected_or_waits_for_room() -> None:
    conflict = plan_gang_submission(gang(2), who(2), [
        submission(0, do.Submit(member(0, mappings={"required_nodes": ["h1"]}))),
        submission(1, do.Submit(member(1, nodeSelector={MODEL: "A100"})))], SNAP)
    assert [type(a).__name__ for _, a in conflict] == ["RejectGang"]
    assert conflict[-1][1] == do.RejectGang(
        NAME, "PlacementConflict",
        "one member requires node(s) h1 that another member cannot use", ("ns/p-0", "ns/p-1"))
    full = [submission(i, do.Submit(member(i, nodeSelector={MODEL: "A100"}))) for i in range(3)]
    assert plan_gang_submission(gang(3), who(3), full, SNAP) == ((None, do.RetryLater(
        "the gang needs 3 nodes; only 2 can take every member now; waiting", room=True)),)
